"""Issue #12: constraint compilation cannot hurt the server (the real model and HTTP/gRPC server).

Each case the issue saw against the server is refused with a 4xx (INVALID_ARGUMENT) naming
the limit within seconds, and the server keeps serving; a pathological compile that runs
(limits raised, so only the time limit stops it) does not delay a plain request; identical
constraints arriving together compile once; a burst of distinct ones gets 429 beyond
max_pending and never blocks /health.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

from grpc_helpers import runtime_fixture

from sglc import fsm
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.constrained import ConstraintCompilerConfig
from sglc_runtime.engine import Engine
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.server.launch import Runtime, ServeConfig
from sglc.wire.fsm_message import fsm_to_pb

pytestmark = pytest.mark.model

#: A liveness bound, not a speed claim: every refusal below takes well under a second alone.
REFUSED_WITHIN_S = 10.0


runtime = runtime_fixture(4096, http_port=0)


def http_base(rt: Runtime) -> str:
    (http,) = [f for f in rt.frontends if f.kind == "http"]
    return f"http://{http.address}"


def post(base: str, path: str, body: dict, timeout: float = 120) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get_status(base: str, path: str) -> int:
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.status


def plain(base: str) -> tuple[int, dict]:
    return post(base, "/v1/completions", {"prompt": "One, two,", "max_tokens": 2, "temperature": 0})


def completion(regex: str) -> dict:
    return {"prompt": "Hi", "max_tokens": 1, "regex": regex}


HUGE_FSM = {"format": "sglc.fsm", "version": 1, "pattern": "x", "interval_starts": [0], "interval_classes": [0],
            "num_classes": 10**7, "num_states": 1000, "initial": 0, "finals": [0], "transitions": []}

ISSUE_CASES = {
    "exponential DFA": ("/v1/completions", completion("(a|b)*a(a|b){25}"), "max_dfa_states"),
    "repeat 100000": ("/v1/completions", completion(r"[\s\S]{0,100000}"), "max_nfa_states"),
    "repeat 1000": ("/v1/completions", completion(r"[\s\S]{0,1000}"), "max_index_cells"),
    "string maxLength 1000": ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
            "type": "string", "maxLength": 1000}}}}, "max_dfa_states"),
    "fsm num_classes 10**7": ("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 1, "fsm": HUGE_FSM}},
                              "max_dfa_cells"),
    "5000 nested groups": ("/v1/completions", completion("(" * 5000 + "a" + ")" * 5000), "max_nesting_depth"),
}


@pytest.mark.parametrize("case", list(ISSUE_CASES))
def test_issue_cases_are_refused_quickly_naming_the_limit(runtime, case):
    """Each pathological constraint of the issue: HTTP 400 naming CompileBudget.<limit> and how
    to raise it, within seconds; the server still answers a plain request."""
    base = http_base(runtime)
    path, body, limit = ISSUE_CASES[case]
    started = time.monotonic()
    status, answer = post(base, path, body)
    elapsed = time.monotonic() - started
    message = answer["error"]["message"]
    assert status == 400, answer
    assert f"CompileBudget.{limit} = " in message and f"--constraint-budget {limit}=N" in message, message
    assert elapsed < REFUSED_WITHIN_S
    assert plain(base)[0] == 200


def test_grpc_refuses_an_oversized_fsm_as_invalid_argument(runtime):
    """A gRPC FSM message claiming 10**7 classes: INVALID_ARGUMENT naming max_dfa_cells, at once."""
    channel = grpc.insecure_channel(runtime.frontends[0].address)
    try:
        stub = pb_grpc.RuntimeStub(channel)
        request = pb.GenerateRequest(prompt=pb.Prompt(text="Hi"),
                                     sampling=pb.SamplingParams(max_new_tokens=1, fsm=fsm_to_pb(HUGE_FSM)))
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Generate(request, timeout=REFUSED_WITHIN_S))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "CompileBudget.max_dfa_cells = " in info.value.details()
    finally:
        channel.close()


def test_identical_constraints_arriving_together_compile_once(runtime):
    """Twelve concurrent requests with one new constraint: one compile, twelve valid answers."""
    base = http_base(runtime)
    grammars = runtime.engine.grammars
    before = grammars.num_misses
    pattern = r"(yes|no|maybe) \d{2}"
    answers: list = [None] * 12

    def ask(i: int) -> None:
        answers[i] = post(base, "/v1/completions", {"prompt": "Answer:", "max_tokens": 8, "regex": pattern})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [status for status, _ in answers] == [200] * 12
    assert grammars.num_misses == before + 1


def test_a_burst_of_distinct_constraints_gets_429_past_max_pending_and_health_stays_up(runtime):
    """42 distinct constraints at once: each answer is 200 or 429 (never 500), and /health
    answers while they are in flight."""
    base = http_base(runtime)
    answers: list = [None] * 42

    def ask(i: int) -> None:
        answers[i] = post(base, "/v1/completions", {"prompt": "Code:", "max_tokens": 2,
                                                    "regex": f"[a-f]{{{i + 1}}}-(x|y){{0,{i % 5 + 1}}}"})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(42)]
    for t in threads:
        t.start()
    started = time.monotonic()
    assert get_status(base, "/health") == 200
    health_s = time.monotonic() - started
    for t in threads:
        t.join()
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 429} and 200 in statuses, statuses
    for status, answer in answers:
        if status == 429:
            assert "too many constraint compilations in flight" in answer["error"]["message"]
    assert health_s < REFUSED_WITHIN_S


def test_a_plain_request_completes_while_a_pathological_compile_runs(runtime):
    """With the structural limits raised, (a|b)*a(a|b){25} compiles until the time limit in its
    worker; meanwhile a plain request completes, /health answers, a second distinct constraint
    gets 429 / RESOURCE_EXHAUSTED (max_pending=1), and the compile ends in a 400 naming
    max_compile_seconds."""
    slow = ConstraintCompilerConfig(max_pending=1, budget=fsm.CompileBudget(
        max_dfa_states=10**8, max_dfa_cells=10**9, max_subset_states=10**10, max_compile_seconds=6.0))
    # NOTE: shares the module runtime's weights; that engine stays idle while this one runs.
    engine = Engine(EngineConfig(num_kv_slots=2048, constraint_compiler=slow), share_model_with=runtime.engine)
    rt = Runtime(ServeConfig(port=0, http_port=0), engine=engine)
    try:
        base = http_base(rt)
        assert plain(base)[0] == 200  # warm: the first request pays for nothing below
        outcome: dict = {}

        def pathological() -> None:
            started = time.monotonic()
            outcome["answer"] = post(base, "/v1/completions", completion("(a|b)*a(a|b){25}"))
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=pathological)
        thread.start()
        deadline = time.monotonic() + 30
        while engine.grammars.num_pending == 0 and thread.is_alive():
            assert time.monotonic() < deadline, "the compile never started"
            time.sleep(0.01)
        status, answer = plain(base)
        assert status == 200 and answer["choices"][0]["text"]
        assert get_status(base, "/health") == 200
        busy_status, busy = post(base, "/v1/completions", completion("[a-c]+x"))
        channel = grpc.insecure_channel(rt.frontends[0].address)
        try:
            request = pb.GenerateRequest(prompt=pb.Prompt(text="Hi"),
                                         sampling=pb.SamplingParams(max_new_tokens=1, regex="[d-f]+x"))
            with pytest.raises(grpc.RpcError) as info:
                list(pb_grpc.RuntimeStub(channel).Generate(request, timeout=REFUSED_WITHIN_S))
        finally:
            channel.close()
        assert thread.is_alive(), "the pathological compile ended before the plain request completed"
        assert busy_status == 429 and "ConstraintCompilerConfig.max_pending" in busy["error"]["message"]
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        thread.join(60)
        status, answer = outcome["answer"]
        assert status == 400 and "CompileBudget.max_compile_seconds = 6" in answer["error"]["message"]
        assert outcome["seconds"] < 6.0 + REFUSED_WITHIN_S
        assert plain(base)[0] == 200
    finally:
        rt.stop(1.0)
