"""Convert a llama-architecture GGUF file into a Hugging Face-style model folder.

The folder holds config.json, model.safetensors (float32, dequantized), tokenizer.json (built
with the ``tokenizers`` library from the GGUF's byte-level BPE vocabulary and merges),
tokenizer_config.json (with the chat template) and generation_config.json. It is written to a
temporary sibling folder and renamed into place, so a crash never leaves a half-written folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: bump when the output format changes; stale folders are then rebuilt
CONVERTER_VERSION = 1
MARKER_FILE = "sglc_convert.json"

# GGUF tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# llama.cpp pre-tokenizer names whose split is "each digit alone, then the GPT-2 regex"
_DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_GPT2_PRE = {"gpt2", "default", "gpt-2", "mpt", "olmo", "jais"}
_TOKEN_CONTROL, _TOKEN_USER_DEFINED = 3, 4


class GGUFConversionError(ValueError):
    """The GGUF file cannot be converted (unsupported architecture, tokenizer or tensor)."""


def _field(reader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (GGUF stores f32: 1e-5, not 9.99e-6)."""
    return float(str(np.float32(x)))


def gguf_config(reader) -> dict[str, Any]:
    """A transformers LlamaConfig dict from the GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GGUFConversionError(f"GGUF architecture {arch!r} is not supported (only 'llama')")
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise GGUFConversionError("GGUF with baked rope_freqs (llama3 rope scaling) is not supported")
    p = "llama."
    heads = int(_field(reader, p + "attention.head_count"))
    hidden = int(_field(reader, p + "embedding_length"))
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    head_dim = int(_field(reader, p + "attention.key_length", hidden // heads))
    rope_dims = int(_field(reader, p + "rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise GGUFConversionError(f"partial rotary (rope dims {rope_dims} != head_dim {head_dim}) unsupported")
    rope_scaling = None
    scaling_type = _field(reader, p + "rope.scaling.type")
    if scaling_type == "linear":
        rope_scaling = {"rope_type": "linear", "factor": _f32(_field(reader, p + "rope.scaling.factor"))}
    elif scaling_type not in (None, "none"):
        raise GGUFConversionError(f"GGUF rope scaling {scaling_type!r} is not supported")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(_field(reader, p + "vocab_size", len(tokens))),
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, p + "feed_forward_length")),
        "num_hidden_layers": int(_field(reader, p + "block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, p + "attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": int(_field(reader, p + "context_length", 2048)),
        "rms_norm_eps": _f32(_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": _f32(_field(reader, p + "rope.freq_base", 10000.0)),
        "rope_scaling": rope_scaling,
        "tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors),
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token_id": _field(reader, "tokenizer.ggml.padding_token_id"),
        "torch_dtype": "float32",
        "use_cache": True,
    }
    return {k: (int(v) if isinstance(v, np.integer) else v) for k, v in config.items()}


def _unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved rotary pairs -> HF halves layout).

    NOTE: llama.cpp writes rows (head, half, j) as (head, j, half); this swaps them back.
    """
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_state_dict(reader, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Dequantized float32 tensors under Hugging Face names, q/k rows in HF order."""
    from gguf.quants import dequantize

    out: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        if t.name in _GLOBAL_TENSORS:
            name = _GLOBAL_TENSORS[t.name]
        else:
            parts = t.name.split(".", 2)
            if len(parts) != 3 or parts[0] != "blk" or parts[2] not in _LAYER_TENSORS:
                raise GGUFConversionError(f"unexpected GGUF tensor {t.name!r}")
            name = f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if name.endswith("q_proj.weight"):
            w = _unpermute_rope_rows(w, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = _unpermute_rope_rows(w, config["num_key_value_heads"])
        if not (w.flags.writeable and w.flags.c_contiguous):
            w = np.array(w, order="C")  # GGUF float tensors are read-only memory maps
        out[name] = torch.from_numpy(w)
    return out


def gguf_tokenizer(reader):
    """A ``tokenizers.Tokenizer`` (byte-level BPE) equivalent to the GGUF's gpt2-style vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = _field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFConversionError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level 'gpt2')")
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    types = list(_field(reader, "tokenizer.ggml.token_type", []))
    tok = Tokenizer(
        models.BPE(vocab={s: i for i, s in enumerate(tokens)}, merges=merges, fuse_unk=False, byte_fallback=False)
    )
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in _DIGIT_SPLIT_PRE:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in _GPT2_PRE:
        tok.pre_tokenizer = byte_level
    else:
        raise GGUFConversionError(f"GGUF pre-tokenizer {pre!r} is not supported")
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    special = [AddedToken(s, special=True, normalized=False) for s, ty in zip(tokens, types) if ty == _TOKEN_CONTROL]
    user = [AddedToken(s, special=False, normalized=False) for s, ty in zip(tokens, types) if ty == _TOKEN_USER_DEFINED]
    tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise GGUFConversionError("tokenizer vocabulary size changed while adding special tokens")
    return tok


def gguf_tokenizer_config(reader) -> dict[str, Any]:
    """tokenizer_config.json content: special tokens, BOS/EOS flags and the chat template."""
    tokens = _field(reader, "tokenizer.ggml.tokens")

    def tok(key: str) -> str | None:
        i = _field(reader, f"tokenizer.ggml.{key}")
        return None if i is None else tokens[int(i)]

    types = list(_field(reader, "tokenizer.ggml.token_type", []))
    added = {
        str(i): {"content": tokens[i], "special": True, "normalized": False, "lstrip": False, "rstrip": False,
                 "single_word": False}
        for i, ty in enumerate(types)
        if ty == _TOKEN_CONTROL
    }
    return {
        "tokenizer_class": "GPT2Tokenizer",
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        "bos_token": tok("bos_token_id"),
        "eos_token": tok("eos_token_id"),
        "unk_token": tok("unknown_token_id"),
        "pad_token": tok("padding_token_id"),
        "chat_template": _field(reader, "tokenizer.chat_template"),
        "model_max_length": int(_field(reader, "llama.context_length", 2048)),
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": added,
    }


def _fingerprint(gguf_path: Path, edge: int = 4 << 20) -> str:
    """sha256 of the file's size, first and last ``edge`` bytes: names the weights, not where they live."""
    size = gguf_path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(gguf_path, "rb") as f:
        digest.update(f.read(edge))
        f.seek(max(size - edge, 0))
        digest.update(f.read(edge))
    return digest.hexdigest()


def _marker(gguf_path: Path) -> dict[str, Any]:
    # NOTE: not the path: the same wheel installed in two virtualenvs must share one conversion
    # (with the path in the marker, each venv re-converted and swapped the folder under the other's readers).
    return {"fingerprint": _fingerprint(gguf_path), "size": gguf_path.stat().st_size, "version": CONVERTER_VERSION}


def is_converted(gguf_path: str | Path, out_dir: str | Path) -> bool:
    """True when ``out_dir`` holds a complete conversion of this GGUF by this converter version."""
    marker = Path(out_dir) / MARKER_FILE
    try:
        return json.loads(marker.read_text()) == _marker(Path(gguf_path))
    except (OSError, ValueError):
        return False


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Convert ``gguf_path`` into the folder ``out_dir`` unless it is already there; returns it."""
    from gguf import GGUFReader
    from safetensors.torch import save_file

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {str(gguf_path)!r}")
    if is_converted(gguf_path, out_dir):
        return out_dir
    reader = GGUFReader(str(gguf_path))
    config = gguf_config(reader)
    tokenizer = gguf_tokenizer(reader)
    tokenizer_config = gguf_tokenizer_config(reader)
    state = gguf_state_dict(reader, config)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save(str(tmp / "tokenizer.json"))
        _write_json(tmp / "config.json", config)
        _write_json(tmp / "tokenizer_config.json", tokenizer_config)
        gen = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config[k] is not None}
        _write_json(tmp / "generation_config.json", gen)
        _write_json(tmp / MARKER_FILE, _marker(gguf_path))  # NOTE: written last: marks completeness
        _swap_into_place(tmp, out_dir, gguf_path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _swap_into_place(tmp: Path, out_dir: Path, gguf_path: Path) -> None:
    """Rename ``tmp`` to ``out_dir``; a stale ``out_dir`` is moved aside and deleted first."""
    if out_dir.exists():
        if is_converted(gguf_path, out_dir):  # another process finished first
            return
        trash = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out_dir, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, out_dir)
    except OSError:
        if not is_converted(gguf_path, out_dir):
            raise


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
