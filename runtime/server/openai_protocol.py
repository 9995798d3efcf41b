"""Engine outputs -> OpenAI response JSON, and /generate's prompt and sampling shapes.

Pure functions over dicts (no web framework). The OpenAI request bodies are pydantic models
(openai_request.py), and so are the answers (openai_response.py: every whole answer and error
body built here passes its model; SSE chunks, built per token, are checked by the tests); /generate's batch shapes are checked here, each bad field a
:class:`RequestError` naming it (HTTP 400 in OpenAI's error shape).
"""
from __future__ import annotations

import json
import time
from typing import Any

from sglc.wire.prompt import PromptInput, RequestError

from .openai_response import BY_OBJECT, ErrorBody, checked


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | int | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return checked(ErrorBody, {"error": {"message": message, "type": type_, "param": param, "code": code}})


def generate_prompts(body: dict) -> tuple[list[PromptInput], bool]:
    """/generate's prompts and whether they are a batch: ``text`` (a string or a non-empty list of
    strings) or ``input_ids`` (a list of token ids or a non-empty list of such lists)."""
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise RequestError("give exactly one of 'text' (a string or a list of strings) or 'input_ids' "
                           "(a list of token ids or a list of such lists)")
    if text is not None:
        if isinstance(text, str):
            return [PromptInput(text=text)], False
        if not isinstance(text, list) or not text:
            raise RequestError(f"'text' must be a string or a non-empty list of strings, got {_shape(text)}")
        bad = [i for i, t in enumerate(text) if not isinstance(t, str)]
        if bad:
            raise RequestError(f"'text' is a batch, so every item must be a string; item {bad[0]} is "
                               f"{_shape(text[bad[0]])}")
        return [PromptInput(text=t) for t in text], True
    if not isinstance(ids, list) or not ids:
        raise RequestError(f"'input_ids' must be a non-empty list of token ids or of token-id lists, got {_shape(ids)}")
    if all(_is_int(t) for t in ids):
        return [PromptInput(token_ids=list(ids))], False
    if not all(isinstance(row, list) for row in ids):
        raise RequestError("'input_ids' mixes token ids and lists: give a list of token ids or a list of lists")
    for i, row in enumerate(ids):
        if not row or not all(_is_int(t) for t in row):
            raise RequestError(f"'input_ids[{i}]' must be a non-empty list of integer token ids")
    return [PromptInput(token_ids=list(row)) for row in ids], True


def generate_sampling(value: Any, num_prompts: int, batch: bool) -> list[dict[str, Any]]:
    """Per-prompt SamplingParams fields from /generate's ``sampling_params``: an object (shared by
    every prompt) or, for a batch, a list with one object per prompt."""
    if value is None:
        value = {}
    if isinstance(value, list):
        if not batch:
            raise RequestError("'sampling_params' is a list, which needs a batch prompt ('text' list or "
                               "'input_ids' list of lists); give one object for a single prompt")
        if len(value) != num_prompts:
            raise RequestError(f"'sampling_params' has {len(value)} entries for {num_prompts} prompts; give one "
                               "per prompt or a single object for all")
        items = value
    elif isinstance(value, dict):
        items = [value] * num_prompts
    else:
        raise RequestError(f"'sampling_params' must be an object or a list of objects, got {_shape(value)}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError(f"'sampling_params[{i}]' must be an object, got {_shape(item)}")
        fields = dict(item)
        if isinstance(fields.get("json_schema"), (dict, list)):
            fields["json_schema"] = json.dumps(fields["json_schema"])
        out.append(fields)
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return "an empty list" if not value else f"a list of {type(value[0]).__name__}"
    return type(value).__name__


def finish_reason(reason: dict) -> str:
    """Engine finish dict -> OpenAI finish_reason."""
    kind = reason.get("type")
    return {"length": "length", "stop": "stop"}.get(kind, "abort")


# ----- logprobs -----
def completion_logprobs(decode: Any, token_ids: list[int], logprobs: list[float | None],
                        top: list[list[tuple[int, float]]] | None, offset0: int) -> dict[str, Any]:
    """OpenAI completions `logprobs` object: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens = [decode([t]) for t in token_ids]
    offsets, pos = [], offset0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    tops = None
    if top is not None:
        tops = [None if row is None else {decode([i]): float(lp) for i, lp in row} for row in top]
    return {"tokens": tokens, "token_logprobs": [None if x is None else float(x) for x in logprobs],
            "top_logprobs": tops, "text_offset": offsets}


#: The chat logprob of a token jump-forward appended without sampling it (the model computed no
#: distribution there). OpenAI's schema needs a number; under the constraint the token was the
#: only choice, so its constrained probability is 1.
FORCED_TOKEN_LOGPROB = 0.0


def chat_logprobs(decode: Any, token_ids: list[int], logprobs: list[float | None],
                  top: list[list[tuple[int, float]]] | None) -> dict[str, Any]:
    """OpenAI chat `logprobs` object: {"content": [{token, logprob, bytes, top_logprobs}]}.
    A token without a logprob (forced by jump-forward) gets FORCED_TOKEN_LOGPROB and no top list."""
    content = []
    for k, (t, lp) in enumerate(zip(token_ids, logprobs)):
        text = decode([t])
        row = top[k] if top is not None and k < len(top) and top[k] is not None else []
        content.append({"token": text, "logprob": FORCED_TOKEN_LOGPROB if lp is None else float(lp),
                        "bytes": list(text.encode()),
                        "top_logprobs": [{"token": decode([i]), "logprob": float(v),
                                          "bytes": list(decode([i]).encode())} for i, v in row]})
    return {"content": content}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def envelope(kind: str, rid: str, model: str, choices: list[dict], usage_: dict | None = None) -> dict[str, Any]:
    """An SSE chunk (or the body of an answer) whose ``object`` is `kind`. NOTE: not validated:
    chunks are built per token; tests hold them to openai_response's models."""
    body = {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": choices}
    if usage_ is not None:
        body["usage"] = usage_
    return body


def answer(kind: str, rid: str, model: str, choices: list[dict], usage_: dict | None = None) -> dict[str, Any]:
    """A whole (non-streamed) answer, checked by its object's response model (once per call)."""
    return checked(BY_OBJECT[kind], envelope(kind, rid, model, choices, usage_))


def sse(data: Any) -> str:
    """One server-sent event: ``data: JSON\\n\\n`` (``data: [DONE]`` for the end marker)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
