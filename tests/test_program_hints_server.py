"""Program hints (issue 28) from every server entry point to the engine, on the real default model
served in-process (gRPC and HTTP on 127.0.0.1:0, one runtime for the module).

A hint never changes what a call returns; a bad hint is refused naming the field (gRPC
INVALID_ARGUMENT, HTTP 400) and the server keeps serving; a lease over max_hint_lease_ms reaches the
engine capped; EndProgram / POST /end_program answer the tokens released. Which hint the engine
got is read by a spy on ``Engine.submit`` (the engine keeps no record of a finished request's hint).
"""
from __future__ import annotations

import grpc
import pytest

from grpc_helpers import runtime_fixture, stub  # noqa: F401 (fixtures)
from server_helpers import http_base, post_json, rpc_error
from sglc.wire.backend import GenParams, Prompt
from sglc.wire.program_hint import NEVER, ProgramHint
from sglc.wire.proto import runtime_pb2 as pb
from sglc_runtime.server.limits import ServerLimits

pytestmark = pytest.mark.model

CAP = 5_000
PROMPT = "The capital of France is"
GREEDY = {"max_new_tokens": 6, "temperature": 0.0}
HINT = ProgramHint("prog-1", next_use=0, lease_ms=1_000)

runtime = runtime_fixture(4096, http_port=0, limits=ServerLimits(max_hint_lease_ms=CAP))

#: Hints that ProgramHint refuses, with a word the refusal names.
BAD_HINTS = [
    ({"program_id": ""}, "program_id"),
    ({"program_id": "p", "next_use": -5}, "next_use"),
    ({"program_id": "p" * 200}, "program_id"),
    ({"program_id": "a b/c"}, "program_id"),
]


@pytest.fixture
def seen(runtime, monkeypatch) -> list:
    """The ``hint`` of every Engine.submit from now on (the test's calls only)."""
    hints: list = []
    real = runtime.engine.submit

    def submit(*args, **kwargs):
        hints.append(kwargs.get("hint"))
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime.engine, "submit", submit)
    return hints


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


def pb_hint(hint: ProgramHint | dict) -> pb.ProgramHint:
    msg = pb.ProgramHint()
    if isinstance(hint, ProgramHint):
        hint.to_pb(msg)
    else:
        msg.program_id = hint["program_id"]
        msg.next_use, msg.lease_ms = hint.get("next_use", 0), hint.get("lease_ms", 0)
    return msg


def grpc_generate(stub, hint: pb.ProgramHint | None = None, text: str = PROMPT) -> pb.GenerateComplete:
    req = pb.GenerateRequest(prompt=pb.Prompt(text=text), sampling=pb.SamplingParams(**GREEDY))
    if hint is not None:
        req.hint.CopyFrom(hint)
    responses = list(stub.Generate(req, timeout=120))
    assert responses[-1].WhichOneof("response") == "complete", responses[-1]
    return responses[-1].complete


def grpc_score(stub, hint: pb.ProgramHint | None = None) -> pb.ScoreResponse:
    req = pb.ScoreRequest(prompt=pb.Prompt(text=PROMPT), choices=[" Paris", " London"])
    if hint is not None:
        req.hint.CopyFrom(hint)
    return stub.Score(req, timeout=120)


def grpc_cache_prefix(stub, text: str, hint: pb.ProgramHint | None = None) -> pb.CachePrefixResponse:
    req = pb.CachePrefixRequest(prompt=pb.Prompt(text=text))
    if hint is not None:
        req.hint.CopyFrom(hint)
    return stub.CachePrefix(req, timeout=120)


