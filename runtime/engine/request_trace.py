"""RequestTrace: the token sequences of the requests an engine finished while tracing was on.

``Engine.start_trace()`` returns a live trace; every request that finishes (not aborted)
appends one :class:`TracedRequest` until ``Engine.stop_trace()``. A workload's trace is what
``bench.suite.hit_rate`` needs to compare the achieved cache hit rate with the optimal one.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterator

@dataclass(frozen=True, slots=True)
class TracedRequest:
    """One finished request.

    - prompt_ids: its prompt tokens.
    - output_ids: its output tokens as the scheduler held them at the end; the KV of
      ``prompt_ids + output_ids[:-1]`` was computed and went into the cache. (When a
      jump-forward's forced text ended the request, that text is in the final output but not
      here: it never got KV.)
    - cached_tokens: its prompt tokens served from the cache at its first admission (counted
      exactly as ``EngineStats.cached_tokens``).
    - forced_tokens: output tokens it already had when first admitted (jump-forward text forced
      at submit); then its admission did not end at its last prompt token.
    """

    rid: str
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    cached_tokens: int
    forced_tokens: int = 0


class RequestTrace:
    """An append-only list of TracedRequest; safe to read from any thread while it records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[TracedRequest] = []
        self._active = True

    def record(self, item: TracedRequest) -> None:
        """Append a finished request (the engine calls this; it skips aborted requests)."""
        with self._lock:
            if self._active:
                self._requests.append(item)

    def close(self) -> None:
        """Stop recording (``Engine.stop_trace`` calls this)."""
        with self._lock:
            self._active = False

    @property
    def active(self) -> bool:
        """True until the trace is stopped."""
        return self._active

    @property
    def requests(self) -> tuple[TracedRequest, ...]:
        """A snapshot of the requests recorded so far, in finishing order."""
        with self._lock:
            return tuple(self._requests)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt_ids) for r in self.requests)

    @property
    def cached_tokens(self) -> int:
        return sum(r.cached_tokens for r in self.requests)

    def __len__(self) -> int:
        with self._lock:
            return len(self._requests)

    def __iter__(self) -> Iterator[TracedRequest]:
        return iter(self.requests)

    def __repr__(self) -> str:
        return f"RequestTrace({len(self)} requests, {'on' if self._active else 'stopped'})"


def begin(current: RequestTrace | None, engine: str) -> RequestTrace:
    """A new trace for an engine's ``start_trace`` (``current``: its trace, if one is on)."""
    if current is not None:
        raise RuntimeError(f"{engine}.start_trace: a trace is already on (call stop_trace() first)")
    return RequestTrace()


def end(current: RequestTrace | None, engine: str) -> RequestTrace:
    """``current`` stopped, for an engine's ``stop_trace``."""
    if current is None:
        raise RuntimeError(f"{engine}.stop_trace: no trace is on (call start_trace() first)")
    current.close()
    return current
