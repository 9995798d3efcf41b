"""CompiledCFG: one context-free grammar compiled over one vocabulary (``sglc.grammar``'s
CompiledGrammar), shared by every request using it; the counterpart of
:class:`~.grammar.CompiledGrammar` for the FSM path.

It adds what the engine needs on top: masks as torch tensors on the engine's device (the
matcher's numpy masks are cached per state and read-only; torch has no read-only tensors, so
each distinct mask is copied once into a tensor kept in a small LRU keyed by the array), the
byte size the grammar cache accounts, and ``new_cursor()``.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import torch

from sglc.grammar import CompiledGrammar

from .cfg_state import CFGConstraintState

#: Mask tensors kept per grammar (48 KiB each on a 49k vocabulary).
_MAX_TENSORS = 64


class CompiledCFG:
    """A compiled grammar and its key (immutable apart from the compiled grammar's own caches)."""

    def __init__(self, compiled: CompiledGrammar, key: tuple[str, str], device: torch.device | str = "cpu") -> None:
        self.compiled = compiled
        self.key = key
        self.device = torch.device(device)
        # NOTE: keyed by id(mask) with the array held, so an id is never reused while cached.
        self._tensors: OrderedDict[int, tuple[np.ndarray, torch.Tensor]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def vocab_size(self) -> int:
        return self.compiled.vocab_size

    @property
    def nbytes(self) -> int:
        with self._lock:
            held = len(self._tensors)
        return self.compiled.nbytes + held * self.vocab_size

    def to_device(self, mask: np.ndarray) -> torch.Tensor:
        """``mask`` (a matcher's read-only bool array) as a bool tensor on the device (shared:
        never modify it)."""
        key = id(mask)
        with self._lock:
            hit = self._tensors.get(key)
            if hit is not None and hit[0] is mask:
                self._tensors.move_to_end(key)
                return hit[1]
        made = torch.from_numpy(np.array(mask, dtype=bool)).to(self.device)
        with self._lock:
            self._tensors[key] = (mask, made)
            while len(self._tensors) > _MAX_TENSORS:
                self._tensors.popitem(last=False)
        return made

    def new_cursor(self) -> CFGConstraintState:
        return CFGConstraintState(self)

    def __repr__(self) -> str:
        text = self.key[1] if len(self.key[1]) <= 60 else self.key[1][:57] + "..."
        return f"CompiledCFG({self.key[0]} {text!r})"
