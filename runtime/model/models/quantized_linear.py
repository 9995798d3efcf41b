"""Weight-only quantized linears on packed-integer CPU kernels (native ones, and torch's).

At one decode stream a step reads every weight once, so its cost is the weights' bytes: ~540 MB
in fp32, ~270 MB in bf16, ~85 MB at 4 bits. These linears keep the weights packed and run on
torch's CPU weight-only kernels, with bf16 activations (the kernels' fast path; fp32 activations
fall back to a path ~20x slower):

- :class:`Int4Linear`: ``_weight_int4pack_mm_for_cpu``, asymmetric groups of 32 along the input
  (``w = (q - 8) * scale + zero``, ``q`` in 0..15). This is GGUF's Q4_1 block layout (``w = d*q +
  m`` per 32 weights; ``zero = m + 8 d``), so a Q4_1 checkpoint's levels come back exactly (the
  scales are kept in bf16: the only rounding added).
- :class:`Int8Linear`: symmetric per output channel; on the native kernel where it builds
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

import numpy as np
import torch

from ..native import kernel_info, load_cpu_ops

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
    """``y = x @ dequant(W).T (+ bias)`` on 4-bit weights in groups of :data:`INT4_GROUP` inputs.

    ``native`` (the default where it builds, see :func:`native_int4_kernel`): the native kernel
    ``q4_linear`` (``native/kernels/``, AVX512-VNNI, AVX2 or NEON-dotprod by the CPU) on "q4
    tiles" (:func:`pack_q4_tiles`: 16 output channels interleaved, one vector lane each; ``d``
    and ``m`` in float16 as GGUF's Q4_1 keeps them), activations quantized to int8 per block of
    32 as llama.cpp's Q4_1 x Q8_1 does. At one decode row it runs a layer's four linears ~2.5x
    faster than torch's int4 kernel (which dequantizes every weight to float), and its cost grows
    slowly with rows (each weight load is unpacked once for several rows). Otherwise torch's
    ``_weight_int4pack_mm_for_cpu``.
    """

    __slots__ = ("packed", "scales_zeros", "bias", "out_features", "in_features", "_native", "_q4")

    def __init__(self, packed: torch.Tensor | None, scales_zeros: torch.Tensor | None, bias: torch.Tensor | None,
                 out_features: int, in_features: int,
                 q4: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> None:
        self.packed = packed
        self.scales_zeros = scales_zeros
        self.bias = bias
        self.out_features = out_features
        self.in_features = in_features
        self._q4 = q4
        self._native = torch.ops.sglc_cpu.q4_linear if q4 is not None else None

    @classmethod
    def quantize(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, native: bool | None = None) -> "Int4Linear":
        """Groups of 32 along ``in``: scale = (max - min) / 15, levels round((w - min) / scale).
        ``native``: None = the native kernel where it beats torch's (:func:`native_int4_kernel`),
        True = the native kernel at the active level whatever it is (tests; an error if it is not
        built), False = torch's."""
        _check(weight, "Int4Linear")
        out, inp = weight.shape
        if inp % INT4_GROUP or out % 16:  # NOTE: the packing kernels' tiles
            raise QuantizationError(f"Int4Linear: in_features must be a multiple of {INT4_GROUP} and "
                                    f"out_features of 16, got {tuple(weight.shape)}")
        q, scale, lo = int4_levels(weight)
        bias = None if bias is None else bias.to(torch.bfloat16)
        if _use_native(native, native_int4_kernel):
            return cls(None, None, bias, out, inp, q4=pack_q4_tiles(q, scale, lo))
        zero = lo + 8 * scale  # NOTE: the kernel computes (q - 8) * scale + zero
        scales_zeros = torch.stack([scale.t(), zero.t()], -1)  # [groups, out, 2]
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
        return cls(packed, scales_zeros.to(torch.bfloat16).contiguous(), bias, out, inp)

    @property
    def kernel(self) -> str:
        """Which kernel runs: 'native' or 'torch'."""
        return "native" if self._native is not None else "torch"

    def tiled(self) -> tuple[str, tuple[torch.Tensor, ...]]:
        """The native weight as the ops running several tiled linears in one call take it ("q4": its
        q4 tiles, d and m); only where ``kernel`` is 'native'."""
        if self._q4 is None:
            raise ValueError("Int4Linear.tiled: this linear runs torch's int4 kernel, not q4 tiles")
        return "q4", self._q4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._native is not None:
            bias = self.bias if self.bias is None or self.bias.dtype == x.dtype else self.bias.to(x.dtype)
            return self._native(x, *self._q4, bias)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, INT4_GROUP, self.scales_zeros)
        return y if self.bias is None else y + self.bias


