"""A fleet: N `sglc serve` worker processes behind SGLang's own router (`sglang-router`).

    fleet = Fleet(FleetConfig(num_workers=2, policy="cache_aware")).start()
    fleet.url            # the router: one URL for every client (SGLang's /generate wire format)
    fleet.stop()

- Each worker is its own process (its own engine and KV cache), started as
  ``python -m sglc.cli serve --port 0 --http-port 0`` with ``OMP_NUM_THREADS`` set to its share of
  the CPU threads; its gRPC and HTTP addresses are read from its "listening on" lines.
- The router is the real ``sglang_router.launch_router`` (Rust) with ``--worker-urls`` and
  ``--policy``; we never balance requests ourselves.
- ``start()`` returns once every worker answers ``/health`` and the router forwards a request to
  each; on any failure it stops what it started and raises :class:`FleetError`.
- With an API key (``FleetConfig.api_key``) both directions are closed: every worker runs with the
  key, and the router gets it as ``--api-key``, which in sglang-router 0.3.2 does two things: it
  sends ``Authorization: Bearer KEY`` on what it forwards to a worker, and it answers 401 to a client
  without that header on its routes that reach a worker's generation. What it still answers without
  the key starts no generation; one route, /engine_metrics, shows the workers' /metrics (it fetches
  them with its key): the router has one key for both directions (docs/fleet.md). The key travels
  to every child in the environment ($SGLC_API_KEY), never on a command line (``ps`` shows command
  lines to every user). The router's /health checks of the workers carry no key and need none.
- ``stop()`` sends SIGTERM to the router and the workers, waits ``grace_s``, then SIGKILLs what is
  left. Children also get SIGTERM from the kernel if this process dies (PR_SET_PDEATHSIG), so a
  killed fleet leaves no orphans.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from sglc.errors import SglcError
from sglc.wire.auth import API_KEY_ENV

POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
#: The extra that installs the router (pyproject.toml: [project.optional-dependencies] fleet).
ROUTER_HINT = "pip install 'sglc[fleet]' (sglang-router==0.3.2 and setproctitle)"
_LISTENING = re.compile(r"^sglc serve: listening on (\S+):(\d+) \((grpc|http)\)$")
_ROOT = Path(__file__).resolve().parent.parent
#: The router's launcher (``python -m sglang_router.launch_router``) with ``--api-key`` taken from
#: $SGLC_API_KEY when it is set, so the key is never on the router's command line.
_ROUTER_MAIN = ("import os, sys\n"
                f"key = os.environ.pop({API_KEY_ENV!r}, '')\n"
                "sys.argv[1:1] = ['--api-key', key] if key else []\n"
                "from sglang_router.launch_router import main\n"
                "main()\n")


class FleetError(SglcError):
    """The fleet could not start (router missing, a worker failed, a timeout)."""


@dataclasses.dataclass(frozen=True)
class FleetConfig:
    num_workers: int = 2
    policy: str = "cache_aware"
    model: str = "default"
    host: str = "127.0.0.1"
    #: The router's port (0 = a free one).
    port: int = 0
    #: CPU threads of each worker (None: the machine's cores split evenly, at least 1).
    threads_per_worker: Optional[int] = None
    #: More `sglc serve` arguments for every worker (e.g. ["--kv-slots", "8192"]).
    worker_args: tuple[str, ...] = ()
    #: More `sglang_router.launch_router` arguments (e.g. ["--health-check-interval-secs", "5"]).
    router_args: tuple[str, ...] = ()
    #: Seconds the router's circuit breaker stays open for a worker that failed (its default is 60).
    #: The requests that failed on a killed worker open its breaker; with 60 s a restarted worker is
    #: listed healthy but gets nothing for a minute. A fleet restarts workers locally, so retry soon.
    circuit_breaker_timeout_s: int = 5
    ready_timeout_s: float = 300.0
    grace_s: float = 10.0
    #: The workers' key, which the router sends them and requires from its clients (None: all open;
    #: `sglc fleet` reads --api-key, else $SGLC_API_KEY). Not in the repr: it must not reach a log.
    api_key: Optional[str] = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.circuit_breaker_timeout_s, bool) or not isinstance(self.circuit_breaker_timeout_s, int) \
                or self.circuit_breaker_timeout_s < 1:
            raise ValueError(f"circuit_breaker_timeout_s is an int >= 1, got {self.circuit_breaker_timeout_s!r}")
        if not isinstance(self.num_workers, int) or not 1 <= self.num_workers <= 64:
            raise ValueError(f"a fleet has 1..64 workers, got {self.num_workers!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown router policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if self.threads_per_worker is not None and self.threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {self.threads_per_worker}")
        if not self.ready_timeout_s > 0 or self.grace_s < 0:
            raise ValueError("ready_timeout_s must be > 0 and grace_s >= 0")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()
                                         or any(c.isspace() for c in self.api_key)):
            raise ValueError("the API key (--api-key / $SGLC_API_KEY) is a non-empty string without spaces "
                             "(it is sent as 'Authorization: Bearer KEY')")

    def threads(self) -> int:
        if self.threads_per_worker is not None:
            return self.threads_per_worker
        return max(1, (os.cpu_count() or 1) // self.num_workers)


def check_router_installed() -> None:
    """FleetError naming the extra when sglang-router (or setproctitle, which it needs) is missing."""
    missing = [name for name in ("sglang_router", "setproctitle") if importlib.util.find_spec(name) is None]
    if missing:
        raise FleetError(f"the fleet needs SGLang's router, and {', '.join(missing)} is not installed: {ROUTER_HINT}")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux), so no orphan is left."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: stop() still cleans up
        pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def auth_headers(api_key: Optional[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def http_get(url: str, timeout: float = 5.0, api_key: Optional[str] = None) -> tuple[int, bytes]:
    """(status, body) of a GET (with ``Authorization: Bearer KEY`` when given a key); status 0
    when nothing answered."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=auth_headers(api_key)),
                                    timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def worker_metrics(url: str, timeout: float = 10.0, api_key: Optional[str] = None) -> dict[str, float]:
    """An `sglc serve` worker's /metrics (Prometheus text, ``sglc_NAME VALUE`` lines) as {NAME: value}."""
    status, body = http_get(f"{url}/metrics", timeout, api_key)
    if status != 200:
        raise FleetError(f"{url}/metrics answered status {status}")
    out = {}
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("sglc_"):
            name, _, value = line.partition(" ")
            out[name[len("sglc_"):]] = float(value)
    return out


