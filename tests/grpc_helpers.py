"""Helpers for the runtime-server tests: an in-process runtime and its gRPC stub as module
fixtures, and an `sglc serve` subprocess that reports its address."""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest

from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent


def runtime_fixture(kv_slots: int = 4096, **config):
    """A module-scoped fixture serving the default model in-process on 127.0.0.1:0; `config` are
    more ServeConfig fields (``http_port=0`` opens HTTP too, ``limits=...``, ``api_key=...``).

    Use as ``runtime = runtime_fixture(8192, http_port=0)`` in a test module.
    """
    from sglc_runtime.server.launch import Runtime, ServeConfig

    @pytest.fixture(scope="module")
    def runtime():
        rt = Runtime(ServeConfig(port=0, kv_slots=kv_slots, **config))
        yield rt
        rt.stop(1.0)

    return runtime


@pytest.fixture(scope="module")
def stub(runtime):
    """A gRPC stub on the module's `runtime` fixture (import it next to runtime_fixture)."""
    channel = grpc.insecure_channel(runtime.frontends[0].address)
    yield pb_grpc.RuntimeStub(channel)
    channel.close()
def serve_http_fixture(kv_slots: int = 4096):
    """A module-scoped fixture: an `sglc serve` subprocess with its HTTP port open; the process
    object carries ``.http`` (``http://127.0.0.1:PORT``). Use as ``server = serve_http_fixture(16384)``."""
    from sglc.fleet import free_port

    @pytest.fixture(scope="module")
    def server():
        port = free_port()
        with ServeProcess("--kv-slots", str(kv_slots), "--http-port", str(port)) as proc:
            proc.http = f"http://127.0.0.1:{port}"
            yield proc

    return server


LISTENING = re.compile(r"^sglc serve: listening on (\S+):(\d+) \(grpc\)$")


class ServeProcess:
    """`python -m sglc.cli serve ...` in a subprocess; ``start()`` returns once it listens."""

    def __init__(self, *args: str, port: int = 0, ready_timeout: float = 300.0) -> None:
        # NOTE: float32 unless a test asks otherwise: tests compare against float32 references
        # (recorded outputs, in-process engines); `sglc serve`'s own default is --quantization auto.
        pin = [] if any(a.startswith(("--quantization", "--dtype")) for a in args) else ["--quantization", "none"]
        self.args = ["--port", str(port), "--kv-slots", "4096", *pin, *args]
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.host = ""
        self.port = 0
        self._lines: queue.SimpleQueue = queue.SimpleQueue()
        self.stdout: list[str] = []
        self._stderr: list[str] = []
        self._collector: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> ServeProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "sglc.cli", "serve", *self.args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines), daemon=True).start()
        self._collector = threading.Thread(target=self._collect, args=(self.proc.stderr, self._stderr), daemon=True)
        self._collector.start()
        while True:
            try:
                line = self._lines.get(timeout=self.ready_timeout)
            except queue.Empty:
                self.kill()
                raise AssertionError(f"sglc serve did not print its listening line in {self.ready_timeout} s")
            if line is None:
                self.proc.wait(10)
                raise AssertionError(f"sglc serve exited ({self.proc.returncode}) before listening:\n"
                                     + "".join(self._stderr[-30:]))
            self.stdout.append(line)
            m = LISTENING.match(line.rstrip("\n"))
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return self

    @staticmethod
    def _pump(stream, q: queue.SimpleQueue) -> None:
        for line in stream:
            q.put(line)
        q.put(None)

    @staticmethod
    def _collect(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def send(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.send(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stderr_text(self) -> str:
        """What the process wrote to stderr so far."""
        return "".join(self._stderr)

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code, stderr text) after the process ends (TimeoutExpired past `timeout`)."""
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._collector is not None:
            self._collector.join(10)
        return code, "".join(self._stderr)

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()