# --- gRPC ---
def test_hinted_grpc_calls_answer_as_the_unhinted_ones(stub, seen):
    """Generate, Score and CachePrefix with a hint give the unhinted answer (greedy), and the engine
    gets the hint: the prompt's with the same fields, a Score's choices with next use "never"."""
    plain = grpc_generate(stub)
    hinted = grpc_generate(stub, pb_hint(HINT))
    assert list(hinted.output_ids) == list(plain.output_ids) and hinted.text == plain.text
    assert seen == [None, HINT]

    seen.clear()
    plain_score, hinted_score = grpc_score(stub), grpc_score(stub, pb_hint(HINT))
    for p, h in zip(plain_score.choices, hinted_score.choices, strict=True):
        assert list(h.token_ids) == list(p.token_ids)
        assert list(h.token_logprobs) == pytest.approx(list(p.token_logprobs), abs=1e-4)
    hinted_submits = [h for h in seen if h is not None]
    assert HINT in hinted_submits, seen
    assert {h.program_id for h in hinted_submits} == {"prog-1"}
    assert ProgramHint("prog-1", NEVER, HINT.lease_ms) in hinted_submits  # a choice's prefill

    seen.clear()
    text = "Cache this prefix for the program, please. " * 3
    first = grpc_cache_prefix(stub, text, pb_hint(HINT))
    again = grpc_cache_prefix(stub, text)
    assert first.prompt_tokens == again.prompt_tokens > 0
    assert again.cached_tokens >= first.prompt_tokens - 1, "the hinted prefix is in the cache"
    assert seen == [HINT, None]


def test_a_lease_over_the_cap_reaches_the_engine_capped(stub, seen):
    """A lease above max_hint_lease_ms is not refused: the engine gets the hint with the cap as its
    lease (Generate, Score, CachePrefix); a lease of 0 (the engine's default) stays 0."""
    long = {"program_id": "prog-cap", "next_use": 2, "lease_ms": 3_600_000}
    grpc_generate(stub, pb_hint(long))
    grpc_score(stub, pb_hint(long))
    grpc_cache_prefix(stub, "A capped prefix.", pb_hint(long))
    grpc_generate(stub, pb_hint({"program_id": "prog-cap", "next_use": 1}))
    assert seen and all(h is not None and h.program_id == "prog-cap" for h in seen), seen
    assert {h.lease_ms for h in seen[:-1]} == {CAP}
    assert seen[-1] == ProgramHint("prog-cap", 1, 0)


def test_end_program_releases_what_the_hinted_call_left(stub):
    """After a hinted Generate the engine holds the call's text for the program (hinted_tokens);
    EndProgram releases it (a count > 0), and answers 0 for a program it holds nothing for."""
    # NOTE: a text no other test's program holds; lease 0: the engine's default
    grpc_generate(stub, pb_hint(ProgramHint("prog-end", 0)), text="Only the EndProgram test asks this.")
    assert stub.Metrics(pb.MetricsRequest(), timeout=30).hinted_tokens > 0
    released = stub.EndProgram(pb.EndProgramRequest(program_id="prog-end"), timeout=30).released_tokens
    assert released > 0
    assert stub.EndProgram(pb.EndProgramRequest(program_id="prog-end"), timeout=30).released_tokens == 0
    assert stub.EndProgram(pb.EndProgramRequest(program_id="never-seen"), timeout=30).released_tokens == 0


@pytest.mark.parametrize("hint, word", BAD_HINTS, ids=["empty-id", "next-use", "long-id", "bad-chars"])
def test_a_bad_grpc_hint_is_invalid_argument_and_the_server_keeps_serving(stub, runtime, hint, word):
    """Each call refuses an invalid hint with INVALID_ARGUMENT naming the field (no engine work), as
    EndProgram refuses an invalid id; then a plain Generate still answers."""
    before = runtime.service.metrics()["num_requests"]
    calls = {"Generate": lambda: grpc_generate(stub, pb_hint(hint)),
             "Score": lambda: grpc_score(stub, pb_hint(hint)),
             "CachePrefix": lambda: grpc_cache_prefix(stub, "x", pb_hint(hint)),
             "EndProgram": lambda: stub.EndProgram(pb.EndProgramRequest(program_id=hint["program_id"]), timeout=30)}
    for name, fn in calls.items():
        if name == "EndProgram" and word != "program_id":
            continue
        err = rpc_error(fn)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, err.code(), err.details())
        assert word in err.details(), (name, err.details())
    assert runtime.service.metrics()["num_requests"] == before
    assert grpc_generate(stub).completion_tokens == GREEDY["max_new_tokens"]


