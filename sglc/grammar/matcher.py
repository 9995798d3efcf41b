"""GrammarMatcher: one request's position in a compiled grammar (what fsm.Cursor is for a regex).

Its state is a set of parse stacks (``matcher_stacks.Tops``). Each step's mask is

    union over live stack tops of the tokens accepted inside the top's rule (precomputed,
    ``CompiledGrammar.union_mask``, shared by all requests)
    + the context-dependent tokens of each top whose suffix the full stack accepts
    + EOS when the text may end here.

Context-dependent checks are decided by the frame below the top when it can (frame_check.py,
shared by all requests), else memoized per (stack, group) in the matcher's stack pool; whole
masks per state (a state repeats while a loop runs: string contents, digits, whitespace).
``advance`` / ``advance_bytes`` walk the token's bytes through the stacks (the same code the
checks use); ``rollback`` pops the history, one entry per step.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from sglc.fsm.errors import ConstraintViolationError

from .frame_check import DEPENDS, TAKEN
from .matcher_stacks import DEAD, StackPool, Tops
from .token_masks_compile import CompiledGrammar

#: Whole masks (with context-dependent tokens) a matcher keeps, least recently used dropped.
_MASKS_PER_MATCHER = 32
#: Stack frames below a top that decide a context-dependent check before the whole stack is walked.
_FRAMES_CHECKED = 4
#: Longest jump-forward run ``forced_bytes`` returns.
_MAX_FORCED = 4096


class GrammarMatcher:
    """Per-request matcher over a shared :class:`CompiledGrammar` (see the module docstring).

    NOTE: a matcher and its copies share one stack pool (append-only memo tables): use them
    from one thread at a time."""

    def __init__(self, compiled: CompiledGrammar, _pool: StackPool | None = None) -> None:
        self.compiled = compiled
        self._pool = _pool if _pool is not None else StackPool(compiled)
        self._states: list[Tops] = [self._pool.start()]
        self._finished: list[bool] = [False]
        self._eos_set = frozenset(compiled.eos_token_ids)

    # --- queries -----------------------------------------------------------------------------
    @property
    def num_steps(self) -> int:
        return len(self._states) - 1

    @property
    def is_finished(self) -> bool:
        """True once EOS was taken, or when the text is complete and nothing but EOS may follow."""
        st = self._states[-1]
        return self._finished[-1] or (st.can_end and not st.stacks)

    def can_finish(self) -> bool:
        """Whether the text so far is complete (EOS allowed now)."""
        return not self._finished[-1] and self._states[-1].can_end

    def mask(self) -> np.ndarray:
        """Bool [vocab_size], True where a token may come next. NOTE: may be shared (cached):
        read-only."""
        if self._finished[-1]:
            return np.zeros(self.compiled.vocab_size, dtype=bool)
        st = self._states[-1]
        masks = self._pool.masks
        got = masks.get(st)
        if got is not None:
            masks.move_to_end(st)
            return got
        made = self._compute_mask(st)
        masks[st] = made
        if len(masks) > _MASKS_PER_MATCHER:
            masks.popitem(last=False)
        return made

    def _compute_mask(self, st: Tops) -> np.ndarray:
        compiled = self.compiled
        node = self._pool.node
        stacks = st.stacks
        # NOTE: the common state has one stack and no context-dependent tokens: kept lean.
        tops = (node[stacks[0]],) if len(stacks) == 1 else tuple(sorted({node[s] for s in stacks}))
        groups_of = compiled.node_groups
        extra: list[int] = []
        for s in stacks:
            groups = groups_of[node[s]]
            if groups:
                self._add_context_tokens(s, groups, extra)
        if not extra and not st.can_end and tops:
            return compiled.union_mask(tops)
        return compiled.composed_mask(tops, tuple(sorted(set(extra))), st.can_end)

    def _add_context_tokens(self, s: int, groups: tuple[tuple[int, int], ...], extra: list[int]) -> None:
        """Append to ``extra`` the context-dependent groups at stack ``s``'s top whose suffix the
        stack below takes."""
        pool, compiled = self._pool, self.compiled
        node, parent = pool.node, pool.parent
        p = parent[s]
        for g, m in groups:
            # The nearest frames usually decide (shared by all requests); else the whole stack.
            q, frames = p, ()
            decided = DEPENDS
            while len(frames) < _FRAMES_CHECKED:
                if q >= 0:
                    frames += (node[q],)
                    q = parent[q]
                decided = compiled.frame_check(g, frames, q < 0)
                if decided != DEPENDS or q < 0:
                    break
            if decided != DEPENDS:
                if decided == TAKEN:
                    extra.append(g)
                continue
            key = (pool.intern(m, p), g)
            ok = pool.checks.get(key)
            if ok is None:
                ok = pool.checks[key] = pool.walk(pool.closure(key[0]), compiled.classes.suffixes[g]).alive
            if ok:
                extra.append(g)

    def _after(self, token_id: int) -> Tops:
        """The state after ``token_id`` (DEAD when refused); EOS is handled by the callers."""
        data = self.compiled.vocab.token_bytes(token_id) if 0 <= token_id < self.compiled.vocab_size else None
        if data is None:
            return DEAD
        return self._pool.walk(self._states[-1], data)

    def is_allowed(self, token_id: int) -> bool:
        if self._finished[-1]:
            return False
        if token_id in self._eos_set:
            return self._states[-1].can_end
        cached = self._pool.masks.get(self._states[-1])
        if cached is not None and 0 <= token_id < len(cached):
            return bool(cached[token_id])
        return self._after(token_id).alive

    # --- steps -------------------------------------------------------------------------------
    def advance(self, token_id: int) -> None:
        """Take ``token_id``; raises ``ConstraintViolationError`` when it is not allowed here."""
        if self._finished[-1]:
            raise ConstraintViolationError(f"token {token_id} after the grammar finished (EOS)")
        if token_id in self._eos_set:
            if not self._states[-1].can_end:
                raise ConstraintViolationError(f"EOS token {token_id} before the grammar's text is complete")
            self._states.append(self._states[-1])
            self._finished.append(True)
            return
        nxt = self._after(token_id)
        if not nxt.alive:
            raise ConstraintViolationError(f"token {token_id} is not allowed by the grammar here "
                                           f"(step {self.num_steps})")
        self._states.append(nxt)
        self._finished.append(False)

    def advance_bytes(self, data: bytes) -> None:
        """Append ``data`` directly (jump-forward); one step."""
        if self._finished[-1]:
            raise ConstraintViolationError("text appended after the grammar finished")
        nxt = self._pool.walk(self._states[-1], bytes(data))
        if not nxt.alive:
            raise ConstraintViolationError(f"bytes {bytes(data)!r} are not allowed by the grammar here")
        self._states.append(nxt)
        self._finished.append(False)

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (``advance`` / ``advance_bytes`` calls)."""
        if not 0 <= n < len(self._states):
            raise ValueError(f"cannot roll back {n} steps; only {len(self._states) - 1} taken")
        if n:
            del self._states[-n:]
            del self._finished[-n:]

    def forced_bytes(self) -> bytes:
        """Bytes every continuation must start with (empty when there is a choice or the text
        may end here): jump-forward text."""
        if self._finished[-1]:
            return b""
        pool = self._pool
        single = self.compiled.node_single_byte
        st = self._states[-1]
        out = bytearray()
        while st.stacks and not st.can_end and len(out) < _MAX_FORCED:
            first = {single[pool.node[s]] for s in st.stacks}
            if len(first) != 1:
                break
            b = first.pop()
            if b < 0:
                break
            out.append(b)
            st = pool.step(st, b)
        return bytes(out)

    def copy(self) -> "GrammarMatcher":
        """An independent matcher at the same position, with the same history."""
        other = GrammarMatcher.__new__(GrammarMatcher)
        other.compiled = self.compiled
        other._pool = self._pool
        other._states = list(self._states)
        other._finished = list(self._finished)
        other._eos_set = self._eos_set
        return other

    def __repr__(self) -> str:
        st = self._states[-1]
        return f"GrammarMatcher(steps={self.num_steps}, stacks={len(st.stacks)}, can_end={st.can_end})"
