"""A per-request position in a token index: what may come next, and stepping through it.

One :class:`Cursor` per generating request. It is cheap (a reference to the shared, immutable
:class:`TokenIndex` plus a small list of states) and is the only mutable object in the FSM
library. ``advance`` takes sampled tokens; ``advance_bytes`` takes text appended without
sampling (jump-forward); ``rollback`` undoes either, one call per step.
"""
from __future__ import annotations

import numpy as np

from .errors import ConstraintViolationError
from .token_index import TokenIndex


class Cursor:
    """Tracks one request's state in ``index`` (starting at its initial state)."""

    def __init__(self, index: TokenIndex, state: int | None = None) -> None:
        self.index = index
        self._states: list[int] = [index.initial if state is None else state]
        self._finished: list[bool] = [False]

    @property
    def state(self) -> int:
        """The current byte-DFA state."""
        return self._states[-1]

    @property
    def is_finished(self) -> bool:
        """True once an EOS token was taken: nothing more may be generated."""
        return self._finished[-1]

    def can_finish(self) -> bool:
        """Whether the text so far is a complete match (EOS / stopping is allowed now)."""
        return self.index.is_final(self.state)

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted ids of the tokens allowed next (EOS ids included in final states)."""
        if self.is_finished:
            return np.zeros(0, dtype=np.int64)
        return self.index.allowed_token_ids(self.state)

    def allowed_mask(self) -> np.ndarray:
        """Boolean array of vocabulary size, True where a token is allowed next."""
        if self.is_finished:
            return np.zeros(self.index.vocab_size, dtype=bool)
        return self.index.mask(self.state)

    def is_allowed(self, token_id: int) -> bool:
        return not self.is_finished and self.index.next_state(self.state, token_id) >= 0

    def advance(self, token_id: int) -> int:
        """Take ``token_id``; return the new state. Raises ``ConstraintViolationError`` if the
        token is not allowed here (or the cursor already finished)."""
        if self.is_finished:
            raise ConstraintViolationError(f"token {token_id} after the constraint finished (EOS)")
        nxt = self.index.next_state(self.state, token_id)
        if nxt < 0:
            raise ConstraintViolationError(f"token {token_id} is not allowed in state {self.state}")
        self._states.append(nxt)
        self._finished.append(token_id in self.index.eos_token_ids)
        return nxt

    def advance_bytes(self, data: bytes) -> int:
        """Append ``data`` directly (jump-forward); return the new state."""
        if self.is_finished:
            raise ConstraintViolationError("text appended after the constraint finished")
        nxt = self.index.byte_dfa.walk(data, self.state)
        if nxt < 0:
            raise ConstraintViolationError(f"bytes {data!r} are not allowed from state {self.state}")
        self._states.append(nxt)
        self._finished.append(False)
        return nxt

    def advance_text(self, text: str) -> int:
        """``advance_bytes`` for a str (UTF-8 encoded)."""
        return self.advance_bytes(text.encode("utf-8"))

    def forced_bytes(self) -> bytes:
        """The bytes the constraint forces next (empty when there is a choice or it may end)."""
        if self.is_finished:
            return b""
        return self.index.byte_dfa.forced_bytes(self.state)

    def forced_text(self) -> str:
        """The forced continuation as whole characters; "" in the middle of a character (use
        ``forced_bytes`` there)."""
        if self.is_finished or self.state >= self.index.byte_dfa.num_char_states:
            return ""
        return self.index.fsm.forced_string(self.state)

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (``advance`` / ``advance_bytes`` calls)."""
        if not 0 <= n < len(self._states):
            raise ValueError(f"cannot roll back {n} steps; only {len(self._states) - 1} taken")
        if n:
            del self._states[-n:]
            del self._finished[-n:]

    @property
    def num_steps(self) -> int:
        return len(self._states) - 1

    def copy(self) -> "Cursor":
        """An independent cursor at the same position (with the same history)."""
        other = Cursor(self.index)
        other._states = list(self._states)
        other._finished = list(self._finished)
        return other
