"""How `select` turns per-choice log-probabilities into a decision (SGLang's method objects).

The frontend only records the method's name on the SELECT node; the runtime implements the
scoring (DESIGN §6). The objects exist so SGLang programs that pass them keep working.
"""
from __future__ import annotations

from typing import Union


class ChoicesSamplingMethod:
    """A named choice-scoring method. Subclasses only fix `name` and the data they need."""

    name: str = ""
    #: Whether the method also needs the choices' log-probabilities without the prompt.
    requires_unconditional_logprobs: bool = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TokenLengthNormalized(ChoicesSamplingMethod):
    """Pick the choice with the highest mean token log-probability (SGLang's default)."""

    name = "token_length_normalized"


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Pick greedily token by token, breaking ties by the mean log-probability."""

    name = "greedy_token_selection"


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """Normalize each choice's log-probability by its likelihood without the prompt."""

    name = "unconditional_likelihood_normalized"
    requires_unconditional_logprobs = True


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()

METHODS: dict[str, ChoicesSamplingMethod] = {
    m.name: m for m in (token_length_normalized, greedy_token_selection, unconditional_likelihood_normalized)
}


def choices_method_name(method: Union[ChoicesSamplingMethod, str, None]) -> str:
    """The stored name of a method given as an object, a name, or None (the default)."""
    if method is None:
        return token_length_normalized.name
    if isinstance(method, ChoicesSamplingMethod):
        if method.name not in METHODS:
            raise ValueError(f"unknown choices_method {method!r}; known: {', '.join(METHODS)}")
        return method.name
    if isinstance(method, str) and method in METHODS:
        return method
    raise ValueError(f"unknown choices_method {method!r}; known: {', '.join(METHODS)}")
