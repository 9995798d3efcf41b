"""CompiledGrammar: one compiled constraint over one vocabulary, shared by every request using it.

It adds what decoding needs per state on top of the FSM library's token index: the
allowed-token mask as a torch tensor (cached, bounded by bytes) and whether the state is
terminal; ``new_cursor()`` starts a request's :class:`~.state.ConstraintState` on it. Built by
:class:`~.grammar_cache.GrammarCache`. Read-only except for its caches, which are locked.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import torch

from sglc import fsm

from .state import ConstraintState

#: Bytes of cached masks per grammar (each mask is vocab_size bools: 48 KiB for SmolLM2, so 341).
_MASK_CACHE_BYTES = 16 * 2**20


class CompiledGrammar:
    """An FSM and its token index over one vocabulary (immutable, shared across requests)."""

    def __init__(self, compiled: fsm.FSM, index: fsm.TokenIndex, device: torch.device | str = "cpu") -> None:
        self.fsm = compiled
        self.index = index
        self.device = torch.device(device)
        self._eos = np.array(index.eos_token_ids, dtype=np.int64)
        self._masks: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._max_masks = max(16, _MASK_CACHE_BYTES // max(index.vocab_size, 1))
        self._terminal: dict[int, bool] = {}
        self._lock = threading.Lock()
        self._static_nbytes = index.nbytes + _dfa_nbytes(compiled.dfa)

    @property
    def pattern(self) -> str:
        return self.fsm.pattern

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    @property
    def nbytes(self) -> int:
        """Bytes this grammar holds: token index arrays, DFA tables, cached masks (an estimate
        for the Python-object tables; exact for the arrays)."""
        with self._lock:
            num_masks = len(self._masks)
        return self._static_nbytes + num_masks * self.vocab_size

    def mask(self, state: int) -> torch.Tensor:
        """Bool [vocab_size] on ``device``, True where a token may come next (EOS only in final
        states). NOTE: cached and shared between requests: never modify it in place."""
        with self._lock:
            got = self._masks.get(state)
            if got is not None:
                self._masks.move_to_end(state)
                return got
        made = torch.from_numpy(self.index.mask(state)).to(self.device)
        with self._lock:
            self._masks[state] = made
            while len(self._masks) > self._max_masks:
                self._masks.popitem(last=False)
        return made

    def is_terminal(self, state: int) -> bool:
        """True when the text so far is complete and nothing but EOS may follow."""
        got = self._terminal.get(state)
        if got is None:
            ids = self.index.allowed_token_ids(state)
            got = self.index.is_final(state) and bool(np.isin(ids, self._eos).all())
            self._terminal[state] = got
        return got

    def new_cursor(self) -> ConstraintState:
        """A fresh per-request state at the start of the constraint."""
        return ConstraintState(self)

    def __repr__(self) -> str:
        shown = self.pattern if len(self.pattern) <= 60 else self.pattern[:57] + "..."
        return f"CompiledGrammar({shown!r}, {self.fsm.num_states} states)"


def _dfa_nbytes(dfa: fsm.dfa.DFA) -> int:
    """The character DFA's tuples (a pointer and often an int object per cell) and int32 table."""
    return 44 * dfa.num_states * dfa.num_classes + 64 * dfa.num_states
