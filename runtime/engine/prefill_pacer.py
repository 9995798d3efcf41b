"""PrefillPacer: sizes prefill chunks so that a step's prefill takes about a target time.

A fixed chunk is the wrong unit on a CPU: 256 tokens of SmolLM2-135M take ~130 ms a step on a
2-core AVX512-BF16 machine and ~500 ms with its AVX2 kernels, and a 1.7B model is ten times
slower again. The engine reports each step's prefill tokens and forward seconds; the pacer keeps
a smoothed prefill rate and sets the next chunk to rate x target, in multiples of 32 within
[min_chunk, max_chunk]. The decode rows sharing a step make its rate look lower, so the chunk
errs small. Pure bookkeeping: no clock, no threads (the engine owns both).
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: Prefill steps smaller than this say little about the rate (per-step overhead dominates).
MIN_SAMPLE_TOKENS = 32
CHUNK_QUANTUM = 32


@dataclass(slots=True)
class PrefillPacer:
    """``chunk``: the prefill tokens the next step may take (starts at ``initial``)."""

    target_s: float
    initial: int
    min_chunk: int = 64
    max_chunk: int = 4096
    smoothing: float = 0.3  # weight of the newest rate in the running average
    chunk: int = field(init=False)
    rate: float | None = field(init=False, default=None)  # prefill tokens per second, smoothed
    _skipped_first: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if not self.target_s > 0:
            raise ValueError(f"PrefillPacer.target_s must be > 0, got {self.target_s!r}")
        if not 1 <= self.min_chunk <= self.max_chunk:
            raise ValueError(f"PrefillPacer needs 1 <= min_chunk <= max_chunk, got {self.min_chunk}, {self.max_chunk}")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"PrefillPacer.smoothing must be in (0, 1], got {self.smoothing!r}")
        self.chunk = min(max(self.initial, self.min_chunk), self.max_chunk)

    def observe(self, prefill_tokens: int, seconds: float) -> int:
        """One step's prefill tokens and forward time; returns the next chunk. The first real
        sample is dropped: a fresh engine's first step pays its warm-up (oneDNN reorders, the
        thread pool) and read ~10x slow."""
        if prefill_tokens < MIN_SAMPLE_TOKENS or seconds <= 0:
            return self.chunk
        if not self._skipped_first:
            self._skipped_first = True
            return self.chunk
        rate = prefill_tokens / seconds
        self.rate = rate if self.rate is None else (1 - self.smoothing) * self.rate + self.smoothing * rate
        wanted = int(self.rate * self.target_s) // CHUNK_QUANTUM * CHUNK_QUANTUM
        self.chunk = min(max(wanted, self.min_chunk), self.max_chunk)
        return self.chunk
