"""Every request-controlled size is refused BEFORE the work it bounds, over HTTP and gRPC, with an
error naming the limit and its value; malformed bodies are clean 400s; the server keeps serving.

One in-process runtime on the real default model (HTTP + gRPC on loopback) with small body and
prompt limits, so that over-limit requests stay small; the other limits are the defaults, which
the docs' limits table must list.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import grpc
import pytest

from grpc_helpers import runtime_fixture

from server_helpers import (GREEDY_PROMPT, call, greedy_completion, greedy_grpc, grpc_address, http_base,
                            post_json, raw_exchange, rpc_error, status_of, wait_idle)
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.server.limits import ServerLimits

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
LIMITS = ServerLimits(max_request_bytes=256 * 1024, max_prompt_bytes=64 * 1024)
BIG_TEXT = "word " * 20_000  # 100,000 bytes: over max_prompt_bytes, under max_request_bytes


runtime = runtime_fixture(4096, http_port=0, limits=LIMITS)


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


@pytest.fixture(scope="module")
def stub(runtime):
    channel = grpc.insecure_channel(grpc_address(runtime))
    yield pb_grpc.RuntimeStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def greedy(base) -> str:
    """The greedy answer before any bad request (later answers must equal it)."""
    return greedy_completion(base)


def assert_still_serving(runtime, base, greedy) -> None:
    assert greedy_completion(base) == greedy
    wait_idle(runtime, timeout=10)


def test_documented_defaults_are_the_code_defaults():
    """docs/runtime_server.md's limits table lists every ServerLimits field with its default."""
    text = (ROOT / "docs" / "runtime_server.md").read_text()
    rows = dict(re.findall(r"^\| `(max_\w+)` \| ([\d,]+)", text, flags=re.M))
    defaults = ServerLimits()
    assert set(rows) == set(defaults.names())
    for name, value in rows.items():
        assert int(value.replace(",", "")) == getattr(defaults, name), name


HTTP_OVER_LIMIT = [
    ("/v1/completions", {"prompt": BIG_TEXT, "max_tokens": 1}, "max_prompt_bytes=65536"),
    ("/v1/completions", {"prompt": ["a", BIG_TEXT], "max_tokens": 1}, "max_prompt_bytes=65536"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": BIG_TEXT}]}, "max_prompt_bytes=65536"),
    ("/generate", {"text": BIG_TEXT}, "max_prompt_bytes=65536"),
    ("/generate", {"text": ["x"] * 257}, "max_batch=256"),
    ("/v1/completions", {"prompt": ["x"] * 5, "n": 64}, "max_batch=256"),
    ("/v1/completions", {"prompt": "x", "n": 65}, "max_n=64"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, "max_top_logprobs=20"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
     "max_top_logprobs=20"),
    ("/generate", {"text": "x", "return_logprob": True, "top_logprobs_num": 10_000}, "max_top_logprobs=20"),
    ("/v1/completions", {"prompt": "x", "stop": ["s"] * 33}, "max_stop_strings=32"),
    ("/v1/completions", {"prompt": "x", "stop": "s" * 1025}, "max_stop_bytes=1024"),
    ("/generate", {"text": "x", "sampling_params": {"stop_token_ids": [1] * 257}}, "max_stop_token_ids=256"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}] * 1025}, "max_messages=1024"),
]


@pytest.mark.parametrize("path, body, limit", HTTP_OVER_LIMIT,
                         ids=[f"{p}-{limit.split('=')[0]}-{i}" for i, (p, _, limit) in enumerate(HTTP_OVER_LIMIT)])
def test_http_sizes_over_a_limit_are_400s_naming_it(runtime, base, greedy, path, body, limit):
    """Each over-limit size gets a 400 whose message names the limit and its value; nothing runs."""
    before = runtime.engine.stats().num_finished
    status, out = post_json(base, path, body)
    assert status == 400, out
    assert limit in out["error"]["message"], out
    assert runtime.engine.stats().num_finished == before, "the engine did work for a refused request"
    assert_still_serving(runtime, base, greedy)