def test_metrics_carry_the_hint_counters(stub, base):
    """Metrics has the hint counters (0 until the engine counts them), over gRPC and Prometheus."""
    metrics = stub.Metrics(pb.MetricsRequest(), timeout=30)
    for name in ("hinted_tokens", "hint_evictions"):
        assert getattr(metrics, name) >= 0
    from server_helpers import call

    status, text = call(base, "GET", "/metrics")
    assert status == 200 and b"sglc_hinted_tokens " in text and b"sglc_hint_evictions " in text


# --- HTTP ---
def http_generate(base: str, **fields) -> tuple[int, object]:
    return post_json(base, "/generate", {"text": PROMPT, "sampling_params": GREEDY, **fields})


def test_http_generate_takes_a_program_hint(base, seen):
    """/generate with ``program_hint`` answers as without it; the engine gets the hint (lease capped);
    a batch takes one hint for all prompts or one (or null) per prompt."""
    status, plain = http_generate(base)
    assert status == 200, plain
    status, hinted = http_generate(base, program_hint={"program_id": "prog-http", "next_use": 3, "lease_ms": 10**6})
    assert status == 200 and hinted["text"] == plain["text"] and hinted["output_ids"] == plain["output_ids"]
    assert seen == [None, ProgramHint("prog-http", 3, CAP)]

    seen.clear()
    status, out = post_json(base, "/generate", {"text": [PROMPT, PROMPT], "sampling_params": GREEDY,
                                                "program_hint": {"program_id": "prog-b"}})
    assert status == 200 and [o["text"] for o in out] == [plain["text"]] * 2
    assert seen == [ProgramHint("prog-b")] * 2
    seen.clear()
    status, out = post_json(base, "/generate", {"text": [PROMPT, PROMPT], "sampling_params": GREEDY,
                                                "program_hint": [{"program_id": "prog-b", "next_use": -1}, None]})
    assert status == 200, out
    assert seen == [ProgramHint("prog-b", NEVER), None]


@pytest.mark.parametrize("hint", [h for h, _ in BAD_HINTS] + [
    {"program_id": "p", "priority": 1}, {"next_use": 0}, "prog-1", {"program_id": "p", "next_use": "1"},
    {"program_id": "p", "lease_ms": -1}, [{"program_id": "p"}]],
    ids=["empty-id", "next-use", "long-id", "bad-chars", "unknown-field", "no-id", "not-an-object", "string-next-use",
         "negative-lease", "list-for-one-prompt"])
def test_a_bad_http_program_hint_is_a_400_naming_it(base, runtime, hint):
    """An invalid ``program_hint`` is a 400 whose param is ``program_hint``; nothing reached the
    engine and the server keeps serving."""
    before = runtime.service.metrics()["num_requests"]
    status, out = http_generate(base, program_hint=hint)
    assert status == 400 and out["error"]["param"] == "program_hint", out
    assert "program_hint" in out["error"]["message"]
    assert runtime.service.metrics()["num_requests"] == before
    assert http_generate(base)[0] == 200


def test_a_hint_in_the_request_id_reaches_the_engine(base, seen):
    """Behind sglang-router a hint rides in ``rid`` (ProgramHint.to_rid): the engine gets it, the
    answer is the unhinted one and carries the rid; other rids carry none; an explicit
    ``program_hint`` wins over the rid's."""
    status, plain = http_generate(base)
    hint = ProgramHint("prog-rid:1", next_use=2, lease_ms=10**6)
    status, out = http_generate(base, rid=hint.to_rid("n1"))
    assert status == 200 and out["text"] == plain["text"] and out["meta_info"]["id"] == hint.to_rid("n1")
    status, _ = http_generate(base, rid="plain-request-id")
    assert status == 200
    status, _ = http_generate(base, rid=hint.to_rid("n2"), program_hint={"program_id": "explicit"})
    assert status == 200
    status, _ = post_json(base, "/generate", {"text": [PROMPT, PROMPT], "sampling_params": GREEDY,
                                              "rid": [hint.to_rid("n3"), "other"]})
    assert status == 200
    assert seen == [None, ProgramHint("prog-rid:1", 2, CAP), None, ProgramHint("explicit"),
                    ProgramHint("prog-rid:1", 2, CAP), None]


@pytest.mark.parametrize("rid", ["sglc-ph/x/0/n/p", "sglc-ph/0/0/n", "sglc-ph/0/0/n/a b", "sglc-ph/-7/0/n/p",
                                 "sglc-ph/0/0/n-n/p"])
