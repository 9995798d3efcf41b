"""An `sglc fleet` subprocess (the real sglang-router and real `sglc serve` workers on loopback),
and readers of a worker's /metrics."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from sglc.fleet import worker_metrics  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parent.parent
ROUTER = re.compile(r"^sglc fleet: router on (http://\S+) .*pid (\d+)\)$")
WORKER = re.compile(r"^sglc fleet: worker (\d+) (http://\S+) grpc (\S+) \(pid (\d+)\)$")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class FleetProcess:
    """`python -m sglc.cli fleet ...`; ``start()`` returns once it printed the router and worker lines."""

    def __init__(self, *args: str, dp: int = 2, ready_timeout: float = 300.0, env: dict[str, str] | None = None) -> None:
        # NOTE: float32 workers, as tests/grpc_helpers.py's ServeProcess (why: there)
        self.args = ["--dp", str(dp), "--port", "0", "--worker-arg=--kv-slots", "--worker-arg=4096",
                     "--worker-arg=--quantization", "--worker-arg=none", *args]
        self.dp = dp
        self.env = env or {}  # more environment variables of the fleet process (e.g. SGLC_API_KEY)
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.router_pid = 0
        self.workers: list[tuple[str, str, int]] = []  # (http url, grpc address, pid)
        self.stderr: list[str] = []

    def start(self) -> FleetProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen([sys.executable, "-m", "sglc.cli", "fleet", *self.args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        timer = threading.Timer(self.ready_timeout, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                line = line.rstrip("\n")
                if m := ROUTER.match(line):
                    self.url, self.router_pid = m.group(1), int(m.group(2))
                elif m := WORKER.match(line):
                    self.workers.append((m.group(2), m.group(3), int(m.group(4))))
                if self.url and len(self.workers) == self.dp:
                    return self
        finally:
            timer.cancel()
        self.proc.wait(30)
        raise AssertionError(f"sglc fleet exited ({self.proc.returncode}) before it was ready:\n"
                             + "".join(self.stderr[-30:]))

    def pids(self) -> list[int]:
        return [self.router_pid] + [pid for _, _, pid in self.workers]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill_everything(self) -> None:
        """Cleanup whatever is left (a failed test must not leave workers running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for pid in self.pids():
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> FleetProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.kill_everything()


def wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """The pids still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]
