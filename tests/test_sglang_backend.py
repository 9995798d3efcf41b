"""SGLangBackend (the executor's HTTP backend, SGLang's /generate wire format) against ONE real
runtime serving HTTP in-process, compared call by call with SrtBackend (gRPC) on the same runtime;
plus its errors with no server at all."""
from __future__ import annotations

import json
import re
import socket

import pytest

from grpc_helpers import runtime_fixture

from sglc.errors import BackendError
from sglc.wire.backend import GenParams, Prompt
from sglc.backends import make_backend
from sglc.executor.backends.sglang_http import SGLangBackend
from sglc.executor.backends.srt import SrtBackend

pytestmark = pytest.mark.model

PROMPT = "The capital of France is Paris. The capital of Italy is"


runtime = runtime_fixture(4096, http_port=0)


@pytest.fixture(scope="module")
def http(runtime):
    b = SGLangBackend(f"http://{runtime.frontends[1].address}", timeout=120)
    yield b
    b.close()


@pytest.fixture(scope="module")
def grpc(runtime):
    b = SrtBackend(runtime.frontends[0].address, timeout=120)
    yield b
    b.close()


def test_greedy_gen_and_its_stream_equal_the_grpc_backend(http, grpc):
    """Greedy text over HTTP equals gRPC's; the streamed pieces join to the same text; meta is filled."""
    params = GenParams(max_new_tokens=8, temperature=0, stop=["\n"])
    ours = grpc.generate(Prompt(PROMPT), params)
    result = http.generate(Prompt(PROMPT), params)
    assert result.text == ours.text and result.text.strip()
    assert result.meta.prompt_tokens == ours.meta.prompt_tokens and result.meta.completion_tokens > 0
    pieces: list[str] = []
    streamed = http.generate_stream(Prompt(PROMPT), params, pieces.append)
    assert "".join(pieces) == streamed.text == ours.text


def test_select_scores_equal_the_grpc_backend(http, grpc):
    """Each choice's token logprobs over HTTP (prefix + per-choice logprob requests) equal the gRPC
    Score's, including a choice whose first characters merge with the prompt's last token."""
    prompt = Prompt("Is Paris the capital of France? ")
    choices = ["yes", "no", " maybe not"]
    theirs = http.score(prompt, choices)
    ours = grpc.score(prompt, choices)
    for a, b in zip(theirs.choices, ours.choices):
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-3)
    with pytest.raises(BackendError, match="unconditional"):
        http.score(prompt, choices, unconditional=True)


def test_constraints_regex_json_and_lowered_fsm(http):
    """regex and json_schema go as SGLang's sampling params; a compiled FSM goes as our extension to
    an sglc server (detected from /get_server_info) and is obeyed."""
    from sglc import fsm as fsm_lib

    assert http.is_sglc
    out = http.generate(Prompt("A code: "), GenParams(max_new_tokens=8, temperature=0, regex=r"[0-9]{3}"))
    assert re.fullmatch(r"[0-9]{3}", out.text)
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    out = http.generate(Prompt("JSON: "), GenParams(max_new_tokens=16, temperature=0, json_schema=json.dumps(schema)))
    assert isinstance(json.loads(out.text)["age"], int)
    compiled = fsm_lib.fsm_to_dict(fsm_lib.compile_regex(r"(cat|dog)s?"))
    assert http.sampling_params(GenParams(fsm=compiled))["fsm"] == compiled
    out = http.generate(Prompt("A pet: "), GenParams(max_new_tokens=4, temperature=0, fsm=compiled))
    assert re.fullmatch(r"(cat|dog)s?", out.text)


def test_cache_prefix_is_a_zero_token_request_that_later_calls_hit(http):
    """A fork hint prefills the prompt (max_new_tokens 0); the next call on it reports cached tokens."""
    prompt = Prompt("A long shared context about rivers. " * 8)
    first = http.cache_prefix(prompt)
    assert first.prompt_tokens > 40 and first.completion_tokens == 0
    again = http.generate(Prompt(prompt.text + "Name one:"), GenParams(max_new_tokens=2, temperature=0))
    assert again.meta.cached_tokens >= first.prompt_tokens - 1


def test_no_server_is_a_backend_error_naming_the_endpoint():
    """Nothing listening: a BackendError naming the URL and the path, not a raw socket error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = make_backend("sglang", f"127.0.0.1:{port}")
    with pytest.raises(BackendError, match=rf"http://127\.0\.0\.1:{port}: /generate failed: no answer"):
        backend.generate(Prompt("hi"), GenParams(max_new_tokens=1))
    with pytest.raises(ValueError, match="needs --endpoint"):
        make_backend("sglang", None)
