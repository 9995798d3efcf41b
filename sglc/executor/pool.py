"""A small pool of daemon worker threads for backend calls.

Unlike concurrent.futures.ThreadPoolExecutor, its threads never block interpreter exit: a
call abandoned after a program timeout (a backend that stopped answering) must not keep
`sglc run` alive once it has reported the failure.

They must not outlive the interpreter either: a Python thread that is still running when the
interpreter finalizes is killed (``pthread_exit``) the next time it takes the GIL, and when that
happens inside torch's C++ code — a worker dropping the last reference to a tensor — the forced
unwind meets a ``noexcept`` frame and the process aborts with "terminate called without an
active exception" (exit 134) after all its work is done. So at exit every live pool is stopped
and its workers are joined, for at most ``EXIT_GRACE_S`` in all (a hung call is abandoned).
"""
from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from typing import Callable, Optional

_STOP = object()

#: Seconds the interpreter waits at exit for the workers of every pool together.
EXIT_GRACE_S = 10.0


class DaemonPool:
    """Runs submitted callables on up to `max_workers` daemon threads (started on demand)."""

    def __init__(self, max_workers: int, name: str = "sglc-call") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self._name = name
        self._queue: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False
        _live_pools.add(self)

    def submit(self, fn: Callable[[], None]) -> None:
        """Run `fn()` on a worker; exceptions must be handled by `fn` itself."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the call pool is shut down")
            if self._idle == 0 and len(self._threads) < self.max_workers:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle > 0 else 0
        self._queue.put(fn)

    def _work(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is _STOP:
                return
            try:
                fn()  # type: ignore[operator]
            except Exception:  # pragma: no cover - callers handle their own errors
                pass
            # NOTE: drop the call (and what it holds: results, tensors) now, not at the next get()
            del fn
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = False, timeout: Optional[float] = None) -> None:
        """Stop the workers after the queued calls; with `wait`, join them for at most `timeout`
        seconds in all (never waits for a hung call unless asked). Safe to call again."""
        with self._lock:
            first = not self._closed
            self._closed = True
            threads = list(self._threads)
        if first:
            for _ in threads:
                self._queue.put(_STOP)
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            for thread in threads:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


# NOTE: a pool stays in this set while any of its workers runs (each holds the pool through its
# target), so pools nobody references any more are still stopped at exit.
_live_pools: "weakref.WeakSet[DaemonPool]" = weakref.WeakSet()


def stop_all_pools(grace_s: float = EXIT_GRACE_S) -> None:
    """Stop every live pool and join its workers, for at most `grace_s` seconds in all."""
    deadline = time.monotonic() + grace_s
    for pool in list(_live_pools):
        pool.shutdown(wait=True, timeout=max(0.0, deadline - time.monotonic()))


atexit.register(stop_all_pools)
