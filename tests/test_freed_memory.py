"""A model load gives the memory its temporaries freed back to the system
(runtime/model/freed_memory.py): glibc keeps freed small blocks in its arenas otherwise, and the
process stays as large as the load's peak."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import threading
    from sglc_runtime.model.freed_memory import return_freed_memory

    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

    survivors = []
    def load_like():  # NOTE: on a thread, in its own arena, as the layer pool loads
        blocks = [bytearray(60_000) for _ in range(4000)]  # ~240 MB under malloc's mmap threshold
        survivors.extend(blocks[::50])  # a few survivors keep the arena from shrinking by itself
    t = threading.Thread(target=load_like)
    t.start()
    t.join()
    before = rss_mb()
    print(return_freed_memory(), before, rss_mb())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_freed_blocks_leave_the_process():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    trimmed, before, after = out.stdout.split()
    if trimmed != "True":
        pytest.skip("this C library has no malloc_trim")
    assert int(before) > 200 and int(after) < int(before) // 2, (before, after)


def test_load_model_returns_the_loads_freed_memory(monkeypatch, tmp_path):
    import sglc_runtime.model.models as models

    calls = []
    monkeypatch.setattr(models, "return_freed_memory", lambda: calls.append(1) or True)

    class Loaded:
        @staticmethod
        def from_pretrained(path, **kw):
            return "model"

    monkeypatch.setattr(models.ModelConfig, "from_pretrained", lambda path: type("C", (), {"architecture": "X"})())
    monkeypatch.setattr(models, "get_model_class", lambda arch: Loaded)
    assert models.load_model(tmp_path) == "model" and calls == [1]
