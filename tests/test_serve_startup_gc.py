"""`serve` starts its runtime with Python's cyclic collector off and then freezes what the start
made (runtime/server/launch.py `_start_runtime`): the collector is on again afterwards, also when
the start fails, and the start's objects sit in the permanent generation. Run in a subprocess:
``gc.freeze`` is process-wide and pytest's own process must not be frozen."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import gc, json, sys
from sglc_runtime.server.launch import ServeConfig, _start_runtime
try:
    rt = _start_runtime(ServeConfig(model=sys.argv[1], http_port=None, kv_slots=512))
    started = True
except Exception as err:
    started, rt = f"{type(err).__name__}: {err}", None
out = {"started": started, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
if rt is not None:
    rt.stop(0)
print(json.dumps(out))
"""


def _start(model: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, model], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.model
def test_a_started_runtime_leaves_the_collector_on_and_its_objects_frozen():
    out = _start("default")
    assert out["started"] is True and out["enabled"] is True
    assert out["frozen"] > 100_000  # torch's import alone makes far more


def test_a_failed_start_also_turns_the_collector_back_on(tmp_path):
    out = _start(str(tmp_path / "no-such-model.gguf"))
    assert out["started"] != True and "no-such-model" in out["started"]  # noqa: E712
    assert out["enabled"] is True
