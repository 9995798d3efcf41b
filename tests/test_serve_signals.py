"""`sglc serve` stops on a signal even with a long prefill in flight (issue 30): the first
SIGTERM exits 0 once the grace period is over, cutting the prefill at its next chunk boundary;
a second signal exits at once (status 128 + signal) whatever is still running.

Each test starts a real `sglc serve` subprocess; the waits only catch hangs (no timing asserts).
"""
from __future__ import annotations

import random
import signal
import threading
import time

import grpc
import pytest

from grpc_helpers import ServeProcess
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

pytestmark = pytest.mark.model

#: Tokens of the prompt in flight: far more than one step's chunk, so the prefill is still
#: running when the signal comes however fast the CPU (it is never finished: the stop cuts it).
PROMPT_TOKENS = 7000
GRACE_S = 0.5
#: Seconds past which a test fails as hung.
HANG_S = 120


def _wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _start_long_generate(stub) -> tuple[threading.Thread, list]:
    """A streamed Generate of a PROMPT_TOKENS prompt in a thread; returns (thread, responses or error)."""
    rng = random.Random(0)
    ids = [rng.randrange(100, 40000) for _ in range(PROMPT_TOKENS)]
    request = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=ids)), stream=True,
                                 sampling=pb.SamplingParams(max_new_tokens=1000, ignore_eos=True))
    got: list = []

    def call() -> None:
        try:
            got.extend(stub.Generate(request, timeout=HANG_S * 3))
        except grpc.RpcError as err:
            got.append(err)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    return t, got


def _prefilling(stub) -> bool:
    m = stub.Metrics(pb.MetricsRequest(), timeout=30)
    return m.computed_prefill_tokens > 0 and m.completion_tokens == 0


def test_sigterm_during_a_long_prefill_exits_zero_after_the_grace_period():
    """SIGTERM while a 7,000-token prompt is being prefilled: after the grace period the request
    is aborted at a chunk boundary (its client gets an error and never a token) and the server
    exits 0 without a traceback."""
    with ServeProcess("--kv-slots", "8192", "--device", "cpu", "--grace", str(GRACE_S)) as server:
        channel = grpc.insecure_channel(server.address)
        stub = pb_grpc.RuntimeStub(channel)
        caller, got = _start_long_generate(stub)
        _wait_until(lambda: _prefilling(stub), "the long prefill to start")
        server.send(signal.SIGTERM)
        code, err = server.wait(HANG_S)
        caller.join(HANG_S)
        channel.close()
    assert code == 0, err
    assert "Traceback" not in err and "shutting down" in err, err
    assert got and not any(isinstance(r, pb.GenerateResponse) and r.WhichOneof("response") == "chunk"
                           and r.chunk.token_ids for r in got), "the prefill ran to its end before the stop"
    last = got[-1]
    assert (isinstance(last, grpc.RpcError) or last.WhichOneof("response") == "error"), last


def test_a_second_signal_exits_at_once_during_the_grace_period():
    """With a 120 s grace and a long prefill running, the server is still draining after the first
    SIGTERM; a second signal (SIGINT) ends it at once with status 128 + SIGINT and a log line."""
    with ServeProcess("--kv-slots", "8192", "--device", "cpu", "--grace", "120") as server:
        channel = grpc.insecure_channel(server.address)
        stub = pb_grpc.RuntimeStub(channel)
        _start_long_generate(stub)
        _wait_until(lambda: _prefilling(stub), "the long prefill to start")
        server.send(signal.SIGTERM)
        _wait_until(lambda: "shutting down" in server.stderr_text(), "the first signal's log line")
        assert server.proc.poll() is None, "the server did not wait for its request in flight"
        server.send(signal.SIGINT)
        code, err = server.wait(HANG_S)
        channel.close()
    assert code == 128 + signal.SIGINT, err
    assert "second SIGINT: exiting now" in err, err
