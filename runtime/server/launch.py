"""Start the runtime: one Engine in its background thread, its RuntimeService, and the servers
in front of it (gRPC today; the HTTP server of the ecosystem-protocols issue starts beside it).

Shutdown (SIGTERM or SIGINT): refuse new calls (UNAVAILABLE), give Generate calls in flight
`grace_s` seconds to finish, abort the rest (their clients get a GenerateError UNAVAILABLE; an
aborted prefill stops at its next chunk boundary), stop the servers and the engine thread, return 0.
The engine thread gets a bounded wait (``Engine.shutdown``): if it is still inside a step after
that, the process logs it and exits at once with status 1 (a thread left inside torch at
interpreter exit would crash it).
A second signal exits at once: one log line, then ``os._exit(128 + signal)``, whatever is running.
"""
from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .limits import ServerLimits

log = logging.getLogger(__name__)

#: Seconds the servers get to deliver the last messages after the engine work is over.
_FLUSH_S = 2.0


class Frontend(Protocol):
    """A server in front of the RuntimeService (gRPC, HTTP)."""

    kind: str

    @property
    def address(self) -> str: ...

    def start(self) -> None: ...

    def stop(self, grace: float | None = None) -> threading.Event: ...


@dataclass
class ServeConfig:
    """What `sglc serve` starts. Engine fields are passed to EngineConfig (validated there)."""

    model: str = "default"
    #: "torch" (every feature, any model) or "native" (GGUF on the CPU without torch: engine/native_engine.py)
    engine: str = "torch"
    host: str = "127.0.0.1"
    port: int = 0
    http_port: int | None = None  # the ecosystem-protocols issue: HTTP beside gRPC
    dtype: str | None = None  # None: EngineConfig's choice (bfloat16 when quantized or a bf16 folder on native bf16)
    quantization: str = "none"
    threads: int | None = None  # None: the physical cores (runtime/engine/thread_policy.py)
    kv_slots: int | None = None
    chunked_prefill_size: int | str | None = "auto"  # EngineConfig's: "auto", a fixed size, or None: off
    schedule_policy: str = "lpm"
    disable_radix_cache: bool = False
    precompute: bool = True  # a program's next prompt prefilled when a call ends (engine/precompute.py)
    max_running_requests: int = 64
    device: str = "auto"
    attention_backend: str = "auto"
    grpc_workers: int = 256
    grace_s: float = 10.0
    constraint_compiler: Any = None  # a ConstraintCompilerConfig; None = the defaults
    limits: ServerLimits = field(default_factory=ServerLimits)
    api_key: str | None = None  # None: open (see auth.py; cli_serve reads SGLC_API_KEY)
    allowed_hosts: tuple[str, ...] = ()  # HTTP Host names beyond loopback and the bound address (host_allowlist.py)
    expose_paths: bool = False  # HTTP info endpoints show absolute model paths (public_paths.py)

    def native_engine_config(self) -> Any:
        """The native engine's settings (it has no dtype choice beyond bf16 / float32, no quantization,
        device or attention backend: it runs a GGUF file's own types on this CPU)."""
        from sglc_runtime.engine.native_engine_config import NativeEngineConfig
        from sglc_runtime.engine.thread_policy import server_threads

        chunk = self.chunked_prefill_size
        return NativeEngineConfig(model=self.model, num_kv_slots=self.kv_slots or NativeEngineConfig.num_kv_slots,
                                  max_running_requests=self.max_running_requests,
                                  chunked_prefill_size=chunk if isinstance(chunk, int) and chunk > 0
                                  else NativeEngineConfig.chunked_prefill_size,
                                  threads=server_threads(self.threads), dtype=self.dtype or "bfloat16",
                                  disable_radix_cache=self.disable_radix_cache, precompute=self.precompute)

    def build_engine(self, while_loading: Callable[[], None] | None = None) -> Any:
        """The engine this config names, loaded (not started). ``while_loading``: called once the
        native engine's model has started loading (its work then runs beside the load)."""
        if self.engine == "native":
            from sglc_runtime.engine.native_engine_config import start_model_load

            native_config = self.native_engine_config()
            loading = start_model_load(native_config)
            if while_loading is not None:
                while_loading()
            from sglc_runtime.engine.native_engine import NativeEngine

            return NativeEngine(native_config, loading=loading)
        if self.engine != "torch":
            raise ValueError(f"engine must be 'torch' or 'native', got {self.engine!r}")
        from sglc_runtime.engine import Engine

        return Engine(self.engine_config())

    def engine_config(self) -> Any:
        from sglc_runtime.engine.engine_config import EngineConfig
        from sglc_runtime.engine.thread_policy import server_threads

        extra = {} if self.constraint_compiler is None else {"constraint_compiler": self.constraint_compiler}
        return EngineConfig(model=self.model, dtype=self.dtype, quantization=self.quantization,
                            threads=server_threads(self.threads),
                            num_kv_slots=self.kv_slots,
                            chunked_prefill_size=self.chunked_prefill_size, schedule_policy=self.schedule_policy,
                            disable_radix_cache=self.disable_radix_cache, precompute=self.precompute,
                            max_running_requests=self.max_running_requests, device=self.device,
                            attention_backend=self.attention_backend, **extra)


