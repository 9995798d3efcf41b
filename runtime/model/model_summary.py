"""What a model is and how it would run here, read from its metadata alone (``sglc inspect-model``,
``sglc models``): a GGUF's header through ``gguf/reader.py`` (the tensor table, never the tensors),
a Hugging Face folder's config.json, tokenizer files and safetensors headers (the first 8 + N bytes
of each file). No weight is read, nothing is converted or written.

What sglc cannot run is collected in ``problems``, each the message the loader itself raises
(architecture, config, tensor type, tokenizer), so a refusal reads the same here and at load.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .chat_template_name import chat_template_name
from .default_model import DEFAULT_MODEL_NAME, is_default_model, locate_model
from .gguf import SUPPORTED_TYPES, GGUFFile, GGUFModelError, UnsupportedTensorType, check_supported
from .gguf.tensor_types import NATIVE_KERNELS, block_shape, type_name
from .gguf_tokenizer import GGUFTokenizerError, GGUFVocab
from .gguf_tokenizer import check_supported as check_tokenizer
from .model_config import SLIDING, ModelConfig
from .weights import safetensors_files, safetensors_header

#: safetensors dtypes loaded as weights (docs/models.md: float32, float16 or bfloat16 checkpoints)
FLOAT_SAFETENSORS_DTYPES = ("F32", "F16", "BF16")
_TOKENIZER_KINDS = {"gpt2": "byte-level BPE", "llama": "SentencePiece", "gemma4": "Gemma 4 BPE"}


@dataclass
class TypeUse:
    """The tensors of one type (a ggml type, or a safetensors dtype)."""

    count: int = 0
    bytes: int = 0
    parameters: int = 0
    vectors: int = 0  # of them 1-D (norms, biases: read as float32, never a linear)


@dataclass
class ModelSummary:
    """One model, from its metadata. ``problems`` empty: sglc runs it."""

    name: str  # as the user named it
    format: str  # "gguf" or "hf"
    path: str  # the .gguf file or the folder
    files: dict[str, int] = field(default_factory=dict)  # file name -> bytes
    architecture: str = ""  # the file's own (GGUF general.architecture, config.json architectures[0])
    runs_as: str | None = None  # the Hugging Face architecture sglc runs it as
    model_class: str | None = None  # e.g. "MoeForCausalLM (models/mixture.py)"
    parameters: int = 0
    tensor_types: dict[str, TypeUse] = field(default_factory=dict)
    layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    context_length: int | None = None
    rope: str | None = None
    sliding_window: int | None = None
    layer_pattern: str | None = None  # one letter a layer: S sliding, F full attention
    experts: int = 0
    experts_per_token: int = 0
    tokenizer: str | None = None
    chat_template: str = "none"
    problems: list[str] = field(default_factory=list)

    @property
    def supported(self) -> bool:
        return not self.problems

    @property
    def file_bytes(self) -> int:
        return sum(self.files.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(supported=self.supported, file_bytes=self.file_bytes)
        return d


def summarize(spec: str | os.PathLike | None) -> ModelSummary:
    """The summary of the model ``spec`` names (as ``sglc serve --model`` resolves it).

    Raises:
        FileNotFoundError / ValueError: ``spec`` names nothing (or an ambiguous hub repo); a model
            that is found but not runnable is a summary with ``problems`` instead.
    """
    path, is_gguf = locate_model(spec)
    return summarize_path(f"default ({DEFAULT_MODEL_NAME})" if is_default_model(spec) else str(spec), path, is_gguf)


def summarize_path(name: str, path: Path, is_gguf: bool) -> ModelSummary:
    """The summary of the .gguf file or Hugging Face folder at ``path`` (as :func:`locate_model` found it)."""
    if is_gguf:
        return _gguf_summary(name, path)
    if path.is_file():
        raise ValueError(f"model path {str(path)!r} is a file but not a .gguf")
    return _hf_summary(name, path)


# ------------------------------------------------------------------ GGUF

def _gguf_summary(name: str, path: Path) -> ModelSummary:
    s = ModelSummary(name, "gguf", str(path), files={path.name: path.stat().st_size})
    try:
        f = GGUFFile(path)
    except GGUFModelError as err:
        s.problems.append(str(err))
        return s
    s.architecture = f.architecture
    unsupported: dict[str, str] = {}  # type -> first tensor of it
    for t in f.reader.tensors.values():
        kind = _type_name(t.type)
        n = math.prod(t.shape)
        use = s.tensor_types.setdefault(kind, TypeUse())
        use.count += 1
        use.vectors += len(t.shape) == 1
        use.parameters += n
        s.parameters += n
        if kind in SUPPORTED_TYPES:
            per, nbytes = block_shape(kind)
            use.bytes += n // per * nbytes
        else:
            unsupported.setdefault(kind, t.name)
    arch = s.architecture
    s.context_length = _int_or_none(f.field(f"{arch}.context_length"))
    s.experts = int(f.field(f"{arch}.expert_count", 0) or 0)
    s.experts_per_token = int(f.field(f"{arch}.expert_used_count", 0) or 0)
    try:
        config = f.config_dict()
        _describe_config(s, ModelConfig.from_dict(config))
    except (GGUFModelError, ValueError, KeyError) as err:  # NOTE: KeyError: a tensor the reader needs is missing
        s.problems.append(str(err) if not isinstance(err, KeyError) else f"GGUF lacks tensor {err.args[0]!r}")
    for kind, tensor in unsupported.items():
        try:
            check_supported(kind, tensor)
        except UnsupportedTensorType as err:
            s.problems.append(str(err))
    try:
        vocab = GGUFVocab.from_metadata(f.reader.fields)
        s.tokenizer = (f"{vocab.model} ({_TOKENIZER_KINDS.get(vocab.model, 'unknown')}), pre-tokenizer "
                       f"{vocab.pre or 'none'}, {len(vocab.tokens)} tokens")
        s.chat_template = chat_template_name(vocab.chat_template)
        check_tokenizer(vocab)
    except GGUFTokenizerError as err:
        s.problems.append(str(err))
    return s


def _type_name(qtype: int) -> str:
    try:
        return type_name(qtype)
    except ValueError:  # NOTE: a type id newer than this gguf-py knows
        return f"ggml type {qtype}"


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


# ------------------------------------------------------------------ Hugging Face folder

def _hf_summary(name: str, path: Path) -> ModelSummary:
    s = ModelSummary(name, "hf", str(path))
    config_file = path / "config.json"
    if not config_file.is_file():
        s.problems.append(f"model folder {str(path)!r} has no config.json")
        return s
    try:
        d = json.loads(config_file.read_text())
    except ValueError as err:
        s.problems.append(f"{config_file}: invalid JSON ({err})")
        return s
    s.architecture = str((d.get("architectures") or ["LlamaForCausalLM"])[0])
    s.context_length = _int_or_none(d.get("max_position_embeddings"))
    try:
        _describe_config(s, ModelConfig.from_dict(d))
    except ValueError as err:
        s.problems.append(str(err))
    if d.get("quantization_config"):
        method = d["quantization_config"].get("quant_method", "?")
        s.problems.append(f"pre-quantized checkpoint (quantization_config: {method}) is not supported; "
                          "float32/float16/bfloat16 safetensors or a GGUF file are")
    try:
        files = safetensors_files(path)
    except (FileNotFoundError, ValueError) as err:
        s.problems.append(str(err))
        files = []
    for file in files:
        s.files[file.name] = file.stat().st_size
        try:
            header, _ = safetensors_header(file)
        except (OSError, ValueError) as err:
            s.problems.append(str(err))
            continue
        for key, info in header.items():
            if key == "__metadata__":
                continue
            use = s.tensor_types.setdefault(info["dtype"], TypeUse())
            n = math.prod(info["shape"])
            use.count += 1
            use.vectors += len(info["shape"]) == 1
            use.parameters += n
            use.bytes += info["data_offsets"][1] - info["data_offsets"][0]
            s.parameters += n
    other = sorted(set(s.tensor_types) - set(FLOAT_SAFETENSORS_DTYPES))
    if other:
        s.problems.append(f"safetensors dtypes {', '.join(other)} are not read as weights; supported: "
                          f"{', '.join(FLOAT_SAFETENSORS_DTYPES)}")
    s.tokenizer, template = _hf_tokenizer(path, s)
    s.chat_template = chat_template_name(template)
    return s


def _hf_tokenizer(path: Path, s: ModelSummary) -> tuple[str | None, str | None]:
    """(tokenizer kind, chat template source) of a Hugging Face folder."""
    tok_file = path / "tokenizer.json"
    if not tok_file.is_file():
        s.problems.append(f"no tokenizer.json in model folder {str(path)!r}")
        return None, None
    tok = json.loads(tok_file.read_text())
    model = tok.get("model") or {}
    pre = (tok.get("pre_tokenizer") or {}).get("type")
    size = len(model.get("vocab") or ()) + len(tok.get("added_tokens") or ())
    kind = f"{model.get('type', '?')} (tokenizer.json{', ' + pre + ' pre-tokenizer' if pre else ''}), {size} tokens"
    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    template = cfg.get("chat_template")
    if isinstance(template, list):  # NOTE: named templates: the default one
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    if template is None and (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text()
    return kind, template


# ------------------------------------------------------------------ shared

def _describe_config(s: ModelSummary, c: ModelConfig) -> None:
    from .models import get_model_class  # NOTE: here: the model classes pull in the attention backends

    cls = get_model_class(c.architecture)
    s.runs_as = c.architecture
    s.model_class = f"{cls.__name__} (models/{cls.__module__.rsplit('.', 1)[-1]}.py)"
    s.layers, s.hidden_size, s.vocab_size = c.num_hidden_layers, c.hidden_size, c.vocab_size
    s.context_length = c.max_position_embeddings
    rope = f"theta {_num(c.rope_theta)}"
    if c.rope_scaling:
        sc = c.rope_scaling
        extra = f" x{_num(sc['factor'])}" if sc.get("factor") else ""
        orig = sc.get("original_max_position_embeddings")
        rope += f", {sc['rope_type']}{extra}" + (f" from {orig}" if orig else "")
    if c.partial_rotary_factor < 1:
        rope += f", partial {c.partial_rotary_factor:g} of each head"
    if c.local_rope_theta is not None:
        rope += f"; sliding layers theta {_num(c.local_rope_theta)}"
    s.rope = rope
    s.sliding_window = c.sliding_window
    if c.layer_types and c.sliding_window:
        s.layer_pattern = "".join("S" if t == SLIDING else "F" for t in c.layer_types)
    s.experts, s.experts_per_token = c.num_experts, c.num_experts_per_tok


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _half_tiles(kind: str, level: str) -> str:
    return f"native {kind.lower()} tiles ({level}), kept as shipped, multiplied in float32"


def kernel_plan(s: ModelSummary, quantization: str, dtype: str, device: str, level: str,
                native: bool) -> dict[str, str]:
    """Which kernel runs each tensor type under the engine's settings (``quantization`` / ``dtype``
    as EngineConfig resolves them, ``device``), at CPU ``level``; ``native``: whether the native
    integer and half-tile kernels are on at that level (they are not at "generic" or with
    SGLC_NATIVE_OPS=0)."""
    plan: dict[str, str] = {}
    for kind, use in s.tensor_types.items():
        if s.format == "gguf":
            if kind not in SUPPORTED_TYPES:
                plan[kind] = "refused (no reader)"
            elif use.vectors == use.count:
                plan[kind] = "1-D only (norms, biases): read as float32"
            elif quantization == "none" or device != "cpu":
                plan[kind] = f"decoded to {dtype} at load (quantization none)"
            elif kind in ("F16", "BF16") and native:
                plan[kind] = _half_tiles(kind, level)
            elif kind in NATIVE_KERNELS and native:
                plan[kind] = f"native {NATIVE_KERNELS[kind]} ({level}), kept as shipped"
            elif kind in NATIVE_KERNELS:
                plan[kind] = f"decoded to {dtype} at load (no native integer kernel at level {level})"
            else:
                plan[kind] = f"decoded to {dtype} at load"
        elif kind not in FLOAT_SAFETENSORS_DTYPES:
            plan[kind] = "refused"
        elif quantization == "none" and kind in ("BF16", "F16") and dtype == "float32" and device == "cpu" and native:
            plan[kind] = _half_tiles(kind, level)
        elif quantization == "none":
            plan[kind] = f"{dtype} linears (torch{', oneDNN-packed' if device == 'cpu' else ''})"
        else:
            plan[kind] = f"{quantization} weight-only linears, quantized at load"
    return plan
