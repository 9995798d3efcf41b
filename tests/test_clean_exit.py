"""The process exits cleanly: no thread of ours is still running Python when the interpreter
finalizes (one that is gets killed inside torch's C++ code: "terminate called without an active
exception", exit 134). Model tests run the real `sglc run` and a script that never closes its
`sgl.Runtime()`, many times, two at a time so each loads the machine for the other."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 4
#: Seconds one subprocess may take (model load included) before the test fails as hung.
RUN_TIMEOUT_S = 300

TINY = '''import sglc as sgl

@sgl.function
def tiny(s, q):
    s += "Q: " + q + "\\nA:" + sgl.gen("a", max_tokens=3, temperature=0)
'''

NEVER_CLOSED = TINY + '''
sgl.set_default_backend(sgl.Runtime())  # NOTE: never closed: the exit hooks must stop it
print(repr(tiny.run(q="hello")["a"]))
'''


def _python(script: str, tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=RUN_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_pool_call_still_running_at_exit_finishes_before_finalization(tmp_path):
    """A call on a DaemonPool worker that outlives the main script runs to its end (joined at exit)."""
    done = tmp_path / "done"
    result = _python(f"""
        import time
        from sglc.executor.pool import DaemonPool

        def call():
            time.sleep(0.5)
            open({str(done)!r}, "w").write("finished")

        DaemonPool(1).submit(call)  # the main script ends at once, the call is still sleeping
        """, tmp_path, "pool_at_exit.py")
    assert result.returncode == 0, result.stderr
    assert done.read_text() == "finished"


def test_stop_all_pools_joins_every_worker(tmp_path):
    """After stop_all_pools() no worker of any pool is alive, including pools nobody references."""
    # NOTE: in a subprocess: stopping every pool of the pytest process would stop other tests' pools.
    result = _python("""
        import threading
        from sglc.executor.pool import DaemonPool, stop_all_pools

        release = threading.Event()
        for i in range(2):
            pool = DaemonPool(2, name=f"exit-test-{i}")
            pool.submit(lambda: release.wait(30))
            pool.submit(lambda: None)
        del pool  # NOTE: only the workers keep the pools alive now
        release.set()
        stop_all_pools(grace_s=30)
        print(sorted(t.name for t in threading.enumerate() if t.name.startswith("exit-test")))
        """, tmp_path, "stop_all_pools.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.model
def test_sglc_run_and_an_unclosed_runtime_exit_cleanly_every_time(tmp_path):
    """`sglc run` (embedded runtime) and a script that never closes sgl.Runtime() exit 0, never abort."""
    program = tmp_path / "tiny.py"
    program.write_text(TINY)
    graph, args = tmp_path / "tiny.pb", tmp_path / "args.jsonl"
    args.write_text('{"q": "a"}\n{"q": "b"}\n{"q": "c"}\n')
    sglc = [sys.executable, "-m", "sglc.cli"]
    subprocess.run([*sglc, "compile", str(program), "-o", str(graph)], check=True, cwd=ROOT, timeout=RUN_TIMEOUT_S)

    def sglc_run(i: int) -> subprocess.CompletedProcess:
        return subprocess.run([*sglc, "run", str(graph), "--input", str(args), "--output", str(tmp_path / f"out{i}.jsonl"),
                               "--no-progress"], capture_output=True, text=True, cwd=ROOT, timeout=RUN_TIMEOUT_S)

    failures = []
    with ThreadPoolExecutor(2) as both:
        for i in range(ROUNDS):
            runs = both.submit(sglc_run, i), both.submit(_python, NEVER_CLOSED, tmp_path, f"never_closed_{i}.py")
            for what, future in zip(("sglc run", "Runtime() never closed"), runs):
                result = future.result()
                if result.returncode != 0 or "terminate called" in result.stderr:
                    failures.append(f"round {i} {what}: exit {result.returncode}: {result.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)
    assert len((tmp_path / "out0.jsonl").read_text().splitlines()) == 3