def test_http_body_over_max_request_bytes_is_413_from_content_length(runtime, base, greedy):
    """A declared Content-Length over the limit is refused before the body is read."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {base[7:]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {40 * 2**20}\r\n\r\n").encode()
    response = raw_exchange(base, head + b'{"prompt": "')  # the other 40 MB never come
    assert status_of(response) == 413, response[:300]
    assert b"max_request_bytes=262144" in response
    assert_still_serving(runtime, base, greedy)


def test_http_chunked_body_over_max_request_bytes_is_413_while_reading(runtime, base, greedy):
    """A body without Content-Length is counted while it is read and cut off at the limit."""
    body = json.dumps({"prompt": "x" * 300_000}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {base[7:]}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 65536]), body[i:i + 65536])
                      for i in range(0, len(body), 65536))
    response = raw_exchange(base, head + chunks + b"0\r\n\r\n")
    assert status_of(response) == 413, response[:300]
    assert b"max_request_bytes=262144" in response
    assert_still_serving(runtime, base, greedy)


@pytest.mark.parametrize("path, raw, words", [
    ("/v1/completions", b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels"),
    ("/v1/completions", b'{"prompt": "\\ud800", "max_tokens": 1}', "lone surrogate"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\udfffb"}]}', "lone surrogate"),
    ("/generate", b'{"text": "\\ud83d"}', "lone surrogate"),
    ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', "NaN"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1e999}', "64-bit float"),
    ("/v1/completions", b'{"prompt": "x", "seed": 123456789012345678901234567890}', "seed"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1', "not valid JSON"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
     "'messages[0].content[0].text': Input should be a valid string, got 5"),
])
def test_malformed_bodies_are_clean_400s(runtime, base, greedy, path, raw, words):
    """Deep nesting, lone surrogates, NaN, huge numbers and truncated JSON are 400s naming the
    problem (never a 500 with a traceback)."""
    status, out = post_json(base, path, raw)
    assert status == 400, out
    assert words.lower() in out["error"]["message"].lower(), out
    assert "Traceback" not in json.dumps(out)
    assert_still_serving(runtime, base, greedy)


def test_the_prompt_list_case_runs_nothing_when_one_prompt_is_too_long(runtime, base, greedy):
    """["Hi", <too long>] is a 400 and the "Hi" completion is never left running."""
    status, out = post_json(base, "/v1/completions", {"prompt": ["Hi", "x " * 20_000], "max_tokens": 200})
    assert status == 400 and "prompt 1" in out["error"]["message"] and "context" in out["error"]["message"], out
    assert runtime.service.num_active == 0
    assert_still_serving(runtime, base, greedy)


# ----- gRPC -----
def generate(stub, text="x", **fields):
    sampling = fields.pop("sampling", pb.SamplingParams(max_new_tokens=1))
    return lambda: stub.Generate(pb.GenerateRequest(prompt=pb.Prompt(text=text), sampling=sampling, **fields),
                                 timeout=60)


GRPC_OVER_LIMIT = [
    ("generate-40MB", lambda s: generate(s, "x" * 40_000_000), "Received message larger than max"),
    ("generate-prompt", lambda s: generate(s, BIG_TEXT), "max_prompt_bytes=65536"),
    ("score-prompt", lambda s: lambda: s.Score(pb.ScoreRequest(prompt=pb.Prompt(text=BIG_TEXT), choices=["a"]),
                                               timeout=60), "max_prompt_bytes=65536"),
    ("cache-prefix-prompt", lambda s: lambda: s.CachePrefix(pb.CachePrefixRequest(prompt=pb.Prompt(text=BIG_TEXT)),
                                                            timeout=60), "max_prompt_bytes=65536"),
    ("top-logprobs", lambda s: generate(s, logprobs=pb.LogprobOptions(return_logprob=True, top_logprobs_num=10_000)),
     "max_top_logprobs=20"),
    ("score-choices", lambda s: lambda: s.Score(pb.ScoreRequest(prompt=pb.Prompt(text="Q:"),
                                                                choices=[f" {i}" for i in range(2000)]), timeout=60),
     "max_choices=128"),
    ("score-choice-bytes", lambda s: lambda: s.Score(pb.ScoreRequest(prompt=pb.Prompt(text="Q:"),
                                                                     choices=[" a", "b" * 17_000]), timeout=60),
     "max_choice_bytes=16384"),
    ("stop-strings", lambda s: generate(s, sampling=pb.SamplingParams(stop=["s"] * 100)), "max_stop_strings=32"),
    ("stop-bytes", lambda s: generate(s, sampling=pb.SamplingParams(stop=["s" * 2000])), "max_stop_bytes=1024"),
    ("stop-token-ids", lambda s: generate(s, sampling=pb.SamplingParams(stop_token_ids=[1] * 300)),
     "max_stop_token_ids=256"),
    ("rid", lambda s: generate(s, rid="r" * 1000), "max_rid_bytes=256"),
]


@pytest.mark.parametrize("make, words", [(m, w) for _, m, w in GRPC_OVER_LIMIT], ids=[n for n, _, _ in GRPC_OVER_LIMIT])
def test_grpc_sizes_over_a_limit_are_resource_exhausted_naming_it(runtime, stub, greedy, make, words):
    """Each over-limit gRPC request ends with RESOURCE_EXHAUSTED naming the limit; nothing runs."""
    before = runtime.engine.stats().num_finished
    err = rpc_error(make(stub))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
    assert words in err.details(), err.details()
    assert runtime.engine.stats().num_finished == before
    assert greedy_grpc(stub) == greedy
    wait_idle(runtime, timeout=10)


def test_grpc_token_ids_past_the_context_are_refused_before_checking_each_id(runtime, stub, greedy):
    """A token-id prompt longer than the context is INVALID_ARGUMENT naming the context."""
    request = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=[1] * 60_000)))
    err = rpc_error(lambda: stub.Generate(request, timeout=60))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "context" in err.details()
    assert greedy_grpc(stub) == greedy


@pytest.mark.parametrize("method, data", [
    ("/sglc.runtime.Runtime/Generate", b"\x0a\x03\xff\xfe\xfd"),  # a prompt field with bad UTF-8
    ("/sglc.runtime.Runtime/Score", b"\xff\xff\xff\x01garbage"),
    ("/sglc.runtime.Runtime/CachePrefix", b"\x0a\xff\xff\xff\xff\x0f"),
])
def test_grpc_bytes_that_do_not_parse_are_invalid_argument(runtime, stub, greedy, method, data):
    """Raw bytes that are no valid message get INVALID_ARGUMENT naming the message, not INTERNAL."""
    channel = grpc.insecure_channel(grpc_address(runtime))
    try:
        if method.endswith("Generate"):
            err = rpc_error(lambda: list(channel.unary_stream(method)(data, timeout=30)))
        else:
            err = rpc_error(lambda: channel.unary_unary(method)(data, timeout=30))
    finally:
        channel.close()
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert "does not parse" in err.details()
    assert greedy_grpc(stub) == greedy


def test_http_and_grpc_greedy_answers_agree(base, stub, greedy):
    """The reference answer is the model's (both transports give the same text)."""
    assert greedy and greedy_grpc(stub) == greedy
    assert call(base, "GET", "/health")[0] == 200 and GREEDY_PROMPT
