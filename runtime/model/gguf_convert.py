"""Convert a llama-architecture GGUF file into a Hugging Face-style model folder.

The folder holds config.json, model.safetensors (float32, dequantized), and tokenizer.json,
tokenizer_config.json (with the chat template) and generation_config.json (the stop ids), written
by :mod:`.gguf_tokenizer`, which rebuilds the model's Hugging Face tokenizer from the GGUF. It is
written to a temporary sibling folder and renamed into place, so a crash never leaves a
half-written folder.
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

from .gguf_tokenizer import TOKENIZER_FILES_VERSION, GGUFVocab, build_tokenizer, write_tokenizer_files

#: bump when the output format changes; stale folders are then rebuilt (so does a new tokenizer version)
CONVERTER_VERSION = 2
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
    return {"fingerprint": _fingerprint(gguf_path), "size": gguf_path.stat().st_size, "version": CONVERTER_VERSION,
            "tokenizer_version": TOKENIZER_FILES_VERSION}


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
    vocab = GGUFVocab.from_file(gguf_path)
    tokenizer = build_tokenizer(vocab)  # NOTE: before dequantizing: an unsupported tokenizer fails fast
    state = gguf_state_dict(reader, config)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        write_tokenizer_files(vocab, tmp, tokenizer)
        _write_json(tmp / "config.json", config)
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
