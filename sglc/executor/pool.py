"""A small pool of daemon worker threads for backend calls.

Unlike concurrent.futures.ThreadPoolExecutor, its threads never block interpreter exit: a
call abandoned after a program timeout (a backend that stopped answering) must not keep
`sglc run` alive once it has reported the failure.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Optional

_STOP = object()


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
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = False, timeout: Optional[float] = None) -> None:
        """Stop the workers after the queued calls (never waits for a hung call unless asked)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(_STOP)
        if wait:
            for thread in threads:
                thread.join(timeout)
