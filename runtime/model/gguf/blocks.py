"""GGUF's block formats, decoded exactly (numpy, no torch).

A quantized tensor of R rows and C columns arrives as uint8 ``[R, C / block * bytes]`` (the
file's own bytes, memory-mapped). The decoders split each block into its integer levels and its
scales without any float rounding: the levels as integers, the float16 scales as their uint16
bits. The 4-bit types also decode to nibble pairs (``pairs=True``: byte p of a block of 32 holds
value p in its low nibble and 16 + p in its high one, the form the native q4 tiles store), which
for Q4_0 / Q4_1 are the file's bytes as they are. ``dequantize`` turns any supported type into float32 with the same float32 operations, in
the same order, as gguf-py's reference (``gguf.quants``), so the two agree bit for bit (tested).

Block layouts (llama.cpp's ggml-common.h; QK = values per block):
- Q4_0 (32, 18 B): d f16, 16 B of nibbles: value i < 16 in the low nibble of byte i, 16 + i in
  the high one; w = d * (q - 8).
- Q4_1 (32, 20 B): d, m f16, nibbles as Q4_0; w = d * q + m.
- Q5_0 (32, 22 B): d f16, qh u32 (bit i: the 5th bit of value i), nibbles; w = d * (q - 16).
- Q5_1 (32, 24 B): d, m f16, qh, nibbles; w = d * q + m.
- Q8_0 (32, 34 B): d f16, 32 int8; w = d * q.
- Q4_K (256, 144 B): d, dmin f16, 12 B of 6-bit scales and mins for 8 sub-blocks of 32, 128 B
  of nibbles (sub-block 2g in the low nibbles of bytes 32g..32g+31, 2g+1 in the high ones);
  w = (d * sc) * q - (dmin * m).
- Q5_K (256, 176 B): as Q4_K plus 32 B qh (bit j of byte i: the 5th bit of value i of sub-block j).
- Q6_K (256, 210 B): 128 B ql, 64 B qh, 16 int8 scales (one per 16 values), d f16;
  w = (d * scale) * (q - 32), q in 0..63.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tensor_types import block_shape

QK = 32  # values per block of the 32-value types and per sub-block of the K-quants
QK_K = 256  # values per K-quant super-block


def _blocks(raw: np.ndarray, name: str, rows: int, cols: int) -> np.ndarray:
    """The tensor's bytes as [rows * blocks per row, bytes per block] (a view)."""
    per, nbytes = block_shape(name)
    if cols % per:
        raise ValueError(f"{name}: {cols} columns are not a multiple of its block of {per}")
    data = np.ascontiguousarray(raw).reshape(-1)
    if data.size != rows * cols // per * nbytes:
        raise ValueError(f"{name}: {data.size} bytes for [{rows}, {cols}], expected {rows * cols // per * nbytes}")
    return data.reshape(rows * (cols // per), nbytes)


def _f16(b: np.ndarray) -> np.ndarray:
    """Two bytes per row -> their float16 bits as uint16 [n]."""
    return np.ascontiguousarray(b).view(np.uint16).reshape(-1)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32] values: the low nibbles first, then the high ones."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes (a little-endian u32: bit i for value i) -> [n, 32] bits."""
    # NOTE: bit i of the little-endian u32 is bit i % 8 of byte i // 8: unpackbits in little bit
    # order gives them in value order, one byte each (no [n, 32] uint32 temporaries at load)
    return np.unpackbits(np.ascontiguousarray(qh).reshape(-1, 4), axis=1, bitorder="little")


@dataclass(slots=True)
class Q4Blocks:
    """4-bit levels with a float16 scale and offset per block of 32: w = d * q + m (Q4_0 and
    Q4_1; Q4_0's m is -8 d, exact in float16)."""

    levels: np.ndarray | None  # uint8 [rows, cols], 0..15 (None when decoded as pairs)
    d: np.ndarray  # uint16 (float16 bits) [rows, cols / 32]
    m: np.ndarray  # uint16 [rows, cols / 32]
    pairs: np.ndarray | None = None  # nibble pairs uint8 [rows, cols / 32, 16] (see the module doc)


@dataclass(slots=True)
class Q4KBlocks:
    """Q4_K (and Q5_K): w = (d * sc) * q - (dmin * mn), d and dmin per 256 values, sc and mn per 32."""

    levels: np.ndarray | None  # uint8 [rows, cols], 0..15 (Q5_K: 0..31; None when decoded as pairs)
    d: np.ndarray  # uint16 [rows, cols / 256]
    dmin: np.ndarray  # uint16 [rows, cols / 256]
    sc: np.ndarray  # uint8 [rows, cols / 32], 0..63
    mn: np.ndarray  # uint8 [rows, cols / 32], 0..63
    pairs: np.ndarray | None = None  # nibble pairs uint8 [rows, cols / 32, 16] (see the module doc)


@dataclass(slots=True)
class Q8Blocks:
    """Q8_0: w = d * q, d float16 per block of 32."""

    levels: np.ndarray  # int8 [rows, cols]
    d: np.ndarray  # uint16 [rows, cols / 32]


def decode_q4_0(raw: np.ndarray, rows: int, cols: int, *, pairs: bool = False) -> Q4Blocks:
    b = _blocks(raw, "Q4_0", rows, cols)
    d = _f16(b[:, 0:2])
    m32 = d.view(np.float16).astype(np.float32) * np.float32(-8)
    m = m32.astype(np.float16)
    if not np.array_equal(m.astype(np.float32), m32):  # NOTE: only if 8 d overflows float16
        raise ValueError("Q4_0: a block scale too large to write as Q4_1's offset (-8 d) in float16")
    if pairs:  # NOTE: Q4_0's bytes already pair value i (low) with 16 + i (high)
        return Q4Blocks(None, d.reshape(rows, -1), m.view(np.uint16).reshape(rows, -1), b[:, 2:18].reshape(rows, -1, 16))
    return Q4Blocks(_nibbles(b[:, 2:18]).reshape(rows, cols), d.reshape(rows, -1), m.view(np.uint16).reshape(rows, -1))


def decode_q4_1(raw: np.ndarray, rows: int, cols: int, *, pairs: bool = False) -> Q4Blocks:
    b = _blocks(raw, "Q4_1", rows, cols)
    d, m = _f16(b[:, 0:2]).reshape(rows, -1), _f16(b[:, 2:4]).reshape(rows, -1)
    if pairs:
        return Q4Blocks(None, d, m, b[:, 4:20].reshape(rows, -1, 16))
    return Q4Blocks(_nibbles(b[:, 4:20]).reshape(rows, cols), d, m)


def decode_q8_0(raw: np.ndarray, rows: int, cols: int) -> Q8Blocks:
    b = _blocks(raw, "Q8_0", rows, cols)
    return Q8Blocks(np.ascontiguousarray(b[:, 2:34]).view(np.int8).reshape(rows, cols), _f16(b[:, 0:2]).reshape(rows, -1))


@dataclass(slots=True)
class Q5Blocks:
    """5-bit levels with a float16 scale per block of 32: Q5_1 w = d * q + m, Q5_0 w = d * (q - 16)
    (m None)."""

    levels: np.ndarray  # uint8 [rows, cols], 0..31
    d: np.ndarray  # uint16 [rows, cols / 32]
    m: np.ndarray | None  # uint16 [rows, cols / 32] (Q5_1)


def decode_q5_0(raw: np.ndarray, rows: int, cols: int) -> Q5Blocks:
    b = _blocks(raw, "Q5_0", rows, cols)
    q = _nibbles(b[:, 6:22]) | (_fifth_bits(b[:, 2:6]) << 4)
    return Q5Blocks(q.reshape(rows, cols), _f16(b[:, 0:2]).reshape(rows, -1), None)


def decode_q5_1(raw: np.ndarray, rows: int, cols: int) -> Q5Blocks:
    b = _blocks(raw, "Q5_1", rows, cols)
    q = _nibbles(b[:, 8:24]) | (_fifth_bits(b[:, 4:8]) << 4)
    return Q5Blocks(q.reshape(rows, cols), _f16(b[:, 0:2]).reshape(rows, -1), _f16(b[:, 2:4]).reshape(rows, -1))


def k_scales_mins(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K's 12 bytes -> the 8 sub-blocks' 6-bit scales and mins, [n, 8] each: bytes 0-3
    hold the low 6 bits of scales 0-3, 4-7 those of mins 0-3, 8-11 the low 4 bits of scale and
    min 4-7, whose top 2 bits are the top bits of bytes 0-3 (scales) and 4-7 (mins)."""
    s = scales.reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _k_levels_4bit(qs: np.ndarray) -> np.ndarray:
    """[n, 128] bytes -> [n, 256] values: sub-block 2g = low nibbles of bytes 32g.., 2g+1 = high."""
    q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (q & 0x0F).reshape(-1, QK_K)


def _k_pairs_4bit(qs: np.ndarray, rows: int) -> np.ndarray:
    """[n, 128] Q4_K nibbles -> pairs [rows, cols / 32, 16]: for sub-block 2g (low nibbles of bytes
    32g..32g+31) byte p pairs value p with 16 + p, i.e. the low nibbles of bytes 32g + p and
    32g + 16 + p; for 2g + 1 the high nibbles of the same bytes. Four uint8 operations on half the
    bytes of the levels, nothing unpacked."""
    q = qs.reshape(-1, 4, 2, 16)  # [super-block, g, first / second 16 bytes, p]
    x, y = q[:, :, 0], q[:, :, 1]
    even = (x & 0x0F) | (y << 4)  # NOTE: uint8 shift: y's high nibble falls off
    odd = (x >> 4) | (y & 0xF0)
    return np.stack([even, odd], axis=2).reshape(rows, -1, 16)


def decode_q4_k(raw: np.ndarray, rows: int, cols: int, *, pairs: bool = False) -> Q4KBlocks:
    b = _blocks(raw, "Q4_K", rows, cols)
    sc, mn = k_scales_mins(b[:, 4:16])
    d, dmin = _f16(b[:, 0:2]).reshape(rows, -1), _f16(b[:, 2:4]).reshape(rows, -1)
    if pairs:
        return Q4KBlocks(None, d, dmin, sc.reshape(rows, -1), mn.reshape(rows, -1), _k_pairs_4bit(b[:, 16:144], rows))
    return Q4KBlocks(_k_levels_4bit(b[:, 16:144]).reshape(rows, cols), d, dmin, sc.reshape(rows, -1),
                     mn.reshape(rows, -1))


def _q5k_fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 32] Q5_K qh bytes -> [n, 256] bits in value order (bit j of byte i: value i of sub-block j)."""
    return ((qh.reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1).reshape(-1, QK_K)


def decode_q5_k(raw: np.ndarray, rows: int, cols: int) -> Q4KBlocks:
    """Q5_K: Q4_K's scales with 5-bit levels (0..31)."""
    b = _blocks(raw, "Q5_K", rows, cols)
    sc, mn = k_scales_mins(b[:, 4:16])
    q = _k_levels_4bit(b[:, 48:176]) | (_q5k_fifth_bits(b[:, 16:48]) << 4)
    return Q4KBlocks(q.reshape(rows, cols), _f16(b[:, 0:2]).reshape(rows, -1), _f16(b[:, 2:4]).reshape(rows, -1),
                     sc.reshape(rows, -1), mn.reshape(rows, -1))


@dataclass(slots=True)
class Q6KBlocks:
    """Q6_K: w = (d * sc) * (q - 32), d per 256 values, an int8 sc per 16."""

    levels: np.ndarray  # uint8 [rows, cols], 0..63
    d: np.ndarray  # uint16 [rows, cols / 256]
    sc: np.ndarray  # int8 [rows, cols / 16]


def _q6_levels(b: np.ndarray) -> np.ndarray:
    """[n, 210] Q6_K blocks -> [n, 256] levels 0..63 (value order)."""
    ql = b[:, 0:128].reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 0x0F).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & 0x03).reshape(-1, 8, 32)
    return (ql | (qh << 4)).reshape(-1, QK_K)


def decode_q6_k(raw: np.ndarray, rows: int, cols: int) -> Q6KBlocks:
    b = _blocks(raw, "Q6_K", rows, cols)
    return Q6KBlocks(_q6_levels(b).reshape(rows, cols), _f16(b[:, 208:210]).reshape(rows, -1),
                     np.ascontiguousarray(b[:, 192:208]).view(np.int8).reshape(rows, -1))


def _f32(bits: np.ndarray) -> np.ndarray:
    return bits.view(np.float16).astype(np.float32)


def dequantize(name: str, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """float32 [rows, cols] of a tensor of type ``name``, bit-equal to gguf-py's dequantize."""
    if name == "F32":
        return np.ascontiguousarray(raw).view(np.float32).reshape(rows, cols).copy()
    if name == "F16":
        return np.ascontiguousarray(raw).view(np.float16).reshape(rows, cols).astype(np.float32)
    if name == "BF16":
        bits = np.ascontiguousarray(raw).view(np.uint16).reshape(rows, cols).astype(np.uint32) << 16
        return bits.view(np.float32)
    if name in ("Q4_0", "Q4_1"):
        blk = decode_q4_0(raw, rows, cols) if name == "Q4_0" else decode_q4_1(raw, rows, cols)
        q = blk.levels.reshape(-1, QK)
        d = _f32(blk.d).reshape(-1, 1)
        if name == "Q4_0":
            return (d * (q.astype(np.int8) - np.int8(8)).astype(np.float32)).reshape(rows, cols)
        return (d * q.astype(np.float32) + _f32(blk.m).reshape(-1, 1)).reshape(rows, cols)
    if name == "Q8_0":
        blk = decode_q8_0(raw, rows, cols)
        return (blk.levels.reshape(-1, QK).astype(np.float32) * _f32(blk.d).reshape(-1, 1)).reshape(rows, cols)
    if name in ("Q5_0", "Q5_1"):
        b = _blocks(raw, name, rows, cols)
        off = 4 if name == "Q5_1" else 2
        q = _nibbles(b[:, off + 4:off + 20]) | (_fifth_bits(b[:, off:off + 4]) << 4)
        d = _f32(_f16(b[:, 0:2])).reshape(-1, 1)
        if name == "Q5_0":
            return (d * (q.astype(np.int8) - np.int8(16)).astype(np.float32)).reshape(rows, cols)
        return (d * q.astype(np.float32) + _f32(_f16(b[:, 2:4])).reshape(-1, 1)).reshape(rows, cols)
    if name in ("Q4_K", "Q5_K"):
        b = _blocks(raw, name, rows, cols)
        sc, mn = k_scales_mins(b[:, 4:16])
        d = (_f32(_f16(b[:, 0:2])).reshape(-1, 1) * sc.astype(np.float32)).reshape(-1, 8, 1)
        dm = (_f32(_f16(b[:, 2:4])).reshape(-1, 1) * mn.astype(np.float32)).reshape(-1, 8, 1)
        if name == "Q4_K":
            q = _k_levels_4bit(b[:, 16:144])
        else:
            q = _k_levels_4bit(b[:, 48:176]) | (_q5k_fifth_bits(b[:, 16:48]) << 4)
        return (d * q.reshape(-1, 8, 32).astype(np.float32) - dm).reshape(rows, cols)
    if name == "Q6_K":
        b = _blocks(raw, name, rows, cols)
        q = (_q6_levels(b).astype(np.int8) - np.int8(32)).reshape(-1, 16, 16).astype(np.float32)
        scales = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
        d = (_f32(_f16(b[:, 208:210])).reshape(-1, 1) * scales).reshape(-1, 16, 1)
        return (d * q).reshape(rows, cols)
    raise ValueError(f"no decoder for GGUF type {name}")
