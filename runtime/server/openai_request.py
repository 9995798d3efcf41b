"""OpenAI's /v1/completions and /v1/chat/completions request bodies as pydantic models.

The sampling fields are the sampling table's ``openai`` column (sglc.wire.sampling_table: one
row per parameter, ``max_tokens`` and ``max_completion_tokens`` both spelling max_new_tokens),
checked by the row's own range check under the name the client sent. The other fields are
OpenAI's, in three kinds, as in sglang_request.py:

- honoured (``prompt``, ``messages``, ``n``, ``stream``, ``stream_options.include_usage``,
  ``logprobs``, ``echo``, ``top_logprobs``, ``response_format``, sglc's / SGLang's ``regex`` and
  ``ebnf`` extensions, and llama-server's ``grammar`` (a GBNF grammar: what its users send));
- harmless no-ops accepted with any value (``user``: an end-user id for the provider's abuse
  monitoring);
- not supported: accepted only at OpenAI's default (``null`` / empty / ``best_of`` 1 / a
  ``tool_choice`` of "none"), because a silent ignore would change the answer; any other value is a
  400 naming the field.

A field OpenAI does not define is a 400 too (``extra="forbid"``), as is a wrong type (``strict``).
"""
from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, Field, field_validator

from sglc.wire import sampling_table

from .request_model import STRICT, FieldError, is_default, parse_model, sampling_model

__all__ = ["ChatMessage", "ChatRequest", "CompletionRequest", "parse_chat", "parse_completion"]


class JsonSchemaFormat(BaseModel):
    """``response_format.json_schema``: the schema and its name."""

    model_config = STRICT

    name: Optional[str] = None
    description: Optional[str] = None
    #: NOTE: "schema" would shadow a BaseModel attribute: the JSON key is its alias.
    schema_: Union[dict, bool, None] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(BaseModel):
    model_config = STRICT

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None


class StreamOptions(BaseModel):
    model_config = STRICT

    include_usage: Optional[bool] = None


class _OpenAIRequest(sampling_model("_OpenAISampling", sampling_table.BY_OPENAI, with_defaults=False)):
    """What both endpoints take: the table's sampling fields and the fields below."""

    model_config = STRICT

    model: Optional[str] = None
    n: Optional[int] = None
    stream: Optional[bool] = None
    stream_options: Optional[StreamOptions] = None
    #: sglc's and SGLang's extension: the output matches this regular expression.
    regex: Optional[str] = None
    #: SGLang's extension: the output matches this GBNF/EBNF grammar.
    ebnf: Optional[str] = None
    #: llama-server's spelling of the same (GBNF).
    grammar: Optional[str] = None
    response_format: Optional[ResponseFormat] = None
    user: Optional[str] = None  # NOTE: a no-op: an end-user id for abuse monitoring
    # Not supported: only OpenAI's default is accepted.
    logit_bias: Optional[dict] = None

    #: Fields accepted only at their default value (``null`` / empty).
    UNSUPPORTED: ClassVar[tuple[str, ...]] = ("logit_bias",)

    def refusal(self) -> FieldError | None:
        """Why this server cannot honour the request (naming the field), or None."""
        for name in self.UNSUPPORTED:
            if not is_default(getattr(self, name)):
                return FieldError(name, f"'{name}' is not supported by this server (only null is accepted)")
        return None

    def sampling_fields(self) -> dict[str, Any]:
        """The runtime's SamplingParams fields the request sets (by name), each checked by its row
        under the spelling the client used; the constraint (``regex`` or ``response_format``)."""
        fields: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for key, row in sampling_table.BY_OPENAI.items():
            value = getattr(self, key)
            if value is None:
                continue
            if row.name in spelled:
                raise FieldError(key, f"give one of '{spelled[row.name]}' and '{key}', not both")
            try:
                fields[row.name] = row.check(value, f"'{key}'")
            except (TypeError, ValueError) as err:
                raise FieldError(key, str(err)) from None
            spelled[row.name] = key
        schema = self._json_schema()
        given = [(key, field, value) for key, field, value in (
            ("regex", "regex", self.regex), ("ebnf", "ebnf", self.ebnf), ("grammar", "ebnf", self.grammar),
            ("response_format", "json_schema", schema)) if value is not None]
        if len(given) > 1:
            names = " and ".join(f"'{key}'" for key, _, _ in given)
            raise FieldError(given[1][0], f"give at most one constraint, got {names}")
        for _, field, value in given:
            fields[field] = value
        return fields

    def _json_schema(self) -> str | None:
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return json.dumps({"type": "object"})
        schema = fmt.json_schema.schema_ if fmt.json_schema is not None else None
        if not isinstance(schema, dict):
            raise FieldError("response_format.json_schema.schema",
                             "'response_format.json_schema.schema' must be a JSON schema object")
        return json.dumps(schema)

    @property
    def stream_usage(self) -> bool:
        """``stream_options.include_usage``: a last chunk with no choices carries the usage."""
        return self.stream_options is not None and bool(self.stream_options.include_usage)

    def num_choices(self, max_n: int) -> int:
        """OpenAI's ``n``: 1..max_n (the server limit)."""
        n = 1 if self.n is None else self.n
        if not 1 <= n <= max_n:
            raise FieldError("n", f"'n' must be an integer in 1..{max_n} (server limit max_n={max_n}), got {n!r}")
        return n


