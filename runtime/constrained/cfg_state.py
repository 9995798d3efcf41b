"""CFGConstraintState: one request's position in a context-free grammar (wraps
:class:`sglc.grammar.GrammarMatcher`), with the interface the engine asks of
:class:`~.state.ConstraintState`: the allowed-token mask, ``advance``, ``is_finished``,
``rollback`` / ``replace_tail`` (jump-forward's retokenized tail) and ``jump_bytes``.

NOTE: one matcher step per output token, as for the FSM cursor, so ``num_tokens`` equals the
constrained output tokens and rolling back k tokens is k steps.
"""
from __future__ import annotations

from typing import Sequence

import torch

from sglc import fsm
from sglc.grammar import GrammarMatcher


class CFGConstraintState:
    """Per-request state over a shared :class:`~.cfg_grammar.CompiledCFG`; cheap to copy (the
    copies share the matcher's stack pool: the engine's thread is their only user)."""

    __slots__ = ("grammar", "matcher")

    def __init__(self, grammar, matcher: GrammarMatcher | None = None) -> None:  # grammar: CompiledCFG
        self.grammar = grammar
        self.matcher = matcher if matcher is not None else GrammarMatcher(grammar.compiled)

    # --- queries -------------------------------------------------------------------------
    @property
    def vocab(self) -> fsm.Vocabulary:
        return self.grammar.compiled.vocab

    @property
    def num_tokens(self) -> int:
        return self.matcher.num_steps

    def allowed_mask(self) -> torch.Tensor:
        """Bool [vocab_size], True where a token may come next (shared: do not modify)."""
        return self.grammar.to_device(self.matcher.mask())

    def is_allowed(self, token_id: int) -> bool:
        return self.matcher.is_allowed(token_id)

    def can_finish(self) -> bool:
        return self.matcher.can_finish()

    def is_finished(self) -> bool:
        return self.matcher.is_finished

    # --- steps ---------------------------------------------------------------------------
    def advance(self, token_id: int) -> None:
        """Take one sampled token; raises ``ConstraintViolationError`` if it is not allowed."""
        self.matcher.advance(token_id)

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def replace_tail(self, num_removed: int, token_ids: Sequence[int]) -> None:
        """Drop the last ``num_removed`` tokens and take ``token_ids`` instead; atomic (on a
        refused token the state is restored and ``ConstraintViolationError`` raised)."""
        saved = self.matcher.copy()
        self.matcher.rollback(num_removed)
        try:
            for t in token_ids:
                self.matcher.advance(int(t))
        except fsm.ConstraintViolationError:
            self.matcher = saved
            raise

    # --- jump-forward --------------------------------------------------------------------
    def jump_bytes(self) -> bytes:
        """The bytes the grammar forces next, cut to end on a whole character (empty when there
        is a choice, the text may end here, or no whole character is forced)."""
        return whole_characters(self.matcher.forced_bytes())

    def copy(self) -> CFGConstraintState:
        return CFGConstraintState(self.grammar, self.matcher.copy())

    def __repr__(self) -> str:
        return f"CFGConstraintState({self.grammar!r}, tokens={self.num_tokens})"


def whole_characters(forced: bytes) -> bytes:
    """``forced`` cut after its last complete UTF-8 character. Leading continuation bytes (the
    rest of a character the last token split) are kept when a character starts after them, so
    the output then ends whole; all-continuation runs are dropped (their end is unknown here)."""
    last_lead = next((i for i in range(len(forced) - 1, -1, -1) if not 0x80 <= forced[i] <= 0xBF), None)
    if last_lead is None:
        return b""
    lead = forced[last_lead]
    length = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
    return forced if last_lead + length <= len(forced) else forced[:last_lead]
