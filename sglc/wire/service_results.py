"""What the runtime service answers, as plain data: a Score's outcome and the model's facts.

The gRPC server converts these to runtime.proto messages through :mod:`sglc.wire.server_convert`;
the in-process backend reads them directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sglc.wire.chat_template import ChatTemplate


@dataclass
class ChoiceScore:
    token_ids: list[int]
    token_logprobs: list[float]
    unconditional_logprobs: list[float] | None = None


@dataclass
class ScoreOutcome:
    choices: list[ChoiceScore]
    prompt_tokens: int
    cached_tokens: int
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RuntimeModelInfo:
    model_name: str
    model_path: str
    context_length: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    dtype: str
    supports_images: bool
    chat_template: ChatTemplate | None
    jinja_chat_template: str