class CompletionRequest(_OpenAIRequest):
    """POST /v1/completions."""

    prompt: Union[str, list[str], list[int], list[list[int]]]
    logprobs: Optional[int] = None
    echo: Optional[bool] = None
    # Not supported: only OpenAI's default is accepted.
    suffix: Optional[str] = None
    best_of: Optional[int] = None

    UNSUPPORTED: ClassVar[tuple[str, ...]] = ("logit_bias", "suffix")

    def refusal(self) -> FieldError | None:
        if self.best_of not in (None, 1):
            return FieldError("best_of", "'best_of' is not supported by this server (only 1 is accepted); use 'n'")
        return super().refusal()

    def prompts(self) -> list[str | list[int]]:
        """The prompts: one text, several texts, one token-id list or several."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if not prompt:
            raise FieldError("prompt", "'prompt' must be a string, a non-empty list of strings, a list of token ids "
                                       "or a list of such lists")
        if all(isinstance(t, int) for t in prompt):
            return [list(prompt)]  # type: ignore[arg-type]
        if any(isinstance(p, list) and not p for p in prompt):
            raise FieldError("prompt", "'prompt': a token-id list must not be empty")
        return list(prompt)  # type: ignore[arg-type]


class TextPart(BaseModel):
    """A ``content`` part: only text parts (the model is text-only)."""

    model_config = STRICT

    type: str
    text: str

    @field_validator("type")
    @classmethod
    def _text_only(cls, value: str) -> str:
        if value != "text":
            raise ValueError(f"only 'text' content parts are accepted (this server's model is text-only), "
                             f"got a {value!r} part")
        return value


class ChatMessage(BaseModel):
    model_config = STRICT

    role: str
    content: Union[str, list[TextPart], None] = None
    name: Optional[str] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatRequest(_OpenAIRequest):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    # Not supported (no tool calling): only OpenAI's default is accepted.
    tools: Optional[list] = None
    tool_choice: Union[str, dict, None] = None
    functions: Optional[list] = None
    function_call: Union[str, dict, None] = None
    parallel_tool_calls: Optional[bool] = None

    UNSUPPORTED: ClassVar[tuple[str, ...]] = ("logit_bias", "tools", "functions", "function_call")

    def refusal(self) -> FieldError | None:
        if self.tool_choice not in (None, "none"):
            return FieldError("tool_choice", "'tool_choice' is not supported by this server (no tool calling; only "
                                             "null or \"none\" is accepted)")
        return super().refusal()

    def chat_messages(self) -> list[dict[str, str]]:
        """The messages as the chat template takes them: {role, content} with the text parts joined."""
        return [{"role": m.role, "content": m.text()} for m in self.messages]


def _parsed(model: type[_OpenAIRequest], body: Any, api: str) -> Any:
    request = parse_model(model, body, api=api)
    refusal = request.refusal()
    if refusal is not None:
        raise refusal
    return request


def parse_completion(body: Any) -> CompletionRequest:
    """A /v1/completions body, validated; FieldError naming the first bad field."""
    return _parsed(CompletionRequest, body, "OpenAI's completions request")


def parse_chat(body: Any) -> ChatRequest:
    """A /v1/chat/completions body, validated; FieldError naming the first bad field."""
    return _parsed(ChatRequest, body, "OpenAI's chat completions request")
