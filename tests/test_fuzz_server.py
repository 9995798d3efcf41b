"""Seeded fuzzing of a REAL server (default model, HTTP + gRPC on loopback): malformed bodies,
wrong types, huge numbers, NaN/Infinity, deep nesting, bad unicode, wrong content types, unknown
fields, random and truncated bytes, random protobuf field values and random bytes on the wire
(bench/server_fuzz.py). Invariants: no 5xx / INTERNAL, no traceback in an answer or in the
server's log, every answer within the timeout, and afterwards the same greedy answer as before
with nothing left running (no leak). `python bench/soak_server.py` runs the same for minutes.
"""
from __future__ import annotations

import pytest

from grpc_helpers import runtime_fixture

from server_helpers import assert_fuzzing_leaves_it_serving

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
    assert_fuzzing_leaves_it_serving(runtime, seed=SEED, seconds=FUZZ_SECONDS, hang_s=HANG_S)
    engine = runtime.engine
    assert not engine._results and not engine._stream_queues
    with engine._lock:  # NOTE: the engine is idle: its pool, table and cache must be consistent
        engine.scheduler.check_integrity()
