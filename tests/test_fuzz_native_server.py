"""The seeded fuzzing of tests/test_fuzz_server.py against a server on the torch-free engine
(``ServeConfig(engine="native")``, the default model's GGUF): malformed and hostile HTTP and gRPC
requests get clean errors (what the engine does not run, by name: a 400 / INVALID_ARGUMENT), no
5xx / INTERNAL, no traceback in an answer or the log, no hang; afterwards the same greedy answer
as before, nothing left running, and the pool and the radix cache consistent."""
from __future__ import annotations

import grpc
import pytest

from bench.server_fuzz import LogWatch, run_fuzz
from grpc_helpers import runtime_fixture
from server_helpers import greedy_completion, greedy_grpc, grpc_address, http_base, wait_idle
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.model.models.tiled_linear import native_tile_kernels

pytestmark = [pytest.mark.model,
              pytest.mark.skipif(not native_tile_kernels(), reason="no native GGUF kernels on this machine")]

SEED = 13
FUZZ_SECONDS = 15.0
HANG_S = 120.0

runtime = runtime_fixture(8192, http_port=0, engine="native")


def test_fuzzed_requests_to_the_native_engine_get_clean_errors_and_it_keeps_serving(runtime):
    base = http_base(runtime)
    channel = grpc.insecure_channel(grpc_address(runtime))
    stub = pb_grpc.RuntimeStub(channel)
    before_http, before_grpc = greedy_completion(base), greedy_grpc(stub)
    with LogWatch() as watch:
        tally = run_fuzz(base, grpc_address(runtime), seconds=FUZZ_SECONDS, seed=SEED, workers=4, timeout=HANG_S)
        wait_idle(runtime, timeout=60)
    summary = tally.summary()
    assert tally.requests >= 50, summary
    assert not tally.server_errors, tally.server_errors[:5]
    assert not tally.tracebacks, tally.tracebacks[:5]
    assert not tally.hangs, tally.hangs[:5]
    assert not watch.tracebacks, watch.tracebacks[:5]
    assert {"http 200", "http 400", "grpc OK", "grpc INVALID_ARGUMENT"} <= set(summary["statuses"]), summary
    assert greedy_completion(base) == before_http and greedy_grpc(stub) == before_grpc
    channel.close()
    wait_idle(runtime, timeout=30)
    engine = runtime.engine
    assert runtime.service.num_active == 0 and not engine._results
    with engine._lock:  # NOTE: idle: every slot is free or cached, nothing locked
        engine.tree.check_integrity()
        engine.pool.check_integrity()
        assert engine.tree.protected_size() == 0
        assert engine.pool.num_used == engine.tree.total_size()
