"""Linears and embeddings over GGUF tensors as shipped.

A GGUF linear keeps its file's levels and scales, repacked once into the native kernels' tile
layout (``native/kernels/common/int_linear.h``): Q4_0 and Q4_1 as q4 tiles with float16 d and m
(Q4_0's offset is -8 d, exact), Q4_K as q4 tiles with its super-block d and dmin and its 6-bit
sub-block scales and mins (``q4k_linear``), Q6_K as a q4 tile of its levels' low 4 bits plus two
loads of their high 2 bits, with its d and int8 scales per 16 inputs (``q6k_linear``: the file's
6.56 bits a weight), Q5_0, Q5_1 and Q5_K as q5 tiles (a q4 tile of the low 4 bits plus a load
of the fifth bits) with Q4_1's / Q4_K's scales (Q5_0: d alone, offset -16 d; ``q5_linear``,
``q5k_linear``), Q8_0 as q8 tiles with a float16 scale per block (``q8b_linear``); the repacking
is one native call per tensor (``gguf_tiles``). F16 and BF16 tensors keep their 2-byte values on
half tiles (``half_linear``, multiplied in float32). Nothing is
dequantized or re-quantized, so the product is llama.cpp's (same levels, same int8 activation
blocks) and memory stays at the file's size (plus a few % for unpacked K-quant scales). Where no native kernel runs (no compiler, the generic CPU level, a type
without a kernel: ``gguf.tensor_types``), the weight is dequantized (exactly, ``gguf.blocks``)
into a float linear of the compute dtype.

Embeddings are looked up from the blocks: only the rows of the tokens in a step are decoded.
"""
from __future__ import annotations

import torch

from ..gguf.tensor_types import NATIVE_TYPES
from ..gguf.weight import GGUFWeight
from .gguf_tiles import TILE, gguf_tiles
from .half_linear import GGUF_HALF_TYPES, HALF_IN_MULTIPLE, HalfTiledLinear, gguf_half_weight
from .linear import Linear
from .quantized_linear import Int4Linear
from .tiled_linear import TiledLinear, native_tile_kernels

#: types whose kernel is the q4 tiles' (4-bit levels, or 5 with one more load): they switch to a
#: float copy at the int4 kernel's row count
NIBBLE_TILE_TYPES = ("Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K")


class GGUFQ4KLinear(TiledLinear):
    """Q4_K on ``q4k_linear``: levels in q4 tiles, d / dmin per super-block, sc / mn per block."""

    __slots__ = ("_args",)
    tile_kind = "q4k"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        self._args = tuple(gguf_tiles(w))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q4k_linear(x, *self._args, None))


class GGUFQ8Linear(TiledLinear):
    """Q8_0 on ``q8b_linear``: levels in q8 tiles, a float16 scale per block and channel."""

    __slots__ = ("_tiles", "_d")
    tile_kind = "q8b"

    @property
    def _args(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._tiles, self._d

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        self._tiles, self._d = gguf_tiles(w)
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q8b_linear(x, self._tiles, self._d, None))


class GGUFQ5Linear(TiledLinear):
    """Q5_0 and Q5_1 on ``q5_linear``: levels 0..31 as q5 tiles, float16 d (and Q5_1's m) per block
    and channel; Q5_0's offset -16 d is the kernel's."""

    __slots__ = ("_args",)

    @property
    def tile_kind(self) -> str:
        return "q5_0" if self._args[2] is None else "q5_1"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        tiles, d, *m = gguf_tiles(w)  # NOTE: Q5_0 has no m
        self._args = (tiles, d, m[0] if m else None)
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q5_linear(x, *self._args, None))


class GGUFQ5KLinear(TiledLinear):
    """Q5_K on ``q5k_linear``: levels 0..31 as q5 tiles with Q4_K's d / dmin per super-block and
    sc / mn per block."""

    __slots__ = ("_args",)
    tile_kind = "q5k"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        self._args = tuple(gguf_tiles(w))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q5k_linear(x, *self._args, None))


class GGUFQ6KLinear(TiledLinear):
    """Q6_K on ``q6k_linear``: levels 0..63 as q6k tiles (4 + 2 bit planes), d per super-block, an
    int8 scale per 16 inputs."""

    __slots__ = ("_args",)
    tile_kind = "q6k"

    def __init__(self, w: GGUFWeight, bias: torch.Tensor | None) -> None:
        self._args = tuple(gguf_tiles(w))
        self.bias, self.out_features, self.in_features, self.type_name = bias, w.rows, w.cols, w.type_name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.q6k_linear(x, *self._args, None))


def _q4_tiles_linear(w: GGUFWeight, bias: torch.Tensor | None) -> Int4Linear:
    """Q4_0 / Q4_1 as the int4 linear's own tiles (its d and m are float16, as these types store them)."""
    if w.rows % TILE:
        raise ValueError(f"{w.name}: {w.rows} output channels are not a multiple of {TILE}")
    return Int4Linear(None, None, bias, w.rows, w.cols, q4=tuple(gguf_tiles(w)))


def gguf_linear(w: GGUFWeight, bias: torch.Tensor | None, dtype: torch.dtype, pack: bool, native: bool | None = None):
    """The linear for a GGUF weight: its type's native kernel (``native`` None: where
    :func:`~.tiled_linear.native_tile_kernels`; True: required; False: never), else a float ``dtype`` copy."""
    use_native = native_tile_kernels() if native is None else native
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
    if use_native and w.type_name in GGUF_HALF_TYPES and w.cols % HALF_IN_MULTIPLE == 0:
        return HalfTiledLinear(gguf_half_weight(w), bias)  # NOTE: F16 / BF16 as shipped, multiplied in float32
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
