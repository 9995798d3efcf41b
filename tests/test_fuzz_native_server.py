"""The seeded fuzzing of tests/test_fuzz_server.py against a server on the torch-free engine
(``ServeConfig(engine="native")``, the default model's GGUF): malformed and hostile HTTP and gRPC
requests get clean errors (what the engine does not run, by name: a 400 / INVALID_ARGUMENT), no
5xx / INTERNAL, no traceback in an answer or the log, no hang; afterwards the same greedy answer
as before, nothing left running, and the pool and the radix cache consistent."""
from __future__ import annotations

import pytest

from grpc_helpers import runtime_fixture
from server_helpers import assert_fuzzing_leaves_it_serving
from sglc_runtime.model.models.tiled_linear import native_tile_kernels

pytestmark = [pytest.mark.model,
              pytest.mark.skipif(not native_tile_kernels(), reason="no native GGUF kernels on this machine")]

SEED = 13
FUZZ_SECONDS = 15.0
HANG_S = 120.0

runtime = runtime_fixture(8192, http_port=0, engine="native")


def test_fuzzed_requests_to_the_native_engine_get_clean_errors_and_it_keeps_serving(runtime):
    assert_fuzzing_leaves_it_serving(runtime, seed=SEED, seconds=FUZZ_SECONDS, hang_s=HANG_S)
    engine = runtime.engine
    assert not engine._results
    with engine._lock:  # NOTE: idle: every slot is free or cached, nothing locked
        engine.tree.check_integrity()
        engine.pool.check_integrity()
        assert engine.tree.protected_size() == 0
        assert engine.pool.num_used == engine.tree.total_size()
