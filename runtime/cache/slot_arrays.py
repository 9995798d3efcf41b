"""SlotArrays: the few array operations the slot pool and the radix tree do on KV slot indices.

The torch engine's scheduler, slot table and runner take slots as int64 torch tensors; the
torch-free engine (``engine/native_engine.py``) as numpy arrays, in a process where torch is not
imported. ``KVSlotPool`` and ``RadixCache`` are written once against this interface (slicing,
``len``, element assignment and ``tolist`` are common to both); each engine hands its pool one.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


class SlotArrays:
    """1-D int64 slot arrays and the pool's bool mask, in one array library."""

    def empty(self) -> Any:
        """An empty slot array (shared: never written)."""
        raise NotImplementedError

    def arange_desc(self, n: int) -> Any:
        """``n - 1, ..., 0``."""
        raise NotImplementedError

    def zeros_bool(self, n: int) -> Any:
        raise NotImplementedError

    def as_slots(self, slots: Any) -> Any:
        """``slots`` as a 1-D int64 array of this library (no copy where it is one already)."""
        raise NotImplementedError

    def copy(self, slots: Any) -> Any:
        raise NotImplementedError

    def cat(self, parts: Sequence[Any]) -> Any:
        raise NotImplementedError

    def unique_count(self, slots: Any) -> int:
        """How many distinct values ``slots`` holds."""
        raise NotImplementedError


class TorchSlots(SlotArrays):
    """int64 torch tensors on ``device`` (the torch engine's)."""

    def __init__(self, device: Any = "cpu") -> None:
        import torch  # NOTE: here: the numpy engine imports this module without torch

        self.torch = torch
        self.device = torch.device(device)
        self._empty = torch.empty(0, dtype=torch.int64, device=self.device)

    def empty(self) -> Any:
        return self._empty

    def arange_desc(self, n: int) -> Any:
        return self.torch.arange(n - 1, -1, -1, dtype=self.torch.int64, device=self.device)

    def zeros_bool(self, n: int) -> Any:
        return self.torch.zeros(n, dtype=self.torch.bool, device=self.device)

    def as_slots(self, slots: Any) -> Any:
        return slots.reshape(-1).to(device=self.device, dtype=self.torch.int64)

    def copy(self, slots: Any) -> Any:
        return slots.clone()

    def cat(self, parts: Sequence[Any]) -> Any:
        return self.torch.cat(list(parts)) if parts else self._empty

    def unique_count(self, slots: Any) -> int:
        return int(self.torch.unique(slots).numel())


class NumpySlots(SlotArrays):
    """int64 numpy arrays (the torch-free engine's)."""

    _EMPTY = np.empty(0, np.int64)
    _EMPTY.flags.writeable = False

    def empty(self) -> np.ndarray:
        return self._EMPTY

    def arange_desc(self, n: int) -> np.ndarray:
        return np.arange(n - 1, -1, -1, dtype=np.int64)

    def zeros_bool(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=bool)

    def as_slots(self, slots: Any) -> np.ndarray:
        return np.asarray(slots, dtype=np.int64).reshape(-1)

    def copy(self, slots: np.ndarray) -> np.ndarray:
        return slots.copy()

    def cat(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate(list(parts)) if parts else self._EMPTY

    def unique_count(self, slots: np.ndarray) -> int:
        return int(np.unique(slots).size)
