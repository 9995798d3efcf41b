"""CompilePool: constraint compiles in worker processes, each with a hard deadline and a memory cap.

Why processes (measured on the shared 2-core CPU, SmolLM2, docs/constrained_decoding.md): the
compile is pure Python and numpy, so in a server thread it holds the GIL; decoding 48 tokens
took 3.3-4.7 s alone, 11.7-23.9 s while a thread compiled, and 7.4-7.6 s while a worker
process compiled (the remaining slowdown is the CPU the worker uses, not the GIL). A process
can also be killed at a deadline (a thread cannot) and given its own address-space limit, so
a compile the budget checks missed still cannot take the server down. The price: a worker
starts in ~0.6 s (imports and the vocabulary's trie, once per worker) and a result crosses a
socket (1-50 ms; ipv4 1.0 ms, the SGLang character regex's 20 MB index ~30 ms on top of its
0.5 s compile).

Each :class:`CompileWorker` is one slot: its process is started on first use and again after
it was killed or died. :meth:`CompilePool.compile` takes a free slot (waiting for one; the
grammar cache bounds how many compiles can wait) and returns the decoded token index (or, for a
:class:`~.stop_regex.StopRegexSpec`, the search DFA).

The worker imports exactly the code this process runs: ``sglc`` from the same folder and
``sglc_runtime`` from the same directory, whatever the working directory or sys.path of the
child would otherwise pick.
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import subprocess
import sys
import weakref
from multiprocessing.connection import Connection
from typing import Any

import sglc
import sglc_runtime
from sglc import fsm

from .compile_worker import decode
from .compiler_config import ConstraintCompilerConfig
from .errors import ConstraintCompilerFailed
from sglc.wire.constraint_spec import ConstraintSpec

from .stop_regex import StopRegexSpec

log = logging.getLogger(__name__)

#: How long a new worker may take to import and build the vocabulary's trie.
STARTUP_TIMEOUT_S = 120.0

# The worker's entry: load sglc_runtime from the parent's directory, then serve (see module doc).
_BOOT = """\
import importlib.util, sys
sglc_root, runtime_dir, fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sglc_root)
spec = importlib.util.spec_from_file_location(
    "sglc_runtime", runtime_dir + "/__init__.py", submodule_search_locations=[runtime_dir])
module = importlib.util.module_from_spec(spec)
sys.modules["sglc_runtime"] = module
spec.loader.exec_module(module)
from sglc_runtime.constrained.compile_worker import main
main(fd)
"""


def _kill(proc: subprocess.Popen) -> int | None:
    """Kill ``proc`` (if still running) and reap it; its exit code."""
    if proc.poll() is None:
        proc.kill()
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a killed process always exits
        return None


class CompileWorker:
    """One worker process slot (used by one thread at a time: the pool hands slots out)."""

    def __init__(self, vocab: fsm.Vocabulary, config: ConstraintCompilerConfig) -> None:
        self.vocab = vocab
        self.config = config
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self.num_started = 0

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # NOTE: the compile uses no BLAS; idle BLAS threads would only reserve address space.
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        sglc_root = os.path.dirname(os.path.dirname(os.path.abspath(sglc.__file__)))
        runtime_dir = os.path.dirname(os.path.abspath(sglc_runtime.__file__))
        with child:
            # NOTE: its own session, so a Ctrl-C meant for the server does not hit the worker.
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, sglc_root, runtime_dir, str(child.fileno())],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self._conn = Connection(parent.detach())
        self.num_started += 1
        tokens = [self.vocab.token_bytes(i) for i in range(self.vocab.size)]
        try:
            self._conn.send(("init", tokens, self.vocab.eos_token_ids, self.config.worker_memory_bytes))
            if not self._conn.poll(STARTUP_TIMEOUT_S):
                raise ConstraintCompilerFailed(f"the constraint compile worker did not start in {STARTUP_TIMEOUT_S:g} s")
            status, fingerprint = self._conn.recv()
        except (EOFError, OSError):
            code = self._stop()
            raise ConstraintCompilerFailed(f"the constraint compile worker failed to start (exit code {code})") from None
        except BaseException:
            self._stop()
            raise
        if (status, fingerprint) != ("ready", self.vocab.fingerprint):
            self._stop()
            raise ConstraintCompilerFailed("the constraint compile worker built a different vocabulary")

    def _stop(self) -> int | None:
        """Kill the process (if any); its exit code."""
        code = None
        if self._proc is not None:
            code = _kill(self._proc)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
        return code

    def compile(self, spec: ConstraintSpec | StopRegexSpec, budget: fsm.CompileBudget) -> Any:
        """The token index of ``spec`` (a stop_regex's DFA), compiled in this slot's process under ``budget``.

        Raises the FSM library's ValueErrors for the constraint (over budget:
        ``CompileBudgetError``, also when the process had to be killed at the hard deadline or
        ran out of its memory) and ConstraintCompilerFailed when the worker broke.
        """
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
        assert self._conn is not None
        self._conn.send((spec, budget))
        hard_limit = budget.max_compile_seconds + self.config.kill_grace_seconds
        if not self._conn.poll(hard_limit):
            self._stop()
            raise fsm.CompileBudgetError("max_compile_seconds", budget.max_compile_seconds,
                                         f"compile time over {hard_limit:g} s (its worker process was killed)")
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):
            code = self._stop()
            raise ConstraintCompilerFailed(f"the constraint compile worker died (exit code {code})") from None
        if status == "ok":
            return decode(value, self.vocab)
        if status == "error":
            raise value
        if status == "memory":
            self._stop()
            limit = self.config.worker_memory_bytes
            raise fsm.CompileBudgetError("worker_memory_bytes", limit, "compile memory over its worker's limit",
                                         owner="ConstraintCompilerConfig")
        raise ConstraintCompilerFailed(f"the constraint compile worker failed: {value}")

    def close(self) -> None:
        self._stop()


class CompilePool:
    """``config.num_workers`` worker slots over one vocabulary. Thread-safe. ``close()`` kills
    the workers (a later compile starts them again); so does collecting the pool or exiting."""

    def __init__(self, vocab: fsm.Vocabulary, config: ConstraintCompilerConfig) -> None:
        if config.num_workers < 1:
            raise ValueError("CompilePool needs num_workers >= 1")
        self.workers = [CompileWorker(vocab, config) for _ in range(config.num_workers)]
        self._free: queue.SimpleQueue[CompileWorker] = queue.SimpleQueue()
        for w in self.workers:
            self._free.put(w)
        weakref.finalize(self, _close_all, list(self.workers))

    def compile(self, spec: ConstraintSpec | StopRegexSpec, budget: fsm.CompileBudget) -> Any:
        """Compile in the first free worker (waiting for one); see :meth:`CompileWorker.compile`."""
        worker = self._free.get()
        try:
            return worker.compile(spec, budget)
        finally:
            self._free.put(worker)

    def close(self) -> None:
        _close_all(self.workers)


def _close_all(workers: list[CompileWorker]) -> None:
    for w in workers:
        try:
            w.close()
        except Exception:  # noqa: BLE001 - best effort at shutdown
            log.debug("closing a compile worker failed", exc_info=True)
