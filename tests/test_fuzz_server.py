"""Seeded fuzzing of a REAL server (default model, HTTP + gRPC on loopback): malformed bodies,
wrong types, huge numbers, NaN/Infinity, deep nesting, bad unicode, wrong content types, unknown
fields, random and truncated bytes, random protobuf field values and random bytes on the wire
(bench/server_fuzz.py). Invariants: no 5xx / INTERNAL, no traceback in an answer or in the
server's log, every answer within the timeout, and afterwards the same greedy answer as before
with nothing left running (no leak). `python bench/soak_server.py` runs the same for minutes.
"""
from __future__ import annotations

import grpc
import pytest

from grpc_helpers import runtime_fixture

from bench.server_fuzz import LogWatch, run_fuzz
from server_helpers import greedy_completion, greedy_grpc, grpc_address, http_base, wait_idle
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

pytestmark = pytest.mark.model

SEED = 12
FUZZ_SECONDS = 20.0
#: An answer later than this is a hang. Generous: the CI machine is shared, and every fuzzed
#: request generates at most a few tokens.
HANG_S = 120.0


runtime = runtime_fixture(8192, http_port=0)


def test_fuzzed_requests_get_clean_errors_and_the_server_keeps_serving(runtime):
    """Every fuzzed request gets a 4xx / non-internal status or a normal answer, promptly; the
    server logs no traceback, leaks no request, and still gives the same greedy answer."""
    base = http_base(runtime)
    channel = grpc.insecure_channel(grpc_address(runtime))
    stub = pb_grpc.RuntimeStub(channel)
    before_http, before_grpc = greedy_completion(base), greedy_grpc(stub)
    with LogWatch() as watch:
        tally = run_fuzz(base, grpc_address(runtime), seconds=FUZZ_SECONDS, seed=SEED, workers=4, timeout=HANG_S)
        wait_idle(runtime, timeout=60)
    summary = tally.summary()
    print(f"\nfuzz: {summary['requests']} requests, {summary['clean_errors']} clean errors, "
          f"{summary['server_errors']} server errors, {summary['tracebacks']} tracebacks, {summary['hangs']} hangs, "
          f"{len(watch.tracebacks)} logged tracebacks; statuses {summary['statuses']}")
    assert tally.requests >= 50, summary
    assert not tally.server_errors, tally.server_errors[:5]
    assert not tally.tracebacks, tally.tracebacks[:5]
    assert not tally.hangs, tally.hangs[:5]
    assert not watch.tracebacks, watch.tracebacks[:5]
    kinds = set(summary["statuses"])
    assert {"http 200", "http 400", "grpc OK", "grpc INVALID_ARGUMENT"} <= kinds, kinds  # both ends reached

    assert greedy_completion(base) == before_http and greedy_grpc(stub) == before_grpc
    channel.close()
    wait_idle(runtime, timeout=30)
    engine = runtime.engine
    assert runtime.service.num_active == 0 and not engine._results and not engine._stream_queues
    with engine._lock:  # NOTE: the engine is idle: its pool, table and cache must be consistent
        engine.scheduler.check_integrity()
