"""SamplingState: what one request carries from step to step besides its tokens.

Its seeded generator (noise for seeded sampling), its constraint cursor (the allowed-token mask
each step) and its prompt logprobs (the positions still to collect and the values so far). The
engine makes it at submit (``Req.sampling_state``); the model runner reads and updates it every
step; the engine reads the cursor (text, jump-forward) and the prompt logprobs (final output).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .sampling_params import SamplingParams

if TYPE_CHECKING:  # NOTE: torch only where a request has a seed (the torch-free engine imports this module)
    import torch


def prompt_logprob_span(params: SamplingParams, prompt_len: int) -> tuple[int, int, bool] | None:
    """The prompt positions [next, end) whose logits rows give the prompt logprobs a request asks
    for (row p predicts token p + 1), and whether they start with position 0's None; None when it
    asks for none."""
    if not (params.return_logprob and params.logprob_start_len >= 0):
        return None
    start = min(params.logprob_start_len, prompt_len - 1)
    return max(start - 1, 0), prompt_len - 1, start == 0


class ConstraintCursor(Protocol):
    """Per-request constrained-decoding state (made by ``params.constraint.new_cursor()``)."""

    def allowed_mask(self) -> "torch.Tensor": ...  # bool [<= vocab], True = allowed next token

    def advance(self, token_id: int) -> None: ...

    def is_finished(self) -> bool: ...


@dataclass(slots=True)
class SamplingState:
    """One request's sampling state (``Req.sampling_state``).

    logprob_next / logprob_end: prompt positions [next, end) whose logits rows are still needed
    for prompt logprobs (row p predicts token p + 1); next == end when none are.
    """

    generator: "torch.Generator | None" = None
    cursor: ConstraintCursor | None = None
    logprob_next: int = 0
    logprob_end: int = 0
    prompt_logprobs: list[float | None] = field(default_factory=list)

    @classmethod
    def for_request(cls, params: SamplingParams, prompt_len: int) -> SamplingState:
        state = cls()
        if params.seed is not None and not params.is_greedy:
            from .sampler import make_generator

            state.generator = make_generator(params.seed)
        if params.constraint is not None:
            state.cursor = params.constraint.new_cursor()
        span = prompt_logprob_span(params, prompt_len)
        if span is not None:
            state.logprob_next, state.logprob_end, first_none = span
            if first_none:
                state.prompt_logprobs.append(None)  # position 0 has no context
        return state

    @property
    def wants_prompt_rows(self) -> bool:
        """True while prompt positions' logits rows are still needed."""
        return self.logprob_next < self.logprob_end