def test_a_malformed_hint_rid_is_a_400_naming_rid(base, runtime, rid):
    before = runtime.service.metrics()["num_requests"]
    status, out = http_generate(base, rid=rid)
    assert status == 400 and out["error"]["param"] == "rid", out
    assert runtime.service.metrics()["num_requests"] == before
    assert http_generate(base)[0] == 200


def test_a_batch_hint_list_of_the_wrong_length_names_the_item(base):
    """A hint list must have one item per prompt; a bad item is named by its index."""
    status, out = post_json(base, "/generate", {"text": [PROMPT, PROMPT], "program_hint": [{"program_id": "p"}]})
    assert status == 400 and out["error"]["param"] == "program_hint"
    status, out = post_json(base, "/generate", {"text": [PROMPT, PROMPT],
                                                "program_hint": [{"program_id": "p"}, {"program_id": ""}]})
    assert status == 400 and out["error"]["param"] == "program_hint[1]", out


def test_http_end_program(base):
    """POST /end_program ``{"program_id"}`` answers ``{"released_tokens": N}`` (what the hinted
    /generate left held); a bad id, a missing
    one or another field is a 400 naming it; GET is 405."""
    body = {"text": "Only the /end_program test asks this.", "sampling_params": GREEDY,
            "program_hint": {"program_id": "prog-http-end"}}
    status, _ = post_json(base, "/generate", body)
    assert status == 200
    status, out = post_json(base, "/end_program", {"program_id": "prog-http-end"})
    assert status == 200 and set(out) == {"released_tokens"} and out["released_tokens"] > 0
    for body, param in [({"program_id": ""}, "program_id"), ({"program_id": "x" * 200}, "program_id"),
                        ({"program_id": 7}, "program_id"), ({}, "program_id"),
                        ({"program_id": "p", "all": True}, "all")]:
        status, out = post_json(base, "/end_program", body)
        assert status == 400 and out["error"]["param"] == param, (body, out)
    from server_helpers import call

    assert call(base, "GET", "/end_program")[0] == 405
    assert call(base, "POST", "/end_program", b"[1]", {"Content-Type": "application/json"})[0] == 400


def test_the_openai_endpoints_do_not_take_a_program_hint(base):
    """``program_hint`` is SGLang-wire /generate's extension only: /v1/completions refuses it as an
    unknown field (400 naming it), as before."""
    status, out = post_json(base, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1,
                                                      "program_hint": {"program_id": "p"}})
    assert status == 400 and out["error"]["param"] == "program_hint", out


# --- the embedded backend ---
def test_the_embedded_backend_passes_prompt_hints_on(runtime, seen):
    """EngineBackend gives each call's ``prompt.hint`` to the engine (lease capped to the default
    limit), answers as without it, and end_program releases what the program's calls left held."""
    from sglc_runtime.server.engine_backend import EngineBackend

    backend = EngineBackend(runtime.engine)  # NOTE: shares the running engine; close() leaves it
    try:
        params = GenParams(max_new_tokens=GREEDY["max_new_tokens"], temperature=0.0)
        plain = backend.generate(Prompt(PROMPT), params)
        hint = ProgramHint("prog-emb", 1, 10**7)
        capped = ProgramHint("prog-emb", 1, ServerLimits().max_hint_lease_ms)
        assert backend.generate(Prompt(PROMPT, hint=hint), params).text == plain.text
        streamed: list[str] = []
        assert backend.generate_stream(Prompt(PROMPT, hint=hint), params,
                                       lambda text, meta: streamed.append(text)).text == plain.text
        assert "".join(streamed) == plain.text
        assert seen == [None, capped, capped]

        seen.clear()
        backend.score(Prompt(PROMPT, hint=hint), [" Paris", " London"])
        assert capped in seen
        seen.clear()
        backend.cache_prefix(Prompt("A prefix only the embedded backend's test caches.", hint=hint))
        assert seen == [capped]
        assert backend.end_program("prog-emb") > 0
    finally:
        backend.close()


