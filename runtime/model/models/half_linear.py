"""Linears over bf16 / float16 weights kept as the checkpoint ships them.

A Hugging Face folder is usually stored in bfloat16. Where bf16 matmuls are native (AVX512-BF16,
AMX) the model computes in bf16 on oneDNN's packed copy; elsewhere (AVX2-only CPUs: most laptops)
it computes in float32, and a float32 ``Linear`` held the weights twice over in float32 (the
plain copy for MKL's GEMV and oneDNN's packed one): four times the file. On half tiles
(``native/kernels/common/half_linear.h``: 16 output channels interleaved, the weight's own 2-byte
values) the native kernel widens each weight to float32 as it streams it and multiplies in
float32, so the products are those of the float32 weights (widening is exact) from one copy the
file's size, and a decode step reads half the bytes. A float16 checkpoint works the same way.

Bias, padding of the last tile and ``tiled()`` are ``tiled_linear.TiledLinear``'s, so these linears
run inside ``stacked_linear``, ``moe_experts`` and ``DecodeLayer`` as the GGUF types do.
"""
from __future__ import annotations

import torch

from ..gguf.weight import GGUFWeight
from .gguf_tiles import TILE, bytes_tensor
from .tiled_linear import TiledLinear

#: checkpoint dtypes the half tiles hold, and the kernel kind of each
HALF_KINDS = {torch.bfloat16: "bf16", torch.float16: "f16"}
#: GGUF tensor types the half tiles hold as shipped
GGUF_HALF_TYPES = {"BF16": torch.bfloat16, "F16": torch.float16}
#: the kernels read the rows 32 inputs at a time
HALF_IN_MULTIPLE = 32


def gguf_half_weight(w: GGUFWeight) -> torch.Tensor:
    """A GGUF F16 / BF16 tensor's values as a [rows, cols] tensor of that dtype, over the file's
    bytes (no copy: :func:`half_tiles` makes the one the model keeps)."""
    return bytes_tensor(w.raw).view(GGUF_HALF_TYPES[w.type_name])


def half_tiles(weight: torch.Tensor) -> torch.Tensor:
    """``weight [out, in]`` (bf16 or float16) as half tiles ``[ceil(out / 16), in, 16]``: element
    ``[t, i, c]`` is input ``i`` of channel ``16 t + c``; missing channels of the last tile zero."""
    out, k = weight.shape
    pad = -out % TILE
    if pad:
        weight = torch.cat([weight, weight.new_zeros(pad, k)])
    return weight.reshape(-1, TILE, k).transpose(1, 2).contiguous()


class HalfTiledLinear(TiledLinear):
    """``y = x @ weight.T + bias`` on half tiles of a bf16 / float16 ``weight`` (``half_linear``),
    computed in float32 whatever ``x``'s dtype; ``y`` in ``x``'s dtype."""

    __slots__ = ("_args",)

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        if weight.dtype not in HALF_KINDS or weight.dim() != 2:
            raise ValueError(f"HalfTiledLinear: a 2-D bfloat16 or float16 weight, got {weight.dtype} "
                             f"{tuple(weight.shape)}")
        if weight.shape[1] % HALF_IN_MULTIPLE:
            raise ValueError(f"HalfTiledLinear: in_features must be a multiple of {HALF_IN_MULTIPLE}, "
                             f"got {weight.shape[1]}")
        self._args = (half_tiles(weight),)
        self.bias, self.out_features, self.in_features = bias, weight.shape[0], weight.shape[1]
        self.type_name = str(weight.dtype).removeprefix("torch.")

    @property
    def tile_kind(self) -> str:
        return HALF_KINDS[self._args[0].dtype]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(torch.ops.sglc_cpu.half_linear(x, self._args[0], None))
