"""A GGUF tensor's blocks as the tensors its native tile kernel reads (``native/kernels/common/int_linear.h``).

:func:`gguf_tiles` repacks on the native binding (``sglc_cpu.gguf_tiles``: one pass, on the thread
pool, GIL released); :func:`reference_tiles` is the same repacking written in numpy, kept as the
readable statement of the layouts and as the oracle the native op is tested against bit for bit
(it is ~10-20x slower: at a 190 MB Q4_K_M file it was ~1 s of the server's start).

Both return, per type: Q4_0 / Q4_1 ``[q4 tiles, d, m]`` (Q4_0's m = -8 d), Q5_0 ``[q5 tiles, d]``,
Q5_1 ``[q5 tiles, d, m]``, Q8_0 ``[q8 tiles, d]``, Q4_K / Q5_K ``[q4 / q5 tiles, d, dmin, sc, mn]``,
Q6_K ``[q6k tiles, d, sc]`` (layouts in ``native/binding/gguf_tiles.h``); output channels padded
with zeros to a multiple of 16.
"""
from __future__ import annotations

import numpy as np
import torch

from ..gguf.blocks import (decode_q4_0, decode_q4_1, decode_q4_k, decode_q5_0, decode_q5_1, decode_q5_k, decode_q6_k,
                           decode_q8_0)
from ..gguf.weight import GGUFWeight
from ..native import load_cpu_ops
from .quantized_linear import pack_q8_tiles, tile_table

TILE = 16
#: the types :func:`gguf_tiles` repacks
TILED_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")


def bytes_tensor(raw: np.ndarray) -> torch.Tensor:
    """The weight's bytes as a uint8 tensor without a copy. A view of the read-only file map:
    DLPack shares it as is (``torch.from_numpy`` would warn about a non-writable array); numpy
    versions that cannot export read-only arrays through DLPack get a copy."""
    raw = np.ascontiguousarray(raw)
    try:
        return torch.from_dlpack(raw)
    except (BufferError, TypeError, RuntimeError):
        return torch.from_numpy(np.array(raw))


def gguf_tiles(w: GGUFWeight) -> list[torch.Tensor]:
    """``w`` repacked for its kernel by the native binding (built here on first use; a RuntimeError
    saying why where it cannot be)."""
    why = load_cpu_ops()
    if why is not None:
        raise RuntimeError(f"{w.name}: the native repacking of {w.type_name} tiles is unavailable: {why}")
    return list(torch.ops.sglc_cpu.gguf_tiles(bytes_tensor(w.raw), w.type_name, w.rows, w.cols))


def _padded(t: np.ndarray, rows: int) -> np.ndarray:
    """``t`` with zero rows appended up to ``rows`` (a tile's missing channels: zero weights)."""
    if t.shape[0] == rows:
        return t
    pad = np.zeros((rows - t.shape[0], *t.shape[1:]), dtype=t.dtype)
    return np.concatenate([t, pad])


