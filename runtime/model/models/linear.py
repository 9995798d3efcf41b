"""Linear layers that pick the fastest CPU matmul kernel for the number of rows.

Measured on x86 with MKL (torch 2.13, one thread, SmolLM2-135M shapes): ``F.linear`` in fp32 is
a fast GEMV for 1-3 rows, but from 4 rows on MKL's small-M GEMM path is slow (the 49152 x 576
lm_head: 9 ms at 1 row, 33 ms at 8 rows, 24 ms at 16 rows). oneDNN with a weight reordered once
into its blocked layout does 8 rows in ~11 ms, but is slower than MKL's GEMV for 1-3 rows. So an
fp32 :class:`Linear` keeps both copies and dispatches on the row count; bf16/fp16 keep only the
packed copy (oneDNN wins at every row count there).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# NOTE: below this many rows, fp32 F.linear (MKL GEMV) beats the packed oneDNN kernel.
PACKED_MIN_ROWS_FP32 = 4
# oneDNN picks its blocked layout from an expected batch size; 16 serves 4..64 rows well.
_PACK_HINT_FP32 = 16
_PACK_HINT_HALF = 1


def can_pack_weights(dtype: torch.dtype, device: torch.device) -> bool:
    """True where pre-packed oneDNN linears exist: CPU, and fp32 or a bf16/fp16 oneDNN supports."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    try:
        if dtype == torch.float32:
            return True
        if dtype == torch.bfloat16:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        if dtype == torch.float16:
            return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):
        return False
    return False


class Linear:
    """``y = x @ weight.T + bias`` for 2-D ``x [rows, in]``, on plain and/or pre-packed weights.

    ``weight`` (plain, for ``F.linear``) is kept unless ``packed`` is given and every row count
    is served by it (``packed_min_rows == 0``). Build with :meth:`build`.
    """

    __slots__ = ("weight", "packed", "bias", "packed_min_rows", "out_features")

    def __init__(self, weight: torch.Tensor | None, packed: torch.Tensor | None, bias: torch.Tensor | None,
                 packed_min_rows: int, out_features: int) -> None:
        assert weight is not None or (packed is not None and packed_min_rows == 0), \
            "Linear: rows below packed_min_rows need the plain weight"
        self.weight = weight
        self.packed = packed
        self.bias = bias
        self.packed_min_rows = packed_min_rows
        self.out_features = out_features

    @classmethod
    def build(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, pack: bool = False) -> Linear:
        """Wrap ``weight [out, in]``; ``pack`` (see :func:`can_pack_weights`) reorders it for oneDNN.

        fp32 keeps the plain weight too (for fewer than ``PACKED_MIN_ROWS_FP32`` rows), so it
        costs twice the weight memory; bf16/fp16 replace it.
        """
        out = weight.shape[0]
        if not pack:
            return cls(weight, None, bias, 0, out)
        if weight.dtype == torch.float32:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_HINT_FP32)
            return cls(weight, packed, bias, PACKED_MIN_ROWS_FP32, out)
        return cls(None, torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_HINT_HALF), bias, 0, out)

    def uses_packed(self, rows: int) -> bool:
        """Whether ``rows`` input rows go through the packed oneDNN kernel."""
        return self.packed is not None and rows >= self.packed_min_rows

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and x.shape[0] >= self.packed_min_rows:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)
