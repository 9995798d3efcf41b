"""Engine statistics: token and cache counters from the scheduler plus time accumulators.

Times come from ``time.perf_counter`` accumulators around each phase of ``Engine.step`` and,
for the radix cache, around every call the scheduler makes into it (``RadixTimer``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import wraps

# The RadixCache methods the scheduler and its policy call (entry points only: time spent in
# nested calls such as insert() inside cache_finished_req() is counted once).
_RADIX_ENTRY_POINTS = (
    "match_prefix", "peek_prefix_len", "insert", "inc_lock", "dec_lock", "evict", "evictable_size",
    "protected_size", "total_size", "cache_finished_req", "cache_unfinished_req", "reset",
)


class RadixTimer:
    """Accumulates wall time spent inside one RadixCache instance's public methods.

    Wraps the instance's bound methods (the class is untouched); a depth counter makes nested
    calls count once. ``seconds`` and ``calls`` are the totals.
    """

    __slots__ = ("seconds", "calls", "_depth")

    def __init__(self, cache: object) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0
        for name in _RADIX_ENTRY_POINTS:
            method = getattr(cache, name, None)
            if method is not None:
                setattr(cache, name, self._timed(method))

    def _timed(self, method):
        @wraps(method)
        def timed(*args, **kwargs):
            if self._depth:
                return method(*args, **kwargs)
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
                self._depth -= 1

        return timed


@dataclass(slots=True)
class EngineStats:
    """A snapshot of ``Engine.stats()``.

    Token counts: prompt_tokens / cached_tokens count each request's prompt once, at its first
    admission (cache_hit_rate = cached / prompt); completion_tokens are generated tokens.
    Pool: used slots include cached ones; cached_slots are held by the radix tree.
    Times (seconds, since start or reset_timers): schedule_s (scheduler calls, radix included),
    radix_s (radix cache calls alone), forward_s (model runner: forward, sampling, logprobs),
    process_s (detokenization, stop checks, output delivery), busy_s (inside step()).
    Programs (issue 28): hinted_tokens held for hints, hint_evictions, programs in flight;
    precomputes queued (a program's next prompt prefilled when a call ends: precompute.py),
    those withdrawn before they started (the program's next call came first), and those pending
    now (held, queued or running).
    """

    num_waiting: int
    num_running: int
    num_finished: int
    num_retractions: int
    num_steps: int
    prompt_tokens: int
    cached_tokens: int
    cache_hit_rate: float
    computed_prefill_tokens: int
    completion_tokens: int
    num_kv_slots: int
    num_used_slots: int
    cached_slots: int
    pool_usage: float
    schedule_s: float
    radix_s: float
    radix_calls: int
    forward_s: float
    process_s: float
    busy_s: float
    hinted_tokens: int = 0
    hint_evictions: int = 0
    num_programs: int = 0
    provisional_programs: int = 0
    promoted_programs: int = 0
    precomputes: int = 0
    precomputes_withdrawn: int = 0
    precomputes_pending: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class StepTimers:
    """perf_counter accumulators for the phases of a step."""

    __slots__ = ("schedule_s", "forward_s", "process_s", "busy_s")

    def __init__(self) -> None:
        self.schedule_s = self.forward_s = self.process_s = self.busy_s = 0.0
