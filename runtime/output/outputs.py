"""What the engine hands back: final outputs, streaming chunks and continuation scores."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class GenerateOutput:
    """A finished request.

    token_ids are all generated tokens (a matched stop token / eos included); text is their
    decoded text with a matched stop string, and anything after it, cut off. finish_reason is
    SGLang's dict ({"type": "stop", "matched": ...} | {"type": "length", "length": n} |
    {"type": "abort", "message": ...}). Logprob lists are None unless requested:
    output_logprobs[i] belongs to token_ids[i]; input_logprobs to the prompt tokens from
    logprob_start_len on (None for position 0).
    """

    rid: str
    text: str
    token_ids: list[int]
    finish_reason: dict
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    output_logprobs: list[float] | None = None
    output_top_logprobs: list[list[tuple[int, float]]] | None = None
    input_logprobs: list[float | None] | None = None
    #: The prompt token ids input_logprobs belong to (prompt_ids[logprob_start_len:]), else None.
    input_token_ids: list[int] | None = None

    @property
    def meta(self) -> dict:
        """SGLang-style meta_info."""
        return {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
        }


@dataclass(slots=True)
class StreamChunk:
    """One step's news for one request: new text (may be ""), new tokens and their logprobs.

    The last chunk of a request has finished=True and carries the final `output`.
    """

    rid: str
    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    finished: bool = False
    output: GenerateOutput | None = None


@dataclass(slots=True)
class ScoreResult:
    """Log-probabilities of one continuation's tokens after a shared prompt.

    token_ids are the continuation's tokens (from the first token that differs from the
    prompt's own tokenization); logprobs[i] is log p(token_ids[i] | everything before it).
    prompt_tokens / cached_tokens: the shared prompt's tokens and how many of them came from
    the prefix cache (0 when unknown).
    """

    token_ids: list[int]
    logprobs: list[float]
    prompt_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> float:
        """Sum of the token logprobs (the continuation's log-likelihood)."""
        return float(sum(self.logprobs))

    @property
    def normalized(self) -> float:
        """Mean token logprob (SGLang's token_length_normalized)."""
        return self.total / len(self.logprobs)
