"""Weight-only quantized linears on packed-integer CPU kernels (torch's, and a native int8 one).

At one decode stream a step reads every weight once, so its cost is the weights' bytes: ~540 MB
in fp32, ~270 MB in bf16, ~85 MB at 4 bits. These linears keep the weights packed and run on
torch's CPU weight-only kernels, with bf16 activations (the kernels' fast path; fp32 activations
fall back to a path ~20x slower):

- :class:`Int4Linear`: ``_weight_int4pack_mm_for_cpu``, asymmetric groups of 32 along the input
  (``w = (q - 8) * scale + zero``, ``q`` in 0..15). This is GGUF's Q4_1 block layout (``w = d*q +
  m`` per 32 weights; ``zero = m + 8 d``), so a Q4_1 checkpoint's levels come back exactly (the
  scales are kept in bf16: the only rounding added).
- :class:`Int8Linear`: symmetric per output channel; on the native VNNI kernel where it builds
  (activations quantized to int8 per block of 32, llama.cpp's Q8 scheme), else
  ``_weight_int8pack_mm``. The lm_head uses it in both modes: measured teacher-forced against
  the fp32 model (8 prompts x 32 tokens, every position through the int4 kernels), an int4
  model's top-1 agreement was 96.9% with torch's int8 head and 97.3% with the VNNI one, 83.6%
  with an int4 head, and 89.8% with FBGEMM's dynamic int8 (activations quantized per ROW: too
  coarse), against 98.0% with a bf16 head.

Quantizing a dequantized GGUF tensor with the same block rule recovers its levels: llama.cpp's
Q4_1 quantizer maps each block's min and max to 0 and 15, so min/max of the dequantized block
give back ``m`` and ``d``.
"""
from __future__ import annotations

import torch

from ..native import load_cpu_ops

INT4_GROUP = 32  # GGUF's block size
QUANTIZATIONS = ("none", "int8", "int4")


class QuantizationError(ValueError):
    """A weight cannot be quantized as asked (shape, device)."""


def _check(weight: torch.Tensor, what: str) -> None:
    if weight.device.type != "cpu":
        raise QuantizationError(f"{what}: weight-only quantized linears run on CPU only (got {weight.device})")
    if weight.dim() != 2:
        raise QuantizationError(f"{what}: expected a 2-D weight [out, in], got {tuple(weight.shape)}")


