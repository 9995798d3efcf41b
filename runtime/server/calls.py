"""The engine work one client call started, tracked until it ends and cancellable from anywhere.

- GenerateCall: one submitted Generate. Its chunks are read synchronously (``chunks()``, the gRPC
  threads) or from an event loop (``achunks()`` / ``wait_done()``, the HTTP server: no thread
  waits on generation). It counts as active until the engine produced its final chunk, whether
  or not anyone reads it, so ``num_active`` returns to 0 when the engine is done.
- ScoreCall: one Score (a ScoreJob, plus the unconditional one) run in the caller's thread.
- CallGroup: every sub-request one client call started (n choices, a prompt list, a /generate
  batch): cancelled together when the client goes away or one of them is refused.

Every call is registered with its Registry (the RuntimeService) while it runs; ``cancel`` is
idempotent and safe from any thread, and ends the call exactly once.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, AsyncIterator, Callable, Iterator, Protocol

__all__ = ["CallCancelled", "CallGroup", "GenerateCall", "Registry", "ScoreCall"]


class CallCancelled(RuntimeError):
    """The call was cancelled before it finished (the message says by whom)."""


class Registry(Protocol):
    """What a call needs from the service that tracks it."""

    engine: Any

    def _mark_ended(self, call: Any) -> bool: ...

    def _end_call(self, call: Any, output: Any) -> None: ...

    def _count(self, name: str | None, n: int = 1) -> None: ...


class GenerateCall:
    """One submitted Generate: read its chunks (the last has finished=True), or cancel it."""

    def __init__(self, service: Registry, rid: str, warnings: list[str]) -> None:
        self.service = service
        self.rid = rid
        self.warnings = warnings
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Event()
        self._wake: Callable[[], None] | None = None  # set while an event loop waits on this call
        self._wake_at_end_only = False  # the waiter wants the end, not each chunk (wait_done)
        self._ended = False  # NOTE: guarded by the registry's lock; counters change exactly once

    def _deliver(self, chunk: Any) -> None:  # engine thread, engine lock held: keep it short
        self._queue.put(chunk)
        if chunk.finished:
            self.service._end_call(self, chunk.output)
            self._done.set()  # NOTE: before reading _wake, which a waiter sets before checking _done
        wake = self._wake
        if wake is not None and (chunk.finished or not self._wake_at_end_only):
            wake()

    @property
    def done(self) -> bool:
        """True once the engine produced the final chunk (it may still be unread)."""
        return self._done.is_set()

    def chunks(self, is_active: Callable[[], bool] = lambda: True, poll_s: float = 0.25) -> Iterator[Any]:
        """The request's StreamChunks until the finished one (blocking). When `is_active()` turns
        False (the client went away) the request is cancelled and iteration stops."""
        try:
            while True:
                try:
                    chunk = self._queue.get(timeout=poll_s)
                except queue.Empty:
                    if not is_active():
                        self.cancel("the client went away")
                        return
                    continue
                yield chunk
                if chunk.finished:
                    return
        finally:
            self.cancel("the consumer stopped reading")  # no-op when already finished

    async def achunks(self) -> AsyncIterator[Any]:
        """The same chunks on an event loop: waits without a thread (the engine thread wakes it)."""
        ready = self._listen()
        try:
            while True:
                ready.clear()
                try:
                    chunk = self._queue.get_nowait()
                except queue.Empty:
                    await ready.wait()
                    continue
                yield chunk
                if chunk.finished:
                    return
        finally:
            self._wake = None
            self.cancel("the consumer stopped reading")

    async def wait_done(self) -> None:
        """Until the engine produced the final chunk (consumes nothing; the chunks stay queued).
        Only the final chunk wakes the loop: a wake-up per token took the GIL from the engine
        thread once per decode step."""
        self._wake_at_end_only = True
        ready = self._listen()
        try:
            while not self._done.is_set():
                await ready.wait()
                ready.clear()
        finally:
            self._wake = None

    def final_chunk(self) -> Any:
        """The finished chunk, whose ``output`` holds the whole answer (call after ``wait_done``)."""
        assert self.done, f"GenerateCall {self.rid}: final_chunk() before the call is done"
        while True:
            chunk = self._queue.get_nowait()
            if chunk.finished:
                return chunk

    def _listen(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        self._wake = wake
        ready.set()  # NOTE: check the queue once before the first wait (chunks may be there already)
        return ready

    def cancel(self, reason: str = "cancelled by the client") -> bool:
        """Abort the request if it is still running; True when this call aborted it."""
        if not self.service._mark_ended(self):
            return False
        aborted = self.service.engine.abort(self.rid, reason)
        self.service._count("num_cancelled" if aborted else None)
        return aborted


class ScoreCall:
    """One Score in flight: ``run(fn)`` in the caller's thread; ``cancel`` from any thread aborts
    the engine work (the ScoreJob) it is waiting on."""

    def __init__(self, service: Registry, rid: str) -> None:
        self.service = service
        self.rid = rid
        self._lock = threading.Lock()
        self._job: Any = None
        self._cancelled: str | None = None
        self._finished = False  # finish() ran: nothing left to cancel
        self._ended = False

    def run(self, job: Any) -> Any:
        """``job.results()``, unless the call was cancelled (CallCancelled)."""
        with self._lock:
            if self._cancelled is not None:
                raise CallCancelled(self._cancelled)
            self._job = job
        from sglc_runtime.engine.score_job import ScoreAborted

        try:
            return job.results()
        except ScoreAborted as err:
            raise CallCancelled(self._cancelled or str(err)) from None
        finally:
            with self._lock:
                self._job = None

    def finish(self) -> None:
        """The caller is done with the call (run() returned or raised): it stops being active."""
        with self._lock:
            self._finished = True
        self.service._mark_ended(self)

    def cancel(self, reason: str = "cancelled by the client") -> bool:
        """Abort the engine work (any thread); True when this call cancelled it. The call stays
        active until ``finish()``, i.e. until run() has waited out the aborted requests, so a
        server reporting no active call holds no output of it."""
        with self._lock:
            if self._cancelled is not None or self._finished:
                return False
            self._cancelled = reason
            job = self._job
        if job is not None:
            job.abort(reason)
        self.service._count("num_cancelled")
        return True


class CallGroup:
    """Every engine request one client call started; ``cancel`` ends all that still run."""

    def __init__(self) -> None:
        self.calls: list[GenerateCall] = []

    def submit_all(self, submits: list[Callable[[], GenerateCall]],
                   reason: str = "another request of the same call was refused") -> list[GenerateCall]:
        """Run every submit in order; if one raises, cancel the ones already submitted, re-raise."""
        try:
            for submit in submits:
                self.calls.append(submit())
        except BaseException:
            self.cancel(reason)
            raise
        return self.calls

    def cancel(self, reason: str) -> int:
        return sum(call.cancel(reason) for call in self.calls)

    @property
    def num_running(self) -> int:
        return sum(not call.done for call in self.calls)

    async def wait_done(self) -> None:
        for call in self.calls:
            await call.wait_done()
