"""ConstraintState: one request's position in its grammar (wraps :class:`sglc.fsm.Cursor`).

What the engine asks each step: the allowed-token mask for the sampler, ``advance`` with the
sampled token, ``is_finished`` (nothing but EOS may follow, or EOS was taken) and, for
jump-forward, ``jump_bytes``: the text the constraint forces next, cut to whole characters.

NOTE: the cursor takes exactly one step per output token (jump-forward text enters as the
retokenized tokens through ``replace_tail``, never as raw bytes), so ``num_tokens`` always
equals the number of constrained output tokens and rolling back k tokens is k cursor steps.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import torch

from sglc import fsm


class GrammarTables(Protocol):
    """What a ConstraintState reads of its compiled grammar (``grammar.CompiledGrammar``, which
    makes the states: ``new_cursor()``). Shared between requests: read-only."""

    index: fsm.TokenIndex
    device: torch.device

    @property
    def vocab_size(self) -> int: ...

    def mask(self, state: int) -> torch.Tensor: ...  # bool [vocab_size]; never modify it

    def is_terminal(self, state: int) -> bool: ...


class ConstraintState:
    """Per-request constrained-decoding state; cheap (the grammar is shared)."""

    __slots__ = ("grammar", "cursor")

    def __init__(self, grammar: GrammarTables, cursor: fsm.Cursor | None = None) -> None:
        self.grammar = grammar
        self.cursor = cursor if cursor is not None else fsm.Cursor(grammar.index)

    # --- queries -------------------------------------------------------------------------
    @property
    def state(self) -> int:
        """The current byte-DFA state."""
        return self.cursor.state

    @property
    def vocab(self) -> fsm.Vocabulary:
        return self.grammar.index.vocab

    @property
    def num_tokens(self) -> int:
        """Output tokens taken so far (sampled or jumped)."""
        return self.cursor.num_steps

    def allowed_mask(self) -> torch.Tensor:
        """Bool [vocab_size], True where a token may come next (shared: do not modify)."""
        if self.cursor.is_finished:
            return torch.zeros(self.grammar.vocab_size, dtype=torch.bool, device=self.grammar.device)
        return self.grammar.mask(self.state)

    def is_allowed(self, token_id: int) -> bool:
        return self.cursor.is_allowed(token_id)

    def can_finish(self) -> bool:
        """Whether the output so far is a complete match (EOS is allowed now)."""
        return self.cursor.can_finish()

    def is_finished(self) -> bool:
        """True once EOS was taken, or when the output is complete and only EOS could follow
        (the engine then ends the request without sampling that EOS)."""
        return self.cursor.is_finished or self.grammar.is_terminal(self.state)

    # --- steps ---------------------------------------------------------------------------
    def advance(self, token_id: int) -> None:
        """Take one sampled token; raises ``ConstraintViolationError`` if it is not allowed."""
        self.cursor.advance(token_id)

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` tokens."""
        self.cursor.rollback(num_tokens)

    def replace_tail(self, num_removed: int, token_ids: Sequence[int]) -> None:
        """Drop the last ``num_removed`` tokens and take ``token_ids`` instead (retokenized
        jump-forward). Atomic: on a token the constraint refuses, the state is restored and
        ``ConstraintViolationError`` is raised."""
        saved = self.cursor.copy()
        self.cursor.rollback(num_removed)
        try:
            for t in token_ids:
                self.cursor.advance(int(t))
        except fsm.ConstraintViolationError:
            self.cursor = saved
            raise

    # --- jump-forward --------------------------------------------------------------------
    def jump_bytes(self) -> bytes:
        """The bytes the constraint forces next, cut so the output ends on a whole character.

        From a state inside a character (the last token split it), the forced bytes first
        complete that character. Empty when there is a choice, the output may end here, or the
        forced run does not reach a character boundary.
        """
        if self.cursor.is_finished:
            return b""
        forced = self.cursor.forced_bytes()
        if not forced:
            return b""
        bdfa = self.grammar.index.byte_dfa
        state, cut = self.state, 0
        for i, byte in enumerate(forced):
            state = bdfa.step(state, byte)
            if state < bdfa.num_char_states:  # NOTE: character states are the FSM's own states
                cut = i + 1
        return forced[:cut]

    def copy(self) -> ConstraintState:
        return ConstraintState(self.grammar, self.cursor.copy())

    def __repr__(self) -> str:
        return f"ConstraintState({self.grammar!r}, state={self.state}, tokens={self.num_tokens})"