def pack_q4_tiles(q: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q4_linear``'s layout of levels ``q`` [out, in] (0..15) and per-block ``scale``, ``lo``
    [out, in / 32] (``w = lo + scale * q``): weights uint8 [out/16, in/32, 4, 64] (see
    :func:`pack_q4_levels`); ``d``, ``m`` float16 [out/16, in/32, 16]."""
    return pack_q4_levels(q), tile_table(scale.to(torch.float16)), tile_table(lo.to(torch.float16))


def pack_q4_levels(q: torch.Tensor) -> torch.Tensor:
    """4-bit levels ``q`` [out, in] (0..15, out a multiple of 16) as q4 tiles: uint8
    [out/16, in/32, 4, 64], where byte ``4c + j`` of load ``i`` holds input ``4i + j`` of the block
    for channel ``c`` of the tile in its low nibble and input ``16 + 4i + j`` in its high one."""
    out, inp = q.shape
    tiles, blocks = out // 16, inp // INT4_GROUP
    # NOTE: numpy: the nibbles are joined in the levels' own order, then one transposing copy
    # ([tile, channel, block, load, j] -> [tile, block, load, channel, j]); torch's strided uint8
    # ops took ~15x as long.
    n = q.to(torch.uint8).numpy().reshape(tiles, 16, blocks, 2, 4, 4)
    joined = n[:, :, :, 0] | (n[:, :, :, 1] << 4)
    return torch.from_numpy(np.ascontiguousarray(joined.transpose(0, 2, 3, 1, 4)).reshape(tiles, blocks, 4, 64))


def tile_table(t: torch.Tensor) -> torch.Tensor:
    """A per-channel table [out, groups] (one value per block or super-block) in the tiles' order
    [out/16, groups, 16] (the 16 channels of a tile contiguous), dtype kept."""
    out, groups = t.shape
    return t.view(out // 16, 16, groups).transpose(1, 2).contiguous()


def _use_native(native: bool | None, policy) -> bool:
    """Whether a linear runs its native kernel: ``policy() is not None`` for None, else ``native``
    (True needs the kernels built: QuantizationError naming why not)."""
    if native is None:
        return policy() is not None
    if native and load_cpu_ops() is not None:
        raise QuantizationError(f"the native integer kernels were asked for but are unavailable: {load_cpu_ops()}")
    return native


def native_int4_kernel():
    """``torch.ops.sglc_cpu.q4_linear`` where it beats torch's kernel (the native kernels build at
    a level with integer dot products: avx512, avx2, neon_dotprod), else None."""
    if load_cpu_ops() is not None or not kernel_info().int_linears_native:
        return None
    return torch.ops.sglc_cpu.q4_linear


class Int8Linear:
    """``y = x @ (W8 * scale).T (+ bias)`` with one symmetric scale per output channel.

    ``native`` (the default where it builds, see :func:`native_int8_kernel`): the native kernel
    ``q8_linear`` (``native/kernels/``) on "q8 tiles" (:func:`pack_q8_tiles`; output channels
    padded to a multiple of 16), which quantizes each activation row to int8 in blocks of 32 (as
    llama.cpp does for its Q8_0 matmuls) and runs integer dot products: the 49152 x 576 lm_head
    takes ~0.7 ms at one row on AVX512-VNNI against ~2.3 ms for torch's kernel, which converts
    every weight to float. Only one copy of the weights is kept: ``weight`` is None on the native
    kernel.
    """

    __slots__ = ("weight", "scales", "bias", "out_features", "in_features", "_tiles", "_scales_f32")

    def __init__(self, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
                 native: bool | None = False) -> None:
        """``native``: as :meth:`Int4Linear.quantize`'s."""
        self.scales = scales
        self.bias = bias
        self.out_features, self.in_features = weight.shape
        in_features = self.in_features
        use = _use_native(native, lambda: native_int8_kernel(in_features)) and in_features % INT4_GROUP == 0
        self._tiles = pack_q8_tiles(weight) if use else None
        self.weight = None if self._tiles is not None else weight
        padded = self._tiles.shape[0] * 16 if self._tiles is not None else self.out_features
        self._scales_f32 = torch.zeros(padded)
        self._scales_f32[: self.out_features] = scales.float()

    @classmethod
    def quantize(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, native: bool | None = None) -> "Int8Linear":
        _check(weight, "Int8Linear")
        return cls(*int8_levels(weight), None if bias is None else bias.to(torch.bfloat16), native=native)

    @property
    def kernel(self) -> str:
        """Which kernel runs: 'native' or 'torch'."""
        return "native" if self._tiles is not None else "torch"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._tiles is not None:
            y = torch.ops.sglc_cpu.q8_linear(x, self._tiles, self._scales_f32, None)
            if y.shape[1] != self.out_features:  # NOTE: the padding channels of the last tile
                y = y[:, : self.out_features]
            return y if self.bias is None else y + self.bias.to(y.dtype)
        y = torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales)
        return y if self.bias is None else y + self.bias


