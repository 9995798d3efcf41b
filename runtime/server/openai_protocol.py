"""OpenAI / SGLang request fields -> RuntimeService calls, and engine outputs -> response JSON.

Pure functions over dicts (no web framework): the HTTP server (http_server.py) parses the body,
calls these, and serializes what they return. Every bad field raises :class:`RequestError`
with a message naming the field (HTTP 400 in OpenAI's error shape).
"""
from __future__ import annotations

import json
import time
from typing import Any

from sglc.wire.prompt import PromptInput, RequestError

#: OpenAI request fields -> engine SamplingParams fields (same meaning, other name).
_RENAMED = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens"}
_PASSED = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
           "repetition_penalty", "seed", "stop_token_ids", "ignore_eos", "min_tokens")


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | int | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def openai_sampling_fields(body: dict) -> dict[str, Any]:
    """SamplingParams keyword fields from an OpenAI completions/chat request body."""
    fields: dict[str, Any] = {}
    for src, dst in _RENAMED.items():
        if body.get(src) is not None:
            value = body[src]
            if not isinstance(value, int) or isinstance(value, bool):
                raise RequestError(f"'{src}' must be an integer, got {value!r}")
            if value < 0:
                raise RequestError(f"'{src}' must be >= 0, got {value}")
            fields[dst] = value
    for name in _PASSED:
        if body.get(name) is not None:
            fields["min_new_tokens" if name == "min_tokens" else name] = body[name]
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise RequestError(f"'stop' must be a string or a list of strings, got {stop!r}")
        fields["stop"] = stop
    regex = body.get("regex")
    if regex is not None:
        if not isinstance(regex, str):
            raise RequestError(f"'regex' must be a string, got {regex!r}")
        fields["regex"] = regex
    fmt = body.get("response_format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise RequestError("'response_format.json_schema.schema' must be a JSON schema object")
            fields["json_schema"] = json.dumps(schema)
        elif kind == "json_object":
            fields["json_schema"] = json.dumps({"type": "object"})
        elif kind != "text":
            raise RequestError(f"'response_format.type' must be text, json_object or json_schema, got {kind!r}")
    if "regex" in fields and "json_schema" in fields:
        raise RequestError("give at most one constraint: 'regex' or 'response_format' json_schema")
    return fields


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


def num_choices(body: dict, max_n: int = 64) -> int:
    """OpenAI's ``n``: 1..max_n (the server limit max_n)."""
    n = body.get("n", 1)
    if n is None:
        return 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= max_n:
        raise RequestError(f"'n' must be an integer in 1..{max_n} (server limit max_n={max_n}), got {n!r}")
    return n


def finish_reason(reason: dict) -> str:
    """Engine finish dict -> OpenAI finish_reason."""
    kind = reason.get("type")
    return {"length": "length", "stop": "stop"}.get(kind, "abort")


def chat_messages(body: dict) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"'messages[{i}]' must be an object with a 'role' string")
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            if not all(isinstance(t, str) for t in texts):
                raise RequestError(f"'messages[{i}].content': a text part's 'text' must be a string")
            content = "".join(texts)
        if not isinstance(content, str):
            raise RequestError(f"'messages[{i}].content' must be a string or a list of text parts")
        out.append({"role": m["role"], "content": content})
    return out


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
    body = {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": choices}
    if usage_ is not None:
        body["usage"] = usage_
    return body


def sse(data: Any) -> str:
    """One server-sent event: ``data: JSON\\n\\n`` (``data: [DONE]`` for the end marker)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
