"""The engine's thread policy: its setup runs in a thread that ends (so the stepping thread's
OpenMP pool is the only one), --threads sets torch's intra-op threads, OMP_NUM_THREADS is kept."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

from sglc_runtime.engine import thread_policy
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.engine.thread_policy import apply_thread_count, in_transient_thread, physical_cores, server_threads


def test_in_transient_thread_returns_and_raises_from_another_thread():
    caller = threading.get_ident()
    assert in_transient_thread(lambda: threading.get_ident()) != caller
    with pytest.raises(KeyError, match="boom"):
        in_transient_thread(lambda: {}["boom"])


def test_physical_cores_is_at_most_the_usable_cpus():
    assert 1 <= physical_cores() <= len(os.sched_getaffinity(0))


def test_an_engine_sets_threads_only_when_told(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert apply_thread_count(1) == 1 and torch.get_num_threads() == 1
        assert apply_thread_count(None) == 1  # NOTE: the embedding application's choice is kept
    finally:
        torch.set_num_threads(before)


def test_a_server_uses_the_flag_the_environment_or_the_physical_cores(monkeypatch):
    assert server_threads(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert server_threads(None) is None  # NOTE: torch read OMP_NUM_THREADS at import; left alone
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert server_threads(None) == physical_cores()


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, 5000])
def test_engine_config_threads_is_checked(bad):
    with pytest.raises(ValueError, match="EngineConfig.threads"):
        EngineConfig(threads=bad)


@pytest.mark.model
def test_engine_setup_runs_off_the_callers_thread(monkeypatch):
    """Weights are loaded and packed in a transient thread, and the engine still serves."""
    from sglc_runtime.engine import engine as engine_module

    seen: list[int] = []
    real = engine_module.load_model

    def recording(*args, **kwargs):
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "load_model", recording)
    before = torch.get_num_threads()
    eng = engine_module.Engine(quantization="int4", num_kv_slots=2048, threads=1)
    try:
        assert seen and seen[0] != threading.get_ident()
        assert eng.model.quantization == "int4" and eng.config.dtype == "bfloat16" and eng.threads == 1
        out = eng.generate(["The capital of France is"], {"temperature": 0, "max_new_tokens": 4})[0]
        assert len(out.token_ids) == 4
    finally:
        eng.shutdown()
        torch.set_num_threads(before)  # NOTE: torch's thread count is process-wide


def test_serve_rejects_bad_thread_and_quantization_flags():
    for flags, expected in ((["--threads", "0"], "--threads"), (["--quantization", "int3"], "--quantization")):
        proc = subprocess.run([sys.executable, "-m", "sglc.cli", "serve", *flags], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