@dataclasses.dataclass
class Worker:
    """One `sglc serve` process and its addresses (filled in once it listens)."""

    index: int
    proc: subprocess.Popen
    grpc: str = ""
    http: str = ""
    lines: "queue.SimpleQueue[Optional[str]]" = dataclasses.field(default_factory=queue.SimpleQueue)
    stderr_tail: list[str] = dataclasses.field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.http}"


class Fleet:
    """N workers and the router; see the module docstring."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.workers: list[Worker] = []
        self.router: Optional[subprocess.Popen] = None
        self.router_port = 0

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.router_port}"

    # --- start ---
    def start(self) -> Fleet:
        check_router_installed()
        try:
            for i in range(self.config.num_workers):
                self.workers.append(self._spawn_worker(i))
            deadline = time.monotonic() + self.config.ready_timeout_s
            for worker in self.workers:
                self._wait_listening(worker, deadline)
            for worker in self.workers:
                self._wait_http(f"{worker.url}/health", deadline, f"worker {worker.index} ({worker.url})")
            self._spawn_router()
            self._wait_router(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_worker(self, index: int) -> Worker:
        threads = str(self.config.threads())
        env = {**self._key_env(), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "OPENBLAS_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": str(_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        args = [sys.executable, "-m", "sglc.cli", "serve", "--model", self.config.model, "--host", self.config.host,
                "--port", "0", "--http-port", "0", *self.config.worker_args]
        if "--expose-paths" not in args:
            # NOTE: the router loads each worker's tokenizer from the model_path its server info
            # shows; the bare model name would send it to the Hugging Face hub instead
            args.append("--expose-paths")
        # NOTE: a session of its own: a terminal's Ctrl-C reaches the fleet only, whose one SIGTERM
        # lets the worker drain (two signals mean "exit at once" to `sglc serve`).
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_die_with_parent, start_new_session=True)
        worker = Worker(index, proc)
        threading.Thread(target=self._pump, args=(proc.stdout, worker.lines), daemon=True).start()
        threading.Thread(target=self._tail, args=(proc.stderr, worker.stderr_tail, index), daemon=True).start()
        return worker

    def _key_env(self) -> dict[str, str]:
        """This process's environment with $SGLC_API_KEY set to the fleet's key, or removed when
        it has none (an inherited key on the workers alone would make the router's calls fail)."""
        env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
        if self.config.api_key:
            env[API_KEY_ENV] = self.config.api_key
        return env

    @staticmethod
    def _pump(stream, lines: queue.SimpleQueue) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    @staticmethod
    def _tail(stream, tail: list[str], index: int) -> None:
        for line in stream:
            tail.append(line)
            del tail[:-40]
            if "error" in line.lower() or "shutting down" in line or "stopped" in line:
                sys.stderr.write(f"[worker {index}] {line}")

    def _wait_listening(self, worker: Worker, deadline: float) -> None:
        while not (worker.grpc and worker.http):
            try:
                line = worker.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise FleetError(f"worker {worker.index} did not listen within {self.config.ready_timeout_s:g} s") from None
            if line is None:
                worker.proc.wait(10)
                tail = "".join(worker.stderr_tail[-5:]).strip().splitlines()
                raise FleetError(f"worker {worker.index} exited ({worker.proc.returncode}) before listening: "
                                 f"{tail[-1] if tail else 'no output'}")
            m = _LISTENING.match(line.rstrip("\n"))
            if m:
                setattr(worker, m.group(3), f"{m.group(1)}:{m.group(2)}")

    def _wait_http(self, url: str, deadline: float, what: str, ok=lambda body: True) -> bytes:
        while True:
            status, body = http_get(url, timeout=5.0, api_key=self.config.api_key)
            if status == 200 and ok(body):
                return body
            if time.monotonic() > deadline:
                raise FleetError(f"{what} not ready within {self.config.ready_timeout_s:g} s ({url}: status {status})")
            if self.router is not None and self.router.poll() is not None:
                raise FleetError(f"the router exited ({self.router.returncode}) while starting; run "
                                 f"'python -m sglang_router.launch_router --help' to check the install")
            time.sleep(0.2)

    def _spawn_router(self) -> None:
        self.router_port = self.config.port or free_port(self.config.host)
        urls = [w.url for w in self.workers]
        args = [sys.executable, "-c", _ROUTER_MAIN, "--host", self.config.host,
                "--port", str(self.router_port), "--policy", self.config.policy, "--worker-urls", *urls,
                "--log-level", "warn", *self._breaker_args(), *self._metrics_args(), *self.config.router_args]
        self.router = subprocess.Popen(args, env=self._key_env(), stdin=subprocess.DEVNULL, stdout=sys.stderr,
                                       stderr=sys.stderr, preexec_fn=_die_with_parent)

    def _metrics_args(self) -> list[str]:
        """The router's Prometheus exporter on a free port of the fleet's host: its default (29000)
        is fixed, and a second router on the machine panicked binding it (a second fleet, a test
        run beside a fleet)."""
        if any(a.startswith("--prometheus-port") for a in self.config.router_args):
            return []  # NOTE: the user's own --router-arg wins
        return ["--prometheus-host", self.config.host, "--prometheus-port", str(free_port(self.config.host))]

    def _breaker_args(self) -> list[str]:
        if any(a.startswith("--cb-timeout-duration-secs") for a in self.config.router_args):
            return []  # NOTE: the user's own --router-arg wins
        return ["--cb-timeout-duration-secs", str(self.config.circuit_breaker_timeout_s)]

    def _wait_router(self, deadline: float) -> None:
        """Until the router's worker list holds every worker (it registers each after its health check)."""
        wanted = {w.url for w in self.workers}

        def all_registered(body: bytes) -> bool:
            try:
                listed = json.loads(body)
            except ValueError:
                return False
            found = set(re.findall(r"http://[0-9A-Za-z.\-]+:\d+", json.dumps(listed)))
            return wanted <= found

        self._wait_http(f"{self.url}/workers", deadline, "the router's worker list", all_registered)

    # --- stop ---
    def stop(self) -> None:
        """SIGTERM everything, wait up to grace_s, SIGKILL what is left (idempotent)."""
        procs = ([self.router] if self.router is not None else []) + [w.proc for w in self.workers]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace_s + 5.0
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
