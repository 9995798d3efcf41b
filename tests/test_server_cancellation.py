"""A client that goes away, or a call that is partly refused, cancels EVERY engine request the call
started (all n, all prompts, all batch items, streamed or not); Score is cancellable and takes
only its share of the engine; a stop after abandoned streams does not wait out the grace period.

One in-process runtime on the real default model (HTTP + gRPC on loopback); after each case
``service.num_active`` returns to 0 and the engine runs nothing.
"""
from __future__ import annotations

import threading
import time

import grpc
import pytest

from grpc_helpers import runtime_fixture

from server_helpers import (greedy_completion, grpc_address, http_base, open_then_abandon, post_json,
                            wait_idle)
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.engine import Engine
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.server.launch import Runtime, ServeConfig

pytestmark = pytest.mark.model

LONG = {"max_tokens": 400, "ignore_eos": True, "temperature": 0.8}  # would run for minutes on a CPU
LONG_SGLANG = {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0.8}
CHAT = [{"role": "user", "content": "Tell me a very long story."}]


runtime = runtime_fixture(8192, http_port=0)


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


@pytest.fixture(scope="module")
def stub(runtime):
    channel = grpc.insecure_channel(grpc_address(runtime))
    yield pb_grpc.RuntimeStub(channel)
    channel.close()


ABANDONED = [
    ("completions-n3-stream", "/v1/completions", {"prompt": "Once upon a time", "n": 3, "stream": True, **LONG}, 3),
    ("completions-prompts-stream", "/v1/completions",
     {"prompt": ["Once", "Twice", "Thrice"], "stream": True, **LONG}, 3),
    ("completions-n2-json", "/v1/completions", {"prompt": "Once upon a time", "n": 2, **LONG}, 2),
    ("chat-n2-stream", "/v1/chat/completions", {"messages": CHAT, "n": 2, "stream": True, **LONG}, 2),
    ("chat-n2-json", "/v1/chat/completions", {"messages": CHAT, "n": 2, **LONG}, 2),
    ("generate-batch-stream", "/generate", {"text": ["A", "B", "C"], "stream": True, "sampling_params": LONG_SGLANG}, 3),
    ("generate-batch-json", "/generate", {"text": ["A", "B", "C"], "sampling_params": LONG_SGLANG}, 3),
    ("generate-n3-stream", "/generate", {"text": "A", "stream": True, "sampling_params": {**LONG_SGLANG, "n": 3}}, 3),
    ("generate-batch-n2-json", "/generate", {"text": ["A", "B"], "sampling_params": {**LONG_SGLANG, "n": 2}}, 4),
]


@pytest.mark.parametrize("path, body, num_calls", [a[1:] for a in ABANDONED], ids=[a[0] for a in ABANDONED])
def test_a_client_that_goes_away_cancels_every_request_of_its_call(runtime, base, path, body, num_calls):
    """Dropping the connection (mid-stream, or while waiting for the JSON) aborts all the call's
    engine requests: num_active is back to 0 within seconds, not after 400 tokens each."""
    wait_idle(runtime)
    cancelled = runtime.service.metrics()["num_cancelled"]
    open_then_abandon(base, path, body, stream=body.get("stream", False),
                      until=lambda: runtime.service.num_active == num_calls)
    wait_idle(runtime, timeout=20)
    assert runtime.service.metrics()["num_cancelled"] - cancelled == num_calls


def test_a_partly_refused_call_runs_none_of_its_requests(runtime, base):
    """A /generate batch whose last prompt the engine refuses cancels the prompts already submitted."""
    wait_idle(runtime)
    status, out = post_json(base, "/generate", {"text": ["Hi", "there", "x " * 9000], "sampling_params": LONG_SGLANG})
    assert status == 400 and "batch prompt 2" in out["error"]["message"], out
    assert runtime.service.num_active == 0
    wait_idle(runtime, timeout=10)


SCORE_CHOICES = [f" option number {i}, which is a fine choice among many" for i in range(128)]


def test_cancelling_a_score_aborts_its_engine_work(runtime, stub):
    """A cancelled Score (128 choices) stops within seconds and leaves no request or output behind."""
    wait_idle(runtime)
    future = stub.Score.future(pb.ScoreRequest(prompt=pb.Prompt(text="Pick the best option:"),
                                               choices=SCORE_CHOICES), timeout=300)
    deadline = time.monotonic() + 60
    while runtime.engine.stats().num_running + runtime.engine.stats().num_waiting == 0:
        assert time.monotonic() < deadline, "the score never started"
        time.sleep(0.01)
    assert future.cancel()
    assert wait_idle(runtime, timeout=20) < 20
    assert not runtime.engine._results, "aborted score requests left outputs in the engine"


def test_a_big_score_leaves_other_clients_their_share(runtime, stub):
    """While a 128-choice Score runs, another client's short Generate finishes before it does."""
    wait_idle(runtime)
    future = stub.Score.future(pb.ScoreRequest(prompt=pb.Prompt(text="Choose wisely:"), choices=SCORE_CHOICES),
                               timeout=300)
    while runtime.service.num_active == 0:
        time.sleep(0.01)
    request = pb.GenerateRequest(prompt=pb.Prompt(text="Hello"), sampling=pb.SamplingParams(max_new_tokens=2))
    replies = list(stub.Generate(request, timeout=300))
    assert replies[-1].WhichOneof("response") == "complete"
    assert not future.done(), "the short request waited for the whole score"
    assert len(future.result().choices) == len(SCORE_CHOICES)
    wait_idle(runtime)


def test_stop_after_abandoned_streams_does_not_wait_out_the_grace(runtime):
    """Abandoned streams end their requests, so a stop with a 60 s grace returns in seconds."""
    wait_idle(runtime)  # NOTE: the two engines share weights and must not step at the same time
    engine = Engine(EngineConfig(num_kv_slots=2048), share_model_with=runtime.engine)
    rt = Runtime(ServeConfig(port=0, http_port=0, grace_s=60.0), engine=engine)
    try:
        open_then_abandon(http_base(rt), "/v1/completions", {"prompt": "Once", "n": 2, "stream": True, **LONG},
                          stream=True, until=lambda: rt.service.num_active == 2)
        t0 = time.monotonic()
        stopper = threading.Thread(target=rt.stop)
        stopper.start()
        stopper.join(40)
        assert not stopper.is_alive() and time.monotonic() - t0 < 30
    finally:
        rt.stop(0.0)


def test_the_server_still_answers_after_all_of_that(runtime, base):
    """After every abandoned call, a greedy completion still answers and nothing is left running."""
    assert greedy_completion(base)
    wait_idle(runtime)
