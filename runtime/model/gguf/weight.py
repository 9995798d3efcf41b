"""GGUFWeight: one 2-D tensor of a GGUF file as shipped (its blocks, memory-mapped, not decoded)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import blocks
from .tensor_types import block_shape


@dataclass(slots=True)
class GGUFWeight:
    """``rows`` x ``cols`` values of GGUF type ``type_name`` (e.g. "Q4_K"), stored as ``raw``:
    uint8 [rows, bytes per row], a view of the memory-mapped file (or a reordered copy of it,
    see :meth:`reorder_rows`). Rows are the linear's output channels (Hugging Face's
    ``[out, in]``), blocks run along a row."""

    name: str  # the tensor's name in the file
    type_name: str
    rows: int
    cols: int
    raw: np.ndarray

    def __post_init__(self) -> None:
        per, nbytes = block_shape(self.type_name)
        if self.cols % per:
            raise ValueError(f"{self.name}: {self.cols} columns are not a multiple of {self.type_name}'s "
                             f"block of {per}")
        want = (self.rows, self.cols // per * nbytes)
        if self.raw.dtype != np.uint8 or tuple(self.raw.shape) != want:
            raw = np.asarray(self.raw)
            if raw.nbytes != want[0] * want[1]:
                raise ValueError(f"{self.name}: {raw.nbytes} bytes for a {self.type_name} [{self.rows}, "
                                 f"{self.cols}] tensor, expected {want[0] * want[1]}")
            self.raw = raw.reshape(-1).view(np.uint8).reshape(want)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return int(self.raw.nbytes)

    def reorder_rows(self, order: np.ndarray) -> GGUFWeight:
        """The same tensor with its rows (output channels) in ``order`` (whole rows of blocks
        move, so this is exact for every type)."""
        return GGUFWeight(self.name, self.type_name, self.rows, self.cols, np.ascontiguousarray(self.raw[order]))

    def row_slice(self, start: int, stop: int) -> GGUFWeight:
        """Rows ``start:stop`` (a view: fused q/k/v or gate/up parts)."""
        return GGUFWeight(self.name, self.type_name, stop - start, self.cols, self.raw[start:stop])

    def concat_rows(self, *others: GGUFWeight) -> GGUFWeight:
        """The rows of this tensor then the others' (same type and columns: e.g. q, k and v)."""
        for o in others:
            if (o.type_name, o.cols) != (self.type_name, self.cols):
                raise ValueError(f"cannot stack {o.name} ({o.type_name}, {o.cols} columns) under {self.name} "
                                 f"({self.type_name}, {self.cols})")
        raw = np.concatenate([self.raw, *(o.raw for o in others)])
        return GGUFWeight(self.name, self.type_name, raw.shape[0], self.cols, raw)

    def dequantize(self, rows: np.ndarray | None = None) -> np.ndarray:
        """float32 [rows, cols] (all rows, or those indexed by ``rows``), bit-equal to gguf-py's."""
        raw = self.raw if rows is None else self.raw[rows]
        return blocks.dequantize(self.type_name, raw, raw.shape[0], self.cols)
