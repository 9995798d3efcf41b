"""Faults and load on the runtime's gRPC service (real model).

1,000 concurrent Generate calls are all answered exactly once; bad requests get INVALID_ARGUMENT
and the server keeps serving; a cancelled stream aborts its engine request without disturbing
others; `sglc serve` exits 0 on SIGTERM; a SIGKILLed server makes SrtBackend fail fast, and the
same backend works again once a server is back on the same port.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from grpc_helpers import ServeProcess, runtime_fixture, stub  # noqa: F401 (fixtures)
from sglc.errors import BackendError
from sglc.executor.backends.srt import SrtBackend
from sglc.wire.backend import GenParams, Prompt
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.server.launch import Runtime, ServeConfig

pytestmark = pytest.mark.model


runtime = runtime_fixture(8192)


def metrics(stub) -> pb.MetricsResponse:
    return stub.Metrics(pb.MetricsRequest(), timeout=30)


def wait_until(predicate, timeout: float, what: str) -> None:
    """Poll until predicate() is true; fail (no hang) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def test_thousand_concurrent_generates_all_complete_once(stub):
    """1,000 Generate calls from 64 client threads each get exactly one complete message with their rid."""
    n = 1000
    topics = ["cats", "rain", "music", "trees", "boats", "stars", "bread", "snow"]

    def one(i: int) -> list[tuple[str, str]]:
        req = pb.GenerateRequest(rid=f"load-{i}", prompt=pb.Prompt(text=f"Write one word about {topics[i % 8]}:"),
                                 sampling=pb.SamplingParams(max_new_tokens=1 + i % 2, temperature=0.0))
        return [(r.rid, r.WhichOneof("response")) for r in stub.Generate(req, timeout=600)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=64) as pool:
        answers = [a for msgs in pool.map(one, range(n)) for a in msgs]
    elapsed = time.perf_counter() - t0
    print(f"\n1000 concurrent Generate calls (64 client threads, 1-2 tokens): {elapsed:.2f} s, "
          f"{n / elapsed:.0f} calls/s")
    completes = [rid for rid, kind in answers if kind == "complete"]
    assert len(answers) == n and len(completes) == n, [a for a in answers if a[1] != "complete"][:5]
    assert sorted(completes) == sorted(f"load-{i}" for i in range(n))
    m = metrics(stub)
    assert m.num_active == 0 and m.num_running == 0 and m.num_waiting == 0


BAD_REQUESTS = [
    ("negative max_new_tokens", dict(text="hi", sampling=dict(max_new_tokens=-1)), "max_new_tokens"),
    ("prompt over the context", dict(text="hello " * 9000, sampling=dict(max_new_tokens=4)), "context"),
    ("empty stop string", dict(text="hi", sampling=dict(stop=[""])), "stop"),
    ("negative temperature", dict(text="hi", sampling=dict(temperature=-0.5)), "temperature"),
    ("top_p of zero", dict(text="hi", sampling=dict(top_p=0.0)), "top_p"),
    ("stop token outside the vocabulary", dict(text="hi", sampling=dict(stop_token_ids=[10**6])), "stop_token_ids"),
    ("prompt token outside the vocabulary", dict(ids=[5, 10**6], sampling={}), "vocabulary"),
    ("empty prompt", dict(text="", sampling={}), "empty"),
    ("no prompt at all", dict(sampling={}), "text or token_ids"),
    ("invalid regex", dict(text="hi", sampling=dict(regex="(ab")), "regex"),
    ("malformed fsm", dict(text="hi", sampling=dict(fsm=dict(version=1, pattern="x", num_states=0))), "fsm"),
    ("fsm of a newer layout", dict(text="hi", sampling=dict(fsm=dict(version=99))), "fsm"),
    ("image on a text-only model", dict(text="look", images=["a.png"], sampling={}), "text-only"),
]


