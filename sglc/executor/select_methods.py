"""How `select` picks a choice from per-choice log-probabilities (SGLang's three methods).

Inputs are per-choice lists of token log-probabilities of the choice's tokens after the prompt
(and, for unconditional normalization, the same tokens' log-probabilities without the prompt).
Ties go to the earliest choice (numpy argmax semantics), so decisions are deterministic.

- ``token_length_normalized``: the highest mean token logprob.
- ``greedy_token_selection``: token position by position, keep the choices with the highest
  logprob; a shorter choice is padded with its own mean logprob; first survivor wins.
- ``unconditional_likelihood_normalized``: the highest mean of (conditional - unconditional)
  token logprobs, which discounts choices that are likely whatever the prompt says.
"""
from __future__ import annotations

import math
import random
from typing import NamedTuple, Optional, Sequence

METHODS = ("token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized")


class Decision(NamedTuple):
    """The chosen index and the per-choice scores that decided it (for meta info)."""

    index: int
    scores: list[float]


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def _mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("a choice has no tokens to score")
    return sum(values) / len(values)


def token_length_normalized(logprobs: Sequence[Sequence[float]]) -> Decision:
    scores = [_mean(lp) for lp in logprobs]
    return Decision(_argmax(scores), scores)


def greedy_token_selection(logprobs: Sequence[Sequence[float]]) -> Decision:
    means = [_mean(lp) for lp in logprobs]
    width = max(len(lp) for lp in logprobs)
    # NOTE: SGLang pads a shorter choice with its mean so it can be compared at every position.
    matrix = [list(lp) + [m] * (width - len(lp)) for lp, m in zip(logprobs, means)]
    remaining = list(range(len(matrix)))
    for j in range(width):
        best = max(matrix[i][j] for i in remaining)
        remaining = [i for i in remaining if matrix[i][j] == best]
        if len(remaining) == 1:
            break
    return Decision(remaining[0], means)


def unconditional_likelihood_normalized(logprobs: Sequence[Sequence[float]],
                                        unconditional: Optional[Sequence[Sequence[float]]]) -> Decision:
    if unconditional is None:
        raise ValueError("unconditional_likelihood_normalized needs the choices' unconditional logprobs")
    scores = []
    for cond, uncond in zip(logprobs, unconditional):
        if len(cond) != len(uncond):
            raise ValueError(f"conditional ({len(cond)}) and unconditional ({len(uncond)}) token counts differ")
        scores.append(_mean([c - u for c, u in zip(cond, uncond)]))
    return Decision(_argmax(scores), scores)


def decide(method: str, logprobs: Sequence[Sequence[float]],
           unconditional: Optional[Sequence[Sequence[float]]] = None,
           temperature: float = 0.0, rng: Optional[random.Random] = None) -> Decision:
    """Apply `method`; with temperature > 0, sample a choice from softmax(scores / temperature)."""
    if not logprobs:
        raise ValueError("select needs at least one choice")
    if method == "token_length_normalized":
        decision = token_length_normalized(logprobs)
    elif method == "greedy_token_selection":
        decision = greedy_token_selection(logprobs)
    elif method == "unconditional_likelihood_normalized":
        decision = unconditional_likelihood_normalized(logprobs, unconditional)
    else:
        raise ValueError(f"unknown choices_method {method!r}; known: {', '.join(METHODS)}")
    if temperature and temperature > 0:
        top = max(decision.scores)
        weights = [math.exp((s - top) / temperature) for s in decision.scores]
        pick = (rng or random.Random()).choices(range(len(weights)), weights=weights)[0]
        return Decision(pick, decision.scores)
    return decision


def needs_unconditional(method: str) -> bool:
    return method == "unconditional_likelihood_normalized"