def int8_levels(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per output channel: ``scale`` = max |w| / 127 (bf16), levels round(w / scale)
    int8 in -127..127."""
    w = weight.float()
    scale = w.abs().amax(1) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / safe[:, None]).clamp_(-127, 127).to(torch.int8).contiguous()
    return q, scale.to(torch.bfloat16)


def pack_q8_tiles(q: torch.Tensor) -> torch.Tensor:
    """``q8_linear``'s layout of int8 levels ``q`` [out, in]: int8 [ceil(out/16), in/32, 8, 64],
    where byte ``4c + j`` of load ``i`` of a block holds input ``4i + j`` of the block for channel
    ``c`` of the tile (channels past ``out`` are zeros)."""
    out, inp = q.shape
    tiles, blocks = -(-out // 16), inp // INT4_GROUP
    padded = torch.zeros(tiles * 16, inp, dtype=torch.int8)
    padded[:out] = q
    # [tile, channel, block, load, j] -> [tile, block, load, channel, j]
    return padded.view(tiles, 16, blocks, 8, 4).permute(0, 2, 3, 1, 4).reshape(tiles, blocks, 8, 64).contiguous()


def native_int8_kernel(in_features: int):
    """``torch.ops.sglc_cpu.q8_linear`` where it beats torch's kernel (see
    :func:`native_int4_kernel`; ``in_features`` a multiple of 32), else None."""
    if in_features % INT4_GROUP or load_cpu_ops() is not None or not kernel_info().int_linears_native:
        return None
    return torch.ops.sglc_cpu.q8_linear


QuantizedLinear = Int4Linear | Int8Linear

#: From this many input rows on, the bf16 oneDNN linear beats torch's integer kernels (their
#: per-row dequantization is paid again for every row). Measured, model decode ms/step on 2 cores:
#: int4 13.4 / 17.1 / 22.9 / 39.9 / 54.2 / 121.5 at 1 / 2 / 4 / 8 / 16 / 32 rows,
#: bf16 29.3 / 30.5 / 28.7 / 35.1 / 49.5 / 77.0.
LARGE_BATCH_ROWS = 8
#: The same for the native int4 kernel, which unpacks each weight load once for 8 rows: model
#: decode ms/step, int4 layers on it against bf16 layers (both with the lm_head in bf16), 15.3 /
#: 25.6 / 37.4 / 49.1 against 23.5 / 30.7 / 40.4 / 46.3 at 8 / 16 / 24 / 32 rows.
NATIVE_INT4_LARGE_BATCH_ROWS = 28
#: The lm_head on a native int8 kernel (the int8 head, or a GGUF head of Q8_0 / Q6_K / Q5_x): it
#: streams ~28 MB a step, where the kernel (with its prefetch) wins: the 49152 x 576 head, 2
#: threads, AVX512-VNNI, 0.82 / 1.43 / 2.75 ms at 8 / 16 / 32 rows against the bf16 copy's 1.24 /
#: 1.30 / 1.60 (AMX; ``bench/bench_cpu_kernels.py``); at 8 rows the copy cost every 8-stream decode
#: step ~2 ms. Smaller int8 layer linears keep LARGE_BATCH_ROWS.
NATIVE_HEAD_LARGE_BATCH_ROWS = 16


def native_large_batch_rows(int4_levels: bool, head: bool = False) -> int:
    """The switch row count of a native integer kernel: 4-bit levels, the lm_head, the rest."""
    if int4_levels:
        return NATIVE_INT4_LARGE_BATCH_ROWS
    return NATIVE_HEAD_LARGE_BATCH_ROWS if head else LARGE_BATCH_ROWS


def large_batch_rows(small: "QuantizedLinear", head: bool = False) -> int:
    """From how many input rows on the float copy of ``small``'s weight is the faster one (where
    :func:`large_batch_dtype` keeps one; ``head``: it is the lm_head): the measured figures above."""
    if small.kernel == "native":
        return native_large_batch_rows(isinstance(small, Int4Linear), head)
    return LARGE_BATCH_ROWS


def large_batch_dtype(small: "QuantizedLinear", bf16_native: bool) -> torch.dtype | None:
    """The float copy that serves many rows (prefill, big decode batches), or None where the
    integer kernel serves every row count and no copy is kept.

    Where bf16 matmuls run natively (AVX512-BF16/AMX, ``bf16_native``), a bf16 oneDNN copy: one
    layer's four linears at 256 rows, 1 thread, 1.4 ms against the VNNI int4 kernel's 10.2 ms
    (AMX). Without them (every AVX2 CPU) a bf16 GEMM is torch's generic fallback (148 ms there,
    emulated AVX2: oneDNN, MKL and ATen held to AVX2), fp32 oneDNN/MKL takes 24.5 ms and the
    native AVX2 int4 kernel 22.2 ms: the integer kernel runs every row count, with no second
    copy of the weights. Where the integer kernel is torch's (no native kernels), an fp32 copy
    (torch int4 56 ms there). ``bench/bench_cpu_kernels.py`` prints these figures."""
    if bf16_native:
        return torch.bfloat16
    return None if small.kernel == "native" else torch.float32


class CastLinear:
    """A float linear computing in its own dtype (fp32) for activations of another (bf16)."""

    __slots__ = ("linear", "out_features")

    def __init__(self, linear) -> None:
        self.linear = linear
        self.out_features = linear.out_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.float()).to(x.dtype)


class RowDispatchLinear:
    """One weight kept twice: ``small`` (integer) for fewer than ``min_rows`` input rows,
    ``large`` (a float copy, see :func:`large_batch_dtype`) for prefills and big decode batches."""

    __slots__ = ("small", "large", "min_rows", "out_features")

    def __init__(self, small, large, min_rows: int | None = None) -> None:
        self.small, self.large = small, large
        self.min_rows = large_batch_rows(small) if min_rows is None else min_rows
        self.out_features = small.out_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (self.large if x.shape[0] >= self.min_rows else self.small)(x)


def describe_linear(linear) -> str:
    """Which kernels a linear runs, for the model's log line: e.g. 'int4 native below 28 rows,
    bfloat16 copy from there' or 'int8 native at every row count'."""
    if isinstance(linear, RowDispatchLinear):
        large = linear.large.linear if isinstance(linear.large, CastLinear) else linear.large
        dtype = str((large.weight if large.weight is not None else large.packed).dtype).removeprefix("torch.")
        return f"{_kernel_name(linear.small)} below {linear.min_rows} rows, {dtype} copy from there"
    if isinstance(linear, (Int4Linear, Int8Linear)):
        return f"{_kernel_name(linear)} at every row count (no float copy)"
    if getattr(linear, "tile_kind", ""):  # NOTE: tiled_linear.TiledLinear (not imported: it imports this module)
        return f"{linear.type_name} on native tiles at every row count (no float copy)"
    if isinstance(getattr(linear, "parts", None), list):  # NOTE: weight_loader.StackedLinear, same reason
        return "stacked: " + " + ".join(dict.fromkeys(describe_linear(p) for p in linear.parts))
    return "float"


def _kernel_name(linear: "QuantizedLinear") -> str:
    return f"{'int4' if isinstance(linear, Int4Linear) else 'int8'} {linear.kernel}"


def quantized_linear(kind: str, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     native: bool | None = None) -> QuantizedLinear:
    """A quantized linear of ``weight``: 'int4' (:class:`Int4Linear`) or 'int8' (:class:`Int8Linear`);
    ``native`` as :meth:`Int4Linear.quantize`'s."""
    if kind == "int4":
        return Int4Linear.quantize(weight, bias, native=native)
    if kind == "int8":
        return Int8Linear.quantize(weight, bias, native=native)
    raise QuantizationError(f"unknown weight quantization {kind!r}; expected one of {QUANTIZATIONS}")