def int4_levels(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_1's rule on ``weight [out, in]``: per group of 32 inputs, ``lo`` = min, ``scale`` =
    (max - min) / 15, levels ``q`` = round((w - lo) / scale) in 0..15, so ``w ~ lo + scale * q``.
    Returns ``q`` int32 ``[out, in]``, ``scale`` and ``lo`` float32 ``[out, in / 32]``."""
    out, inp = weight.shape
    w = weight.float().reshape(out, inp // INT4_GROUP, INT4_GROUP)
    lo = w.amin(-1, keepdim=True)
    scale = (w.amax(-1, keepdim=True) - lo) / 15
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((w - lo) / safe).clamp_(0, 15).to(torch.int32).reshape(out, inp)
    return q, scale.squeeze(-1), lo.squeeze(-1)


class Int4Linear:
    """``y = x @ dequant(W).T (+ bias)`` on 4-bit weights in groups of :data:`INT4_GROUP` inputs."""

    __slots__ = ("packed", "scales_zeros", "bias", "out_features", "in_features")

    def __init__(self, packed: torch.Tensor, scales_zeros: torch.Tensor, bias: torch.Tensor | None,
                 out_features: int, in_features: int) -> None:
        self.packed = packed
        self.scales_zeros = scales_zeros
        self.bias = bias
        self.out_features = out_features
        self.in_features = in_features

    @classmethod
    def quantize(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "Int4Linear":
        """Groups of 32 along ``in``: scale = (max - min) / 15, levels round((w - min) / scale)."""
        _check(weight, "Int4Linear")
        out, inp = weight.shape
        if inp % INT4_GROUP or out % 16:  # NOTE: the packing kernel's tiles
            raise QuantizationError(f"Int4Linear: in_features must be a multiple of {INT4_GROUP} and "
                                    f"out_features of 16, got {tuple(weight.shape)}")
        q, scale, lo = int4_levels(weight)
        zero = lo + 8 * scale  # NOTE: the kernel computes (q - 8) * scale + zero
        scales_zeros = torch.stack([scale.t(), zero.t()], -1)  # [groups, out, 2]
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
        return cls(packed, scales_zeros.to(torch.bfloat16).contiguous(),
                   None if bias is None else bias.to(torch.bfloat16), out, inp)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, INT4_GROUP, self.scales_zeros)
        return y if self.bias is None else y + self.bias


class Int8Linear:
    """``y = x @ (W8 * scale).T (+ bias)`` with one symmetric scale per output channel.

    ``native`` (the default where it builds, see :func:`native_int8_kernel`): the VNNI kernel of
    ``native/cpu_ops.cpp``, which quantizes each activation row to int8 in blocks of 32 (as
    llama.cpp does for its Q8_0 matmuls) and runs integer dot products: the 49152 x 576 lm_head
    takes ~0.7 ms against ~2.3 ms for torch's kernel, which converts every weight to float.
    """

    __slots__ = ("weight", "scales", "bias", "out_features", "in_features", "_native", "_scales_f32")

    def __init__(self, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
                 native: bool = False) -> None:
        self.weight = weight
        self.scales = scales
        self.bias = bias
        self.out_features, self.in_features = weight.shape
        self._native = native_int8_kernel(self.in_features) if native else None
        self._scales_f32 = scales.float().contiguous()

    @classmethod
    def quantize(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, native: bool = True) -> "Int8Linear":
        _check(weight, "Int8Linear")
        w = weight.float()
        scale = w.abs().amax(1) / 127
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round(w / safe[:, None]).clamp_(-127, 127).to(torch.int8).contiguous()
        return cls(q, scale.to(torch.bfloat16), None if bias is None else bias.to(torch.bfloat16), native=native)

    @property
    def kernel(self) -> str:
        """Which kernel runs: 'vnni' (native) or 'torch'."""
        return "vnni" if self._native is not None else "torch"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._native is not None:
            return self._native(x, self.weight, self._scales_f32, self.bias)
        y = torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales)
        return y if self.bias is None else y + self.bias


def native_int8_kernel(in_features: int):
    """``torch.ops.sglc_cpu.q8_linear`` where it can run (the native kernels build, the CPU has
    AVX512-VNNI, ``in_features`` is a multiple of 32), else None."""
    if in_features % INT4_GROUP or load_cpu_ops() is not None or not torch.ops.sglc_cpu.has_vnni():
        return None
    return torch.ops.sglc_cpu.q8_linear


QuantizedLinear = Int4Linear | Int8Linear

#: From this many input rows on, the bf16 oneDNN linear beats the integer kernels (their per-row
#: dequantization is paid again for every row). Measured, model decode ms/step on 2 cores:
#: int4 13.4 / 17.1 / 22.9 / 39.9 / 54.2 / 121.5 at 1 / 2 / 4 / 8 / 16 / 32 rows,
#: bf16 29.3 / 30.5 / 28.7 / 35.1 / 49.5 / 77.0.
LARGE_BATCH_ROWS = 8


class RowDispatchLinear:
    """One weight kept twice: ``small`` (integer) for fewer than ``min_rows`` input rows,
    ``large`` (bf16) for prefills and big decode batches."""

    __slots__ = ("small", "large", "min_rows", "out_features")

    def __init__(self, small, large, min_rows: int = LARGE_BATCH_ROWS) -> None:
        self.small, self.large, self.min_rows = small, large, min_rows
        self.out_features = small.out_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (self.large if x.shape[0] >= self.min_rows else self.small)(x)


def quantized_linear(kind: str, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     native: bool = True) -> QuantizedLinear:
    """A quantized linear of ``weight``: 'int4' (:class:`Int4Linear`) or 'int8' (:class:`Int8Linear`;
    ``native``: on the VNNI kernel where it can run)."""
    if kind == "int4":
        return Int4Linear.quantize(weight, bias)
    if kind == "int8":
        return Int8Linear.quantize(weight, bias, native=native)
    raise QuantizationError(f"unknown weight quantization {kind!r}; expected one of {QUANTIZATIONS}")
