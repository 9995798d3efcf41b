"""OpenAI's response bodies as pydantic models: what /v1/completions and /v1/chat/completions answer.

openai_protocol.py passes each whole answer and error body through the model of its ``object``
(:func:`checked`): a field we misspell or a value of the wrong type fails here, not in a client.
SSE chunks are built per token, so the server does not re-validate each; the tests hold every
chunk shape to these models. Fields are dumped exactly as given (``exclude_unset``), so a chunk's
``delta`` stays ``{}`` when it carries no text, as OpenAI sends it.
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


class _Choice(_Model):
    index: int
    finish_reason: Optional[str] = None


class CompletionChoice(_Choice):
    text: str
    logprobs: Optional[CompletionLogprobs] = None


class _Envelope(_Model):
    """What every answer and chunk carries around its choices."""

    id: str
    created: int
    model: str
    usage: Optional[Usage] = None


class Completion(_Envelope):
    """A /v1/completions answer, and each of its SSE chunks (same object, partial text)."""

    object: Literal["text_completion"]
    choices: list[CompletionChoice]


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


class _ChatChoice(_Choice):
    logprobs: Optional[ChatLogprobs] = None


class ChatChoice(_ChatChoice):
    message: AssistantMessage


class ChatCompletion(_Envelope):
    object: Literal["chat.completion"]
    choices: list[ChatChoice]


class Delta(_Model):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChatChunkChoice(_ChatChoice):
    delta: Delta


class ChatCompletionChunk(_Envelope):
    object: Literal["chat.completion.chunk"]
    choices: list[ChatChunkChoice]


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
