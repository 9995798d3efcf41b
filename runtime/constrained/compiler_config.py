"""ConstraintCompilerConfig: how the runtime compiles request constraints, and what it may spend.

The per-compile limits are the FSM library's :class:`~sglc.fsm.CompileBudget`; the rest bounds
the compile service as a whole: worker processes, compiles in flight, worker memory, and the
bytes the compiled-grammar cache may hold. See docs/constrained_decoding.md ("Budgets").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sglc.fsm import CompileBudget


@dataclass(frozen=True, slots=True)
class ConstraintCompilerConfig:
    """Constraint compilation settings, validated in ``__post_init__``.

    - budget: limits on one compile (states, states x vocabulary, wall time, ...).
    - num_workers: compile worker processes; 0 compiles in the submitting thread instead (no
      hard timeout, no memory cap, and the compile holds the GIL: for tests and tools only).
    - max_pending: distinct compiles queued or running at once; more are refused at once with
      :class:`~.errors.ConstraintCompilerBusy` (HTTP 429 / gRPC RESOURCE_EXHAUSTED).
    - worker_memory_bytes: address-space limit of each worker (RLIMIT_AS); a compile that
      reaches it fails cleanly and the worker is replaced.
    - kill_grace_seconds: how long past ``budget.max_compile_seconds`` a worker may run before
      it is killed (its own deadline checks normally stop it first).
    - cache_bytes: bytes of compiled grammars kept (token index arrays, tables, cached masks).
    - stop_regex_cache_bytes: bytes of compiled stop_regex DFAs kept (compiled in the same pool,
      under the same budget and max_pending).
    """

    budget: CompileBudget = field(default_factory=CompileBudget)
    num_workers: int = 1
    max_pending: int = 8
    worker_memory_bytes: int = 2 * 2**30
    kill_grace_seconds: float = 2.0
    cache_bytes: int = 512 * 2**20
    stop_regex_cache_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if not isinstance(self.budget, CompileBudget):
            raise TypeError(f"ConstraintCompilerConfig.budget must be a CompileBudget, got {type(self.budget).__name__}")
        for name, low in (("num_workers", 0), ("max_pending", 1), ("worker_memory_bytes", 2**28), ("cache_bytes", 0),
                          ("stop_regex_cache_bytes", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"ConstraintCompilerConfig.{name} must be an int >= {low}, got {v!r}")
        v = self.kill_grace_seconds
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"ConstraintCompilerConfig.kill_grace_seconds must be a number >= 0, got {v!r}")