@pytest.mark.parametrize("what,spec,word", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_request_gets_invalid_argument_and_the_server_keeps_serving(stub, what, spec, word):
    """Each bad request ends with INVALID_ARGUMENT and a one-line message naming the problem;
    the next good request is answered."""
    prompt = pb.Prompt(images=spec.get("images", []))
    if "text" in spec:
        prompt.text = spec["text"]
    if "ids" in spec:
        prompt.token_ids.ids.extend(spec["ids"])
    req = pb.GenerateRequest(prompt=prompt, sampling=pb.SamplingParams(**spec["sampling"]))
    before = metrics(stub).num_invalid
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(req, timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (what, err.value.details())
    details = err.value.details()
    assert word in details and "\n" not in details, details
    assert metrics(stub).num_invalid == before + 1
    ok = list(stub.Generate(pb.GenerateRequest(prompt=pb.Prompt(text="Say hi."),
                                               sampling=pb.SamplingParams(max_new_tokens=2)), timeout=60))
    assert ok[-1].WhichOneof("response") == "complete"


def test_cancelled_stream_aborts_its_request_and_others_finish(stub, runtime):
    """Cancelling a Generate stream mid-way aborts the engine request (num_cancelled grows, nothing
    stays running) while a concurrent request completes with the same greedy tokens as alone."""
    prompt = "<|im_start|>user\nName three colors.<|im_end|>\n<|im_start|>assistant\n"
    alone = runtime.engine.generate(prompt, {"temperature": 0.0, "max_new_tokens": 12})[0].token_ids
    before = metrics(stub).num_cancelled
    long = stub.Generate(pb.GenerateRequest(
        prompt=pb.Prompt(text="Write a very long essay about the sea."), stream=True,
        sampling=pb.SamplingParams(max_new_tokens=1500, ignore_eos=True, temperature=0.0)), timeout=600)
    seen = [next(long), next(long)]
    assert all(r.WhichOneof("response") == "chunk" for r in seen)
    other: list = []
    t = threading.Thread(target=lambda: other.extend(stub.Generate(pb.GenerateRequest(
        prompt=pb.Prompt(text=prompt), sampling=pb.SamplingParams(max_new_tokens=12, temperature=0.0)), timeout=300)))
    t.start()
    long.cancel()
    wait_until(lambda: metrics(stub).num_cancelled == before + 1, 60, "the cancelled request to be aborted")
    t.join(300)
    assert other and list(other[-1].complete.output_ids) == alone
    wait_until(lambda: metrics(stub).num_running == 0, 60, "no running request")
    assert metrics(stub).num_active == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_subprocess_answers_and_exits_zero_on_a_stop_signal(sig):
    """`sglc serve --port 0` prints its listening line, answers, and on SIGTERM/SIGINT exits 0 without a traceback."""
    with ServeProcess() as server:
        backend = SrtBackend(server.address, timeout=120)
        result = backend.generate(Prompt("The capital of France is"), GenParams(max_new_tokens=4, temperature=0))
        assert result.meta.completion_tokens == 4 and result.text
        assert backend.model_info().model == "SmolLM2-135M-Instruct"
        backend.close()
        server.send(sig)
        code, err = server.wait(120)
    assert code == 0, err
    assert "Traceback" not in err, err
    assert "shutting down" in err


def test_sigkill_mid_call_raises_backend_error_and_a_restart_serves_the_same_backend():
    """A server SIGKILLed during a long Generate makes that call raise BackendError (UNAVAILABLE, not a
    deadline); after a new server starts on the same port the same SrtBackend works again."""
    server = ServeProcess().start()
    port = server.port
    backend = SrtBackend(server.address, timeout=300)
    try:
        outcome: list = []

        def long_call() -> None:
            try:
                backend.generate(Prompt("Write a very long essay about the sea."),
                                 GenParams(max_new_tokens=3000, ignore_eos=True))
                outcome.append("finished")
            except BackendError as err:
                outcome.append(err)

        t = threading.Thread(target=long_call)
        t.start()
        wait_until(lambda: backend.metrics()["num_running"] == 1, 120, "the long call to run")
        server.kill()
        t.join(60)
        assert not t.is_alive(), "the call hung after the server died"
        assert len(outcome) == 1 and isinstance(outcome[0], BackendError), outcome
        message = str(outcome[0])
        assert "UNAVAILABLE" in message and server.address in message and "Generate" in message
        assert "\n" not in message
        with pytest.raises(BackendError):  # nobody listens now: fails fast, no hang
            backend.model_info()

        server = ServeProcess(port=port).start()
        assert server.port == port
        again = backend.generate(Prompt("The capital of France is"), GenParams(max_new_tokens=3, temperature=0))
        assert again.meta.completion_tokens == 3
        assert json.dumps(backend.metrics())  # plain data
    finally:
        backend.close()
        server.kill()


def test_stop_lets_short_calls_finish_and_aborts_long_ones_with_unavailable(runtime):
    """Runtime.stop(grace): a short call in flight completes, a long one ends with a GenerateError
    UNAVAILABLE, new calls are refused with UNAVAILABLE, and the engine thread stops."""
    from sglc_runtime.engine import Engine

    rt = Runtime(ServeConfig(port=0), engine=Engine(share_model_with=runtime.engine, num_kv_slots=2048))
    channel = grpc.insecure_channel(rt.frontends[0].address)
    stub = pb_grpc.RuntimeStub(channel)
    long = stub.Generate(pb.GenerateRequest(prompt=pb.Prompt(text="Write a long story."), stream=True,
                                            sampling=pb.SamplingParams(max_new_tokens=1500, ignore_eos=True)),
                         timeout=600)
    first = next(long)
    assert first.WhichOneof("response") == "chunk"
    results: dict = {}
    t_short = threading.Thread(target=lambda: results.setdefault("short", list(stub.Generate(pb.GenerateRequest(
        prompt=pb.Prompt(text="Say yes."), sampling=pb.SamplingParams(max_new_tokens=3, ignore_eos=True)),
        timeout=600))))
    t_short.start()
    wait_until(lambda: rt.service.num_active == 2, 60, "both calls to be in flight")
    stopper = threading.Thread(target=rt.stop, args=(8.0,))
    stopper.start()
    wait_until(lambda: rt.service._draining, 10, "the server to drain")
    with pytest.raises(grpc.RpcError) as refused:
        list(stub.Generate(pb.GenerateRequest(prompt=pb.Prompt(text="hi")), timeout=30))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in refused.value.details()
    rest = list(long)
    stopper.join(120)
    t_short.join(60)
    assert not stopper.is_alive() and not rt.service.engine_running
    assert results["short"][-1].WhichOneof("response") == "complete"
    assert rest and rest[-1].WhichOneof("response") == "error"
    assert rest[-1].error.code == pb.GenerateError.UNAVAILABLE and "shut down" in rest[-1].error.message
    channel.close()
