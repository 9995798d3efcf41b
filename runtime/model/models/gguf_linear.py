"""Linears and embeddings over GGUF tensors as shipped.

A GGUF linear keeps its file's levels and scales, repacked once into the native kernels' tile
layout (``native/kernels/common/int_linear.h``): Q4_0 and Q4_1 as q4 tiles with float16 d and m
(Q4_0's offset is -8 d, exact), Q4_K as q4 tiles with its super-block d and dmin and its 6-bit
sub-block scales and mins (``q4k_linear``), Q6_K as a q4 tile of its levels' low 4 bits plus two
loads of their high 2 bits, with its d and int8 scales per 16 inputs (``q6k_linear``: the file's
6.56 bits a weight), Q5_0, Q5_1 and Q5_K as q5 tiles (a q4 tile of the low 4 bits plus a load
of the fifth bits) with Q4_1's / Q4_K's scales (Q5_0: d alone, offset -16 d; ``q5_linear``,
``q5k_linear``), Q8_0 as q8 tiles with a float16 scale per block (``q8b_linear``). Nothing is
dequantized or re-quantized, so the product is llama.cpp's (same levels, same int8 activation
blocks) and memory stays at the file's size (plus a few % for unpacked K-quant scales). Where no native kernel runs (no compiler, the generic CPU level, a type
without a kernel: ``gguf.tensor_types``), the weight is dequantized (exactly, ``gguf.blocks``)
into a float linear of the compute dtype.

Embeddings are looked up from the blocks: only the rows of the tokens in a step are decoded.
"""
from __future__ import annotations

import numpy as np
import torch

from ..gguf.blocks import (decode_q4_0, decode_q4_1, decode_q4_k, decode_q5_0, decode_q5_1, decode_q5_k, decode_q6_k,
                           decode_q8_0)
from ..gguf.tensor_types import NATIVE_TYPES
from ..gguf.weight import GGUFWeight
from ..native import kernel_info, load_cpu_ops
from .linear import Linear
from .quantized_linear import Int4Linear, pack_q8_tiles, tile_table

TILE = 16
#: types whose kernel is the q4 tiles' (4-bit levels, or 5 with one more load): they switch to a
#: float copy at the int4 kernel's row count
NIBBLE_TILE_TYPES = ("Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K")


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


class _TiledLinear:
    """Shared by the GGUF linears: bias, the padding of the last tile, the kernel's name, and
    ``tiled()``: the weight as ``moe_experts`` takes it (its kind and tensors)."""

    __slots__ = ("bias", "out_features", "in_features", "type_name")
    kernel = "native"
    tile_kind = ""

    def tiled(self) -> tuple[str, tuple[torch.Tensor, ...]]:
        return self.tile_kind, tuple(a for a in self._args if a is not None)

    def _finish(self, y: torch.Tensor) -> torch.Tensor:
        if y.shape[1] != self.out_features:  # NOTE: the padding channels of the last tile
            y = y[:, : self.out_features]
        return y if self.bias is None else y + self.bias.to(y.dtype)


class GGUFQ4KLinear(_TiledLinear):
    """Q4_K on ``q4k_linear``: levels in q4 tiles, d / dmin per super-block, sc / mn per block."""

    __slots__ = ("_args",)
    tile_kind = "q4k"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        blk = decode_q4_k(w.raw, w.rows, w.cols, pairs=True)
        rows = -(-w.rows // TILE) * TILE
        self._args = (q4_tiles_of_pairs(_padded(blk.pairs, rows)), _table(blk.d, rows, torch.float16), _table(blk.dmin, rows, torch.float16),
                      _table(blk.sc, rows, torch.uint8), _table(blk.mn, rows, torch.uint8))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q4k_linear(x, *self._args, None))