def q4_tiles_of_pairs(pairs: np.ndarray) -> torch.Tensor:
    """Nibble pairs uint8 [out, in / 32, 16] (``decode_q4_*(pairs=True)``: byte p of a block holds
    input p and 16 + p) as q4 tiles [out / 16, in / 32, 4, 64]: the same bytes, one transposing
    copy ([tile, channel, block, load, j] -> [tile, block, load, channel, j]), what
    :func:`~.quantized_linear.pack_q4_levels` makes from the unpacked levels."""
    out, blocks, _ = pairs.shape
    n = pairs.reshape(out // TILE, TILE, blocks, 4, 4)
    return torch.from_numpy(np.ascontiguousarray(n.transpose(0, 2, 3, 1, 4)).reshape(out // TILE, blocks, 4, 64))


def _table(bits: np.ndarray, rows: int, dtype: torch.dtype) -> torch.Tensor:
    """A [out, groups] numpy table (float16 bits as uint16, or uint8) in tile order."""
    t = torch.from_numpy(np.ascontiguousarray(_padded(bits, rows)))
    return tile_table(t.view(dtype) if dtype == torch.float16 else t)


def q5_tiles(levels: np.ndarray) -> torch.Tensor:
    """5-bit levels uint8 [out, in] (out a multiple of 16) as q5 tiles [out / 16, in / 32, 5, 64]
    (``common/int_linear.h``): loads 0-3 the q4 tile of the low 4 bits, load 4 the fifth bit of
    input 16 s + 4 i + j at bit 4 s + i of byte 4 c + j."""
    out, cols = levels.shape
    blocks = levels.reshape(out, cols // 32, 32)
    low = blocks & 0x0F
    nibbles = q4_tiles_of_pairs(low[:, :, :16] | (low[:, :, 16:] << 4))
    fifth = (blocks >> 4).reshape(out, cols // 32, 8, 4)  # [channel, block, 4 s + i, j]
    plane = np.zeros((out, cols // 32, 4), dtype=np.uint8)
    for bit in range(8):
        plane |= fifth[:, :, bit] << bit
    plane = plane.reshape(out // TILE, TILE, cols // 32, 4).transpose(0, 2, 1, 3)
    plane = torch.from_numpy(np.ascontiguousarray(plane).reshape(out // TILE, cols // 32, 1, 64))
    return torch.cat([nibbles, plane], dim=2)


def q6_tiles(levels: np.ndarray) -> torch.Tensor:
    """6-bit levels uint8 [out, in] (out a multiple of 16) as q6k tiles [out / 16, in / 32, 6, 64]
    (``common/int_linear.h``): loads 0-3 the q4 tile of the low 4 bits, loads 4 + s the high 2 bits
    of inputs 16 s + 4 i + j at bits 2 i of byte 4 c + j."""
    out, cols = levels.shape
    blocks = levels.reshape(out, cols // 32, 32)
    low = blocks & 0x0F
    nibbles = q4_tiles_of_pairs(low[:, :, :16] | (low[:, :, 16:] << 4))
    high = (blocks >> 4).reshape(out, cols // 32, 2, 4, 4)  # [channel, block, s, i, j]
    planes = (high[:, :, :, 0] | (high[:, :, :, 1] << 2) | (high[:, :, :, 2] << 4) | (high[:, :, :, 3] << 6))
    planes = planes.reshape(out // TILE, TILE, cols // 32, 2, 4).transpose(0, 2, 3, 1, 4)
    planes = torch.from_numpy(np.ascontiguousarray(planes).reshape(out // TILE, cols // 32, 2, 64))
    return torch.cat([nibbles, planes], dim=2)


def reference_tiles(w: GGUFWeight) -> list[torch.Tensor]:
    """What :func:`gguf_tiles` returns, computed in numpy."""
    rows = -(-w.rows // TILE) * TILE
    name = w.type_name
    if name in ("Q4_0", "Q4_1"):
        blk = (decode_q4_0 if name == "Q4_0" else decode_q4_1)(w.raw, w.rows, w.cols, pairs=True)
        return [q4_tiles_of_pairs(_padded(blk.pairs, rows)), _table(blk.d, rows, torch.float16),
                _table(blk.m, rows, torch.float16)]
    if name in ("Q5_0", "Q5_1"):
        blk = (decode_q5_0 if name == "Q5_0" else decode_q5_1)(w.raw, w.rows, w.cols)
        out = [q5_tiles(_padded(blk.levels, rows)), _table(blk.d, rows, torch.float16)]
        return out if blk.m is None else [*out, _table(blk.m, rows, torch.float16)]
    if name == "Q8_0":
        blk = decode_q8_0(w.raw, w.rows, w.cols)
        return [pack_q8_tiles(torch.from_numpy(blk.levels)), _table(blk.d, rows, torch.float16)]
    if name in ("Q4_K", "Q5_K"):
        if name == "Q4_K":
            blk = decode_q4_k(w.raw, w.rows, w.cols, pairs=True)
            levels = q4_tiles_of_pairs(_padded(blk.pairs, rows))
        else:
            blk = decode_q5_k(w.raw, w.rows, w.cols)
            levels = q5_tiles(_padded(blk.levels, rows))
        return [levels, _table(blk.d, rows, torch.float16), _table(blk.dmin, rows, torch.float16),
                _table(blk.sc, rows, torch.uint8), _table(blk.mn, rows, torch.uint8)]
    if name == "Q6_K":
        blk = decode_q6_k(w.raw, w.rows, w.cols)
        return [q6_tiles(_padded(blk.levels, rows)), _table(blk.d, rows, torch.float16), _table(blk.sc, rows, torch.int8)]
    raise ValueError(f"{w.name}: no tile layout for GGUF type {name} (tiled: {', '.join(TILED_TYPES)})")
