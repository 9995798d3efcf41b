"""OpenAI's response bodies as pydantic models: what /v1/completions and /v1/chat/completions answer.

openai_protocol.py builds each answer (and each SSE chunk) as a dict and passes it through the
model of its ``object`` (:func:`checked`): a field we misspell or a value of the wrong type fails
here, in our tests, not in a client. Fields are dumped exactly as given (``exclude_unset``), so a
chunk's ``delta`` stays ``{}`` when it carries no text, as OpenAI sends it.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

__all__ = ["ChatCompletion", "ChatCompletionChunk", "Completion", "ErrorBody", "checked"]

_EXACT = ConfigDict(extra="forbid", strict=True)


class _Model(BaseModel):
    model_config = _EXACT


class CachedTokens(_Model):
    cached_tokens: int


class Usage(_Model):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: Optional[CachedTokens] = None


class CompletionLogprobs(_Model):
    tokens: list[str]
    token_logprobs: list[Optional[float]]
    top_logprobs: Optional[list[Optional[dict[str, float]]]] = None
    text_offset: list[int]


class CompletionChoice(_Model):
    index: int
    text: str
    logprobs: Optional[CompletionLogprobs] = None
    finish_reason: Optional[str] = None


class Completion(_Model):
    """A /v1/completions answer, and each of its SSE chunks (same object, partial text)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Optional[Usage] = None


class TopLogprob(_Model):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Model):
    content: list[ChatTokenLogprob]


class AssistantMessage(_Model):
    role: Literal["assistant"]
    content: str


class ChatChoice(_Model):
    index: int
    message: AssistantMessage
    logprobs: Optional[ChatLogprobs] = None
    finish_reason: Optional[str] = None


class ChatCompletion(_Model):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Optional[Usage] = None


class Delta(_Model):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChatChunkChoice(_Model):
    index: int
    delta: Delta
    logprobs: Optional[ChatLogprobs] = None
    finish_reason: Optional[str] = None


class ChatCompletionChunk(_Model):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Optional[Usage] = None


class ErrorDetail(_Model):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[str | int] = None


class ErrorBody(_Model):
    """Every error answer: ``{"error": {message, type, param, code}}`` (also an SSE error event)."""

    error: ErrorDetail


#: The model of each response ``object``.
BY_OBJECT: dict[str, type[BaseModel]] = {"text_completion": Completion, "chat.completion": ChatCompletion,
                                         "chat.completion.chunk": ChatCompletionChunk}


def checked(model: type[BaseModel], body: dict[str, Any]) -> dict[str, Any]:
    """`body` validated by `model` and dumped as given (fields it left out stay out)."""
    return model.model_validate(body).model_dump(exclude_unset=True)
