"""The server's request checks without a model: ServerLimits, strict JSON bodies, the API key and
same-origin guard (called as ASGI), and `sglc serve --limit`."""
from __future__ import annotations

import asyncio
import json

import pytest

from sglc.wire.prompt import RequestError
from sglc_runtime.server.auth import bearer_matches, resolve_api_key
from sglc_runtime.server.http_guard import RequestGuard, parse_json_object
from sglc_runtime.server.http_handlers import HttpError
from sglc_runtime.server.limits import LimitExceeded, ServerLimits


def test_every_limit_has_a_positive_integer_default():
    """Each limit is an int >= 1 by default, and a non-positive or non-int value is refused."""
    limits = ServerLimits()
    assert all(isinstance(getattr(limits, n), int) and getattr(limits, n) >= 1 for n in limits.names())
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="max_choices"):
            ServerLimits(max_choices=bad)


def test_replace_changes_one_limit_and_names_unknown_ones():
    """replace() returns a validated copy; an unknown name is an error listing the known ones."""
    limits = ServerLimits().replace(max_choices=512)
    assert limits.max_choices == 512 and limits.max_n == ServerLimits().max_n
    with pytest.raises(ValueError, match="unknown server limit 'max_chioces'.*max_choices"):
        ServerLimits().replace(max_chioces=1)


def test_errors_name_the_limit_and_its_value():
    """A count or a text over its limit raises LimitExceeded (a RequestError) naming both."""
    limits = ServerLimits(max_choices=4, max_prompt_bytes=10)
    with pytest.raises(LimitExceeded, match=r"number of choices is 5, over the server limit max_choices=4") as err:
        limits.check_count("max_choices", "the number of choices", ["a"] * 5)
    assert isinstance(err.value, RequestError) and err.value.limit == "max_choices"
    with pytest.raises(LimitExceeded, match="11 characters, over the server limit max_prompt_bytes=10"):
        limits.check_text("max_prompt_bytes", "the prompt", "x" * 11)
    with pytest.raises(LimitExceeded, match="12 bytes, over the server limit max_prompt_bytes=10"):
        limits.check_text("max_prompt_bytes", "the prompt", "é" * 6)  # 6 characters, 12 bytes
    assert limits.check_text("max_prompt_bytes", "the prompt", "é" * 5) == ("é" * 5).encode()


def test_a_lone_surrogate_is_a_request_error_naming_its_position():
    """Text no tokenizer can take (JSON's "\\ud800") is refused before anything encodes it."""
    with pytest.raises(RequestError, match=r"not valid Unicode: a lone surrogate '\\ud800' at character 3"):
        ServerLimits().check_text("max_prompt_bytes", "the prompt", "abc\ud800")


@pytest.mark.parametrize("fields, limit", [
    ({"stop": ["a"] * 33}, "max_stop_strings"),
    ({"stop": "x" * 1025}, "max_stop_bytes"),
    ({"stop": ["ok", "x" * 1025]}, "max_stop_bytes"),
    ({"stop_token_ids": [1] * 257}, "max_stop_token_ids"),
    ({"top_logprobs_num": 21}, "max_top_logprobs"),
])
def test_sampling_fields_over_a_limit_are_refused(fields, limit):
    """Stop strings, stop token ids and top logprobs are bounded by their limits."""
    with pytest.raises(LimitExceeded) as err:
        ServerLimits().check_sampling(fields)
    assert err.value.limit == limit and limit in str(err.value)


def test_sampling_fields_within_the_limits_pass():
    """The largest allowed values pass (the bounds are inclusive)."""
    ServerLimits().check_sampling({"stop": ["s"] * 32, "stop_token_ids": [1] * 256, "top_logprobs_num": 20})


