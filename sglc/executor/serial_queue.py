"""SerialQueue: one eager stream's primitives, run in order on a shared pool, off the user's thread.

Tasks of one queue run one after another; tasks of different queues run concurrently (that is
how an eager program's fork branches overlap). A queue can start *held* (a fork child waits for
its parent's fork task to create its state) and is released later. The first failing task
stops the queue: later tasks are dropped, dependents (held children) fail too, and `sync()`
raises the error in the user's thread.
"""
from __future__ import annotations

import collections
import threading
from typing import Callable, Optional

from sglc.executor.pool import DaemonPool


class SerialQueue:
    """An ordered task queue drained by one pool worker at a time."""

    def __init__(self, pool: DaemonPool, held: bool = False) -> None:
        self._pool = pool
        self._tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._running = False
        self._held = held
        self._idle = threading.Event()  # NOTE: set iff nothing is pending: not held, no tasks, not running
        if not held:
            self._idle.set()
        self.error: Optional[BaseException] = None
        self._dependents: list["SerialQueue"] = []

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self.error is not None:
                return
            self._tasks.append(task)
            self._idle.clear()
            self._kick()

    def add_dependent(self, queue: "SerialQueue") -> None:
        """`queue` fails with this queue's error if this queue fails."""
        with self._lock:
            failed = self.error
            if failed is None:
                self._dependents.append(queue)
        if failed is not None:
            queue.fail(failed)

    def release(self) -> None:
        """Let a held queue start running its tasks."""
        with self._lock:
            self._held = False
            if self._tasks:
                self._kick()
            elif not self._running:
                self._idle.set()

    def fail(self, error: BaseException) -> None:
        """Stop the queue with `error` (dropping its pending tasks) and fail its dependents."""
        with self._lock:
            if self.error is not None:
                return
            self.error = error
            self._tasks.clear()
            dependents, self._dependents = self._dependents, []
            if not self._running:
                self._idle.set()
        for queue in dependents:
            queue.fail(error)

    def sync(self, timeout: Optional[float] = None) -> None:
        """Wait until every submitted task has run; raise the queue's error if it failed."""
        if not self._idle.wait(timeout):
            raise TimeoutError(f"the stream did not finish within {timeout:g} s")
        if self.error is not None:
            raise self.error

    def _kick(self) -> None:
        # NOTE: lock held by the caller.
        if not self._running and not self._held and self._tasks and self.error is None:
            self._running = True
            self._pool.submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._tasks or self.error is not None:
                    self._running = False
                    self._idle.set()
                    return
                task = self._tasks.popleft()
            try:
                task()
            except BaseException as err:  # NOTE: stored and re-raised by sync() in the user's thread
                with self._lock:
                    self._running = False
                self.fail(err)
                with self._lock:
                    self._idle.set()
                return
