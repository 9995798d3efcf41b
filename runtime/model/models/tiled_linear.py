"""What the linears on native tiles share, and how the ops that run several linears in one call
(``moe_experts``, ``stacked_linear``, ``DecodeLayer``) find a linear's tiles.

The tiles are the GGUF types' (``gguf_linear``: q4 / q5 / q6k / q8 tiles with their scales), bf16 /
float16 half tiles (``half_linear``), and the int4 linear's q4 tiles (``quantized_linear``).
"""
from __future__ import annotations

import torch

from ..native import kernel_info, load_cpu_ops
from .quantized_linear import Int4Linear, RowDispatchLinear


def native_tile_kernels() -> bool:
    """Whether the native tile kernels (the GGUF types', the half tiles') run here: built, at a
    SIMD level (the generic level's scalar reference is slower than dequantizing / torch's float
    kernels)."""
    return load_cpu_ops() is None and kernel_info().int_linears_native


class TiledLinear:
    """Shared by the linears on native tiles (the GGUF types', ``half_linear.HalfTiledLinear``'s):
    bias, the padding of the last tile, the kernel's name, and ``tiled()``: the weight as
    ``moe_experts``, ``stacked_linear`` and ``DecodeLayer`` take it (its kind and tensors)."""

    __slots__ = ("bias", "out_features", "in_features", "type_name")
    kernel = "native"
    tile_kind = ""

    def tiled(self) -> tuple[str, tuple[torch.Tensor, ...]]:
        return self.tile_kind, tuple(a for a in self._args if a is not None)

    def _finish(self, y: torch.Tensor) -> torch.Tensor:
        if y.shape[1] != self.out_features:  # NOTE: the padding channels of the last tile
            y = y[:, : self.out_features]
        return y if self.bias is None else y + self.bias.to(y.dtype)


def tiled_for_few_rows(linear) -> tuple[TiledLinear | Int4Linear, int | float] | None:
    """The native tiled linear serving ``linear``'s few-row calls and the row count up to which it
    does (a :class:`RowDispatchLinear` hands larger calls to its float copy), or None where
    ``linear`` is not one: what the ops running several linears in one call (``moe_experts``,
    ``stacked_linear``, ``DecodeLayer``) can take. That is a GGUF linear on its type's tiles, a
    bf16 / float16 weight on half tiles (``half_linear``), or an
    int4 linear on q4 tiles (Q4_0 / Q4_1 files, ``--quantization int4``) without a bias: its
    kernel adds a bias before rounding, where those ops add it after."""
    small, rows = (linear.small, linear.min_rows) if isinstance(linear, RowDispatchLinear) else (linear, float("inf"))
    if isinstance(small, TiledLinear):
        return small, rows
    if isinstance(small, Int4Linear) and small.kernel == "native" and small.bias is None:
        return small, rows
    return None
