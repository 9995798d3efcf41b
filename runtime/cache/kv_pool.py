"""KVSlotPool: hands out token-granular KV slot indices (a page is one token).

The KV tensors live in ``kv_buffer.py``; this allocator only decides which slot rows are in use.
Cached (radix tree) tokens and running requests draw from the same pool.
"""
from __future__ import annotations

from typing import Any

from .slot_arrays import SlotArrays, TorchSlots


class KVPoolExhausted(RuntimeError):
    """Raised by ``alloc(n)`` when fewer than ``n`` slots are free (check ``can_alloc`` first)."""


class KVSlotPool:
    """A stack of free slot indices plus an in-use mask.

    Guarantees:
        - ``alloc(n)`` returns ``n`` distinct slots that were free, as a 1-D int64 array of the
          pool's ``arrays`` (torch tensors by default; numpy for the torch-free engine).
        - ``free(slots)`` returns slots to the pool; with ``debug=True`` it raises on a double
          free, a slot that is out of range, or a slot repeated within one call. Without
          ``debug`` the hot path skips those checks; ``check_integrity()`` still finds the
          corruption afterwards.
        - ``num_free + num_used == num_slots`` always.

    NOTE: free slots are ``_stack[:_top]``; ``_in_use[s]`` is True exactly for slots not in
    that range. The stack is LIFO, so a just-freed slot is the next handed out.
    """

    __slots__ = ("num_slots", "debug", "arrays", "_stack", "_top", "_in_use")

    def __init__(self, num_slots: int, *, debug: bool = False, device: Any = "cpu", arrays: SlotArrays | None = None):
        """``arrays``: the slot arrays' library (default: torch tensors on ``device``)."""
        if num_slots < 1:
            raise ValueError(f"KVSlotPool: num_slots must be >= 1, got {num_slots}")
        self.num_slots = num_slots
        self.debug = debug
        self.arrays = arrays if arrays is not None else TorchSlots(device)
        self.reset()

    # --- queries -------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Slots that ``alloc`` can hand out now."""
        return self._top

    @property
    def num_used(self) -> int:
        """Slots handed out and not yet freed (running requests plus the radix cache)."""
        return self.num_slots - self._top

    def can_alloc(self, n: int) -> bool:
        """True when ``alloc(n)`` would succeed."""
        return 0 <= n <= self._top

    def is_used(self, slots: Any) -> Any:
        """Bool array: which of ``slots`` are currently handed out (for tests and checks)."""
        return self._in_use[self.arrays.as_slots(slots)]

    # --- commands ------------------------------------------------------------------------
    def alloc(self, n: int) -> Any:
        """Take ``n`` free slots; raises ``KVPoolExhausted`` when fewer are free."""
        if n < 0:
            raise ValueError(f"KVSlotPool.alloc: n must be >= 0, got {n}")
        if n > self._top:
            raise KVPoolExhausted(
                f"KVSlotPool.alloc({n}): only {self._top} of {self.num_slots} slots are free"
            )
        self._top -= n
        out = self.arrays.copy(self._stack[self._top : self._top + n])
        self._in_use[out] = True
        return out

    def free(self, slots: Any) -> None:
        """Return ``slots`` (1-D int64) to the pool; they must have come from ``alloc``."""
        slots = self.arrays.as_slots(slots)
        n = len(slots)
        if n == 0:
            return
        if self.debug:
            self._check_free_arg(slots)
        if self._top + n > self.num_slots:
            raise RuntimeError(
                f"KVSlotPool.free: freeing {n} slots with {self._top} already free overflows "
                f"the pool of {self.num_slots} (double free?)"
            )
        self._in_use[slots] = False
        self._stack[self._top : self._top + n] = slots
        self._top += n

    def reset(self) -> None:
        """Mark every slot free (only safe when nobody holds slots)."""
        self._stack = self.arrays.arange_desc(self.num_slots)
        self._top = self.num_slots
        self._in_use = self.arrays.zeros_bool(self.num_slots)

    # --- checks --------------------------------------------------------------------------
    def _check_free_arg(self, slots: Any) -> None:
        if slots.min().item() < 0 or slots.max().item() >= self.num_slots:
            raise ValueError(
                f"KVSlotPool.free: slot out of range [0, {self.num_slots}): "
                f"min={slots.min().item()} max={slots.max().item()}"
            )
        if self.arrays.unique_count(slots) != len(slots):
            raise ValueError("KVSlotPool.free: the same slot appears twice in one call")
        not_used = slots[~self._in_use[slots]]
        if len(not_used):
            raise ValueError(f"KVSlotPool.free: double free of slots {not_used[:8].tolist()}")

    def check_integrity(self) -> None:
        """Raise AssertionError unless the free stack and the in-use mask agree exactly."""
        free = self._stack[: self._top]
        assert 0 <= self._top <= self.num_slots, f"free count {self._top} out of range"
        assert self.arrays.unique_count(free) == len(free), "a slot is on the free stack twice"
        if len(free):
            assert free.min().item() >= 0 and free.max().item() < self.num_slots, "foreign slot"
        assert not self._in_use[free].any().item(), "a free slot is marked in use"
        assert int(self._in_use.sum().item()) == self.num_used, (
            f"in-use mask counts {int(self._in_use.sum().item())}, pool says {self.num_used}"
        )

    def __repr__(self) -> str:
        return f"KVSlotPool(num_slots={self.num_slots}, num_free={self.num_free})"
