"""Test helpers: GGUF tensors of every type, made without llama.cpp's quantizer, and tiny GGUF files.

gguf-py quantizes the 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the float ones but not
the K-quants; a K-quant block is any bytes with finite float16 scales, so random blocks with
small d and dmin are valid Q4_K / Q5_K / Q6_K tensors (their dequantization is defined for every
bit pattern)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

K_TYPES = ("Q4_K", "Q5_K", "Q6_K")


def gguf_tensor(name: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Raw uint8 [rows, bytes per row] (float32 [rows, cols] for F32) of a tensor of type ``name``."""
    rng = np.random.default_rng(seed)
    if name in K_TYPES:
        per, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
        raw = rng.integers(0, 256, size=(rows, cols // per * nbytes), dtype=np.uint8)
        b = raw.reshape(-1, nbytes)

        def f16(n: int) -> np.ndarray:
            return (rng.standard_normal(n) * 0.005).astype(np.float16).view(np.uint8).reshape(n, 2)

        if name == "Q6_K":
            b[:, 208:210] = f16(len(b))
        else:
            b[:, 0:2], b[:, 2:4] = f16(len(b)), f16(len(b))
        return raw
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    w[:, : min(cols, 64)] += np.linspace(-0.5, 0.5, rows, dtype=np.float32)[:, None]  # blocks with offsets
    raw = quants.quantize(w, GGMLQuantizationType[name])
    return raw if raw.dtype == np.uint8 else raw.view(np.uint8).reshape(rows, -1)


def write_gguf(path: Path, arch: str, tensors: dict[str, np.ndarray], raw: dict | None = None) -> Path:
    """A one-layer GGUF of ``arch`` (no tokenizer) written by gguf-py's GGUFWriter; ``raw``: name ->
    (blocks as uint8 rows, ggml type) for quantized tensors."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_context_length(64)
    for name, value in tensors.items():
        w.add_tensor(name, value)
    for name, (data, kind) in (raw or {}).items():
        w.add_tensor(name, data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