# --- precompute: a continuation on the wire (runtime/engine/precompute.py) ---
def _precomputed(runtime, before: int) -> None:
    """Wait until the engine has run the precompute queued after ``before`` (it holds one about a
    step while idle)."""
    import time

    engine = runtime.engine
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats.precomputes > before and not engine.precomputes.num_held and not (stats.num_waiting or stats.num_running):
            return
        time.sleep(0.01)
    raise AssertionError("the precompute did not run")


def test_a_continuation_over_grpc_has_the_next_prompt_cached(stub, runtime):
    """A Generate whose hint carries a continuation: the engine prefills prompt + output + it, so the
    program's next Generate finds all but its last token cached, and answers as without it."""
    then = "\nIn one word, the answer is:"
    before = runtime.engine.stats().precomputes
    first = grpc_generate(stub, pb_hint(ProgramHint("prog-cont", 0, continuation=then)))
    _precomputed(runtime, before)
    text = PROMPT + first.text + then
    hinted = grpc_generate(stub, pb_hint(ProgramHint("prog-cont", NEVER)), text=text)
    assert hinted.cached_tokens == hinted.prompt_tokens - 1
    stub.EndProgram(pb.EndProgramRequest(program_id="prog-cont"), timeout=30)
    assert runtime.engine.flush_cache()
    plain = grpc_generate(stub, text=text)
    assert list(plain.output_ids) == list(hinted.output_ids)


def test_a_continuation_over_http_has_the_next_prompt_cached(base, runtime):
    then = "\nSo, briefly:"
    before = runtime.engine.stats().precomputes
    status, first = http_generate(base, program_hint={"program_id": "prog-cont-http", "continuation": then})
    assert status == 200, first
    _precomputed(runtime, before)
    status, out = post_json(base, "/generate", {"text": PROMPT + first["text"] + then, "sampling_params": GREEDY,
                                                "program_hint": {"program_id": "prog-cont-http", "next_use": -1}})
    assert status == 200 and out["meta_info"]["cached_tokens"] == out["meta_info"]["prompt_tokens"] - 1, out
    status, _ = post_json(base, "/end_program", {"program_id": "prog-cont-http"})
    assert status == 200


def test_a_continuation_in_the_request_id_has_the_next_prompt_cached(base, runtime):
    """Behind sglang-router the hint rides in ``rid`` with its continuation (here ~3,000 characters,
    past the 256-byte request-id limit that the id less its continuation still meets): the worker
    precomputes as for ``program_hint``; a continuation over its limit in the rid is a 400."""
    then = "\nGiven that, and also " + "the river / the sea, " * 140 + "answer:"
    hint = ProgramHint("prog-cont-rid", 0, continuation=then)
    before = runtime.engine.stats().precomputes
    status, first = http_generate(base, rid=hint.to_rid("n1"))
    assert status == 200 and first["meta_info"]["id"] == hint.to_rid("n1"), first
    _precomputed(runtime, before)
    status, out = post_json(base, "/generate", {"text": PROMPT + first["text"] + then, "sampling_params": GREEDY,
                                                "rid": ProgramHint("prog-cont-rid", NEVER).to_rid("n2")})
    assert status == 200 and out["meta_info"]["cached_tokens"] == out["meta_info"]["prompt_tokens"] - 1, out
    assert post_json(base, "/end_program", {"program_id": "prog-cont-rid"})[0] == 200
    status, out = http_generate(base, rid="sglc-ph/0/0/n3/prog-cont-rid/" + "x" * 4097)
    assert status == 400 and out["error"]["param"] == "rid" and "continuation" in out["error"]["message"], out
    status, out = http_generate(base, rid="plain-" + "x" * 300)
    assert status == 400 and "request id" in out["error"]["message"], out


def test_a_continuation_over_the_limit_is_refused_naming_it(stub, base):
    long = "x" * 5000
    with pytest.raises(grpc.RpcError) as err:
        grpc_generate(stub, _long_hint(long))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "continuation" in err.value.details()
    status, body = http_generate(base, program_hint={"program_id": "prog-long", "continuation": long})
    assert status == 400 and "continuation" in str(body)


def _long_hint(text: str) -> pb.ProgramHint:
    msg = pb.ProgramHint(program_id="prog-long")
    msg.continuation = text
    return msg