@pytest.mark.parametrize("raw, words", [
    (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels"),
    (b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}", "nested more than 64 levels"),
    (b'{"prompt": "\\ud800"}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate"),
    (b'{"temperature": NaN}', "NaN is not a JSON number"),
    (b'{"temperature": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"temperature": 1e999}', "too large for a 64-bit float"),
    (b'{"seed": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b'{"prompt": "hi"', "not valid JSON"),
    (b"\xff\xfe{}", "UTF-16-LE byte-order mark"),
    (b"[1, 2]", "must be a JSON object"),
])
def test_malformed_json_bodies_are_400s_naming_the_problem(raw, words):
    """Deep nesting, lone surrogates, NaN/Infinity, huge numbers, truncated or non-UTF-8 bodies and
    non-objects are clean 400s (never a RecursionError or an encode error later)."""
    with pytest.raises(HttpError) as err:
        parse_json_object(raw, max_depth=64)
    assert err.value.status == 400 and words in str(err.value), str(err.value)


def test_a_body_at_the_depth_limit_parses():
    """Exactly max_depth levels is allowed."""
    raw = b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}"
    assert parse_json_object(raw, max_depth=64) == {"a": json.loads(b"[" * 63 + b"]" * 63)}


def test_bearer_matches_only_the_exact_key():
    """``Bearer KEY`` (scheme in any case) matches; anything else does not."""
    assert bearer_matches("Bearer sk-1", "sk-1") and bearer_matches(b"bearer  sk-1 ", "sk-1")
    for header in (None, "", "sk-1", "Bearer sk-2", "Basic sk-1", "Bearer sk-1x", "Bearer"):
        assert not bearer_matches(header, "sk-1"), header


def test_api_key_comes_from_the_flag_else_the_environment(monkeypatch):
    """--api-key wins; else $SGLC_API_KEY; an empty value means no key."""
    monkeypatch.setenv("SGLC_API_KEY", "from-env")
    assert resolve_api_key("flag") == "flag" and resolve_api_key(None) == "from-env"
    monkeypatch.setenv("SGLC_API_KEY", "")
    assert resolve_api_key(None) is None


def _call_guard(guard: RequestGuard, path: str, headers: dict[str, str]) -> tuple[int, dict | None]:
    """Run one GET through the guard; (status, JSON body) — status 200 when it reached the app."""
    sent: list[dict] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    guard.app = app
    scope = {"type": "http", "method": "GET", "path": path, "headers": [(k.lower().encode(), v.encode())
                                                                         for k, v in headers.items()]}
    asyncio.run(guard(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


def test_guard_refuses_a_missing_or_wrong_key_with_401_but_leaves_health_open():
    """With a key, every path but /health needs ``Authorization: Bearer KEY`` (401 in OpenAI's shape)."""
    guard = RequestGuard(None, api_key="sk-1")
    status, body = _call_guard(guard, "/v1/models", {"host": "localhost:1"})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert _call_guard(guard, "/v1/models", {"host": "localhost:1", "authorization": "Bearer nope"})[0] == 401
    assert _call_guard(guard, "/v1/models", {"host": "localhost:1", "authorization": "Bearer sk-1"})[0] == 200
    assert _call_guard(guard, "/health", {"host": "localhost:1"})[0] == 200


def test_guard_refuses_a_foreign_origin_with_403():
    """A browser request from another site (Origin not an allowed host) is refused; same origin and no Origin pass."""
    guard = RequestGuard(None)
    status, body = _call_guard(guard, "/flush_cache", {"host": "127.0.0.1:30001", "origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in body["error"]["message"]
    assert _call_guard(guard, "/x", {"host": "127.0.0.1:30001", "origin": "null"})[0] == 403
    assert _call_guard(guard, "/x", {"host": "127.0.0.1:30001", "origin": "http://127.0.0.1:30001"})[0] == 200
    assert _call_guard(guard, "/x", {"host": "127.0.0.1:30001"})[0] == 200


def test_serve_limit_flag_sets_one_limit_and_rejects_bad_names(capsys):
    """`sglc serve --limit NAME=N` parses into ServerLimits; a malformed value is a usage error."""
    import argparse

    from sglc.cli_serve import _limit

    assert _limit("max_choices=512") == ("max_choices", 512)
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=INTEGER"):
        _limit("max_choices")
    with pytest.raises(ValueError, match="unknown server limit"):
        ServerLimits().replace(**dict([_limit("nope=1")]))