class GGUFQ8Linear(_TiledLinear):
    """Q8_0 on ``q8b_linear``: levels in q8 tiles, a float16 scale per block and channel."""

    __slots__ = ("_tiles", "_d")
    tile_kind = "q8b"

    @property
    def _args(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._tiles, self._d

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        blk = decode_q8_0(w.raw, w.rows, w.cols)
        rows = -(-w.rows // TILE) * TILE
        self._tiles = pack_q8_tiles(torch.from_numpy(blk.levels))
        self._d = _table(blk.d, rows, torch.float16)
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q8b_linear(x, self._tiles, self._d, None))


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


class GGUFQ5Linear(_TiledLinear):
    """Q5_0 and Q5_1 on ``q5_linear``: levels 0..31 as q5 tiles, float16 d (and Q5_1's m) per block
    and channel; Q5_0's offset -16 d is the kernel's."""

    __slots__ = ("_args",)

    @property
    def tile_kind(self) -> str:
        return "q5_0" if self._args[2] is None else "q5_1"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        blk = (decode_q5_0 if w.type_name == "Q5_0" else decode_q5_1)(w.raw, w.rows, w.cols)
        rows = -(-w.rows // TILE) * TILE
        self._args = (q5_tiles(_padded(blk.levels, rows)), _table(blk.d, rows, torch.float16),
                      None if blk.m is None else _table(blk.m, rows, torch.float16))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q5_linear(x, *self._args, None))


class GGUFQ5KLinear(_TiledLinear):
    """Q5_K on ``q5k_linear``: levels 0..31 as q5 tiles with Q4_K's d / dmin per super-block and
    sc / mn per block."""

    __slots__ = ("_args",)
    tile_kind = "q5k"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        blk = decode_q5_k(w.raw, w.rows, w.cols)
        rows = -(-w.rows // TILE) * TILE
        self._args = (q5_tiles(_padded(blk.levels, rows)), _table(blk.d, rows, torch.float16),
                      _table(blk.dmin, rows, torch.float16), _table(blk.sc, rows, torch.uint8),
                      _table(blk.mn, rows, torch.uint8))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q5k_linear(x, *self._args, None))


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


class GGUFQ6KLinear(_TiledLinear):
    """Q6_K on ``q6k_linear``: levels 0..63 as q6k tiles (4 + 2 bit planes), d per super-block, an
    int8 scale per 16 inputs."""

    __slots__ = ("_args",)
    tile_kind = "q6k"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        blk = decode_q6_k(w.raw, w.rows, w.cols)
        rows = -(-w.rows // TILE) * TILE
        self._args = (q6_tiles(_padded(blk.levels, rows)), _table(blk.d, rows, torch.float16),
                      _table(blk.sc, rows, torch.int8))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q6k_linear(x, *self._args, None))


def _q4_tiles_linear(w: GGUFWeight, bias: torch.Tensor | None) -> Int4Linear:
    """Q4_0 / Q4_1 as the int4 linear's own tiles (its d and m are float16, as these types store them)."""
    decode = decode_q4_0 if w.type_name == "Q4_0" else decode_q4_1
    blk = decode(w.raw, w.rows, w.cols, pairs=True)
    if w.rows % TILE:
        raise ValueError(f"{w.name}: {w.rows} output channels are not a multiple of {TILE}")
    q4 = (q4_tiles_of_pairs(blk.pairs), _table(blk.d, w.rows, torch.float16),
          _table(blk.m, w.rows, torch.float16))
    return Int4Linear(None, None, bias, w.rows, w.cols, q4=q4)


def native_gguf_kernels() -> bool:
    """Whether GGUF tensors of the native types run on the native integer kernels here (built, at
    a level whose integer kernels beat dequantizing)."""
    return load_cpu_ops() is None and kernel_info().int_linears_native


def gguf_linear(w: GGUFWeight, bias: torch.Tensor | None, dtype: torch.dtype, pack: bool, native: bool | None = None):
    """The linear for a GGUF weight: its type's native kernel (``native`` None: where
    :func:`native_gguf_kernels`; True: required; False: never), else a float ``dtype`` copy."""
    use_native = native_gguf_kernels() if native is None else native
    if use_native and w.type_name in NATIVE_TYPES:
        if w.type_name == "Q4_K":
            return GGUFQ4KLinear(w, bias)
        if w.type_name == "Q8_0":
            return GGUFQ8Linear(w, bias)
        if w.type_name == "Q6_K":
            return GGUFQ6KLinear(w, bias)
        if w.type_name in ("Q5_0", "Q5_1"):
            return GGUFQ5Linear(w, bias)
        if w.type_name == "Q5_K":
            return GGUFQ5KLinear(w, bias)
        return _q4_tiles_linear(w, bias)
    weight = torch.from_numpy(w.dequantize()).to(dtype).contiguous()
    return Linear.build(weight, None if bias is None else bias.to(dtype), pack=pack)


class GGUFEmbedding:
    """Token embedding rows decoded from a GGUF tensor's blocks per lookup (exact, any type), so
    the table stays as shipped: ``embed(ids)`` -> [len(ids), hidden] in ``dtype``."""

    __slots__ = ("weight", "dtype")

    def __init__(self, weight: GGUFWeight, dtype: torch.dtype) -> None:
        self.weight, self.dtype = weight, dtype

    @property
    def shape(self) -> tuple[int, int]:
        return self.weight.shape

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        rows = ids.detach().cpu().numpy().reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.weight.rows):
            raise IndexError(f"token id outside the vocabulary of {self.weight.rows}")
        return torch.from_numpy(self.weight.dequantize(rows)).to(device=ids.device, dtype=self.dtype)