def build_frontends(config: ServeConfig, service: Any) -> list[Frontend]:
    """The servers to start, bound to their ports already (port 0 picks a free one)."""
    from .grpc_server import GrpcServer

    frontends: list[Frontend] = [GrpcServer(service, config.host, config.port, max_workers=config.grpc_workers,
                                            api_key=config.api_key, expose_paths=config.expose_paths)]
    if config.http_port is not None:
        from .http_server import HttpServer

        frontends.append(HttpServer(service, config.host, config.http_port, api_key=config.api_key,
                                    allowed_hosts=config.allowed_hosts, expose_paths=config.expose_paths))
    return frontends


def _import_frontends(config: ServeConfig) -> None:
    """Import the modules the service and build_frontends will use (their import is most of their
    cost)."""
    from . import grpc_server, service  # noqa: F401

    if config.http_port is not None:
        from . import http_server  # noqa: F401


def _say(line: str) -> None:
    print(line, flush=True)


class Runtime:
    """A started engine + service + frontends, stopped once by ``stop()`` (idempotent)."""

    def __init__(self, config: ServeConfig, *, engine: Any = None) -> None:
        self.config = config
        if engine is None and config.engine == "native":
            # NOTE: the servers' modules import while the native engine's model loads: its repacking
            # is native code, without the GIL (the torch engine's load holds it: no gain there)
            importer = threading.Thread(target=_import_frontends, args=(config,), name="sglc-import", daemon=True)
            try:
                engine = config.build_engine(while_loading=importer.start)
            finally:
                if importer.is_alive():
                    importer.join()
        self.engine = engine if engine is not None else config.build_engine()
        from .service import RuntimeService

        self.engine.start()
        self.service = RuntimeService(self.engine, limits=config.limits)
        self.service.model_info()  # NOTE: derive the chat template before the first call needs it
        try:
            self.frontends = build_frontends(config, self.service)
        except BaseException:
            self.engine.shutdown()
            raise
        for f in self.frontends:
            f.start()
        self._stopped = threading.Event()
        #: False when the engine thread was still inside a step when ``stop()`` gave up waiting
        self.engine_stopped = True
        self._stop_lock = threading.Lock()

    def stop(self, grace: float | None = None) -> None:
        """Drain: refuse new calls, wait up to `grace` s for Generates in flight, abort the
        rest, stop the servers and the engine."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            grace = self.config.grace_s if grace is None else grace
            self.service.drain()  # new calls get UNAVAILABLE from here on
            deadline = time.monotonic() + grace
            while self.service.num_active and time.monotonic() < deadline:
                time.sleep(0.05)
            # NOTE: aborted Generates still send their GenerateError (UNAVAILABLE) to the client.
            cancelled = self.service.cancel_all("the server shut down")
            if cancelled:
                log.warning("shutdown: %d requests were still running after %.1f s and were aborted",
                            cancelled, grace)
            done = [f.stop(_FLUSH_S) for f in self.frontends]
            for event in done:
                event.wait(_FLUSH_S + 5.0)
            # NOTE: aborts anything left (score / cache-prefix prefills); a bounded wait
            self.engine_stopped = self.engine.shutdown() is not False
            self._stopped.set()


def serve(config: ServeConfig, *, say: Callable[[str], None] = _say) -> int:
    """Run the servers until SIGTERM/SIGINT; returns the exit status (0 after a clean stop).

    Prints ``sglc serve: listening on HOST:PORT (grpc)`` once each server accepts calls.
    Must run in the main thread (signal handlers). A second signal ends the process at once
    (``os._exit``); so does an engine thread still inside a step after the stop (status 1).
    """
    signals: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        # NOTE: no locks in here (it runs between two bytecodes of the main thread)
        signals.append(signum)
        if len(signals) > 1:  # second signal: no more grace, no more waiting for anything
            _hard_exit(f"sglc serve: second {signal.Signals(signum).name}: exiting now", 128 + signum)

    runtime: Runtime | None = None
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        runtime = _start_runtime(config)
        placement = getattr(runtime.engine, "placement", None)
        if placement is not None:
            print(f"sglc serve: {placement.describe()}", file=sys.stderr, flush=True)
        for f in runtime.frontends:
            say(f"sglc serve: listening on {f.address} ({f.kind})")
        while not signals:
            time.sleep(0.2)
        name = signal.Signals(signals[0]).name if signals else "stop"
        print(f"sglc serve: {name}: shutting down (grace {config.grace_s:g} s; a second signal exits at once)",
              file=sys.stderr, flush=True)
        runtime.stop()
        if not runtime.engine_stopped:
            _hard_exit("sglc serve: the engine thread is still inside a step; exiting without it", 1)
        print("sglc serve: stopped", file=sys.stderr, flush=True)
        return 0
    finally:
        if runtime is not None:
            runtime.stop(0.0)
            if not runtime.engine_stopped:
                _hard_exit("sglc serve: the engine thread is still inside a step; exiting without it", 1)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _start_runtime(config: ServeConfig) -> Runtime:
    """``Runtime(config)`` with Python's cyclic collector off while it imports and loads, then the
    objects it made frozen (``gc.freeze``). Startup makes ~330k long-lived tracked objects (most of
    them torch's import): every full collection during the load walked them all, and each one
    during serving would walk them again, for nothing: they live as long as the process."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return Runtime(config)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _hard_exit(line: str, status: int) -> None:
    """Log `line` and end the process now: no atexit hooks, no joins (compile workers exit on
    their pipe's EOF)."""
    try:
        print(line, file=sys.stderr, flush=True)
        sys.stdout.flush()
    finally:
        os._exit(status)
