"""TokenResult: what the model runner returns for one sampling entry of a step."""
from __future__ import annotations

from typing import NamedTuple


class TokenResult(NamedTuple):
    """One sampling entry's output: token, its logprob and top alternatives when asked for.

    error is set (and token_id meaningless) when this request alone could not be sampled,
    e.g. its constraint allowed no token; the engine aborts it.
    """

    token_id: int
    logprob: float | None
    top: list[tuple[int, float]] | None
    error: str | None = None
