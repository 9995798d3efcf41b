"""Measuring one workload instance on one system: throughput, latency alone, cache hit rates.

For an engine system (sglc and its feature-off variants), :func:`measure`

1. compiles the program for the system (bench.suite.systems.compile_graph);
2. builds a fresh Engine sharing the base engine's loaded weights (empty cache, the system's
   settings) and an EngineBackend over it;
3. runs the warm-up input (untimed), then flushes the cache (retrying until the engine is idle);
4. times the batch: every input submitted at once (concurrency = number of inputs), greedy
   decoding with eos ignored; the engine's stats before/after give the achieved hit rate and
   the token/step counts, the request trace gives the optimal hit rate (Theorem 3.1);
5. for systems that measure latency (sglc), times each latency input alone (one program,
   nothing else running), each after a cache flush: latency is a cold program's wall time
   (only its own intra-program reuse helps);
6. shuts the engine down.

The HF baseline runs on one shared HFPerCallBackend (loaded once). It makes one model call at a
time and keeps nothing between calls, so a batch is exactly its programs run one after another:
it times the first ``hf_max_programs`` inputs one at a time, and those runs give both its
throughput (programs / total seconds) and its latency alone (mean seconds per program). This keeps
the slowest system from dominating the quick report; it has no cache (hit rate 0, no trace).

Every program's output variables get a fingerprint (a short hash), so the report can count the
programs whose outputs agree with sglc all on. Nothing here asserts on timings or agreement.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from bench.suite.systems import ENGINE, HF, System, compile_graph

#: Sampling for every call of every system: greedy, eos ignored (same model work everywhere).
SAMPLING: dict[str, Any] = {"temperature": 0.0, "ignore_eos": True}
#: Errors kept per measurement (the count is kept in full).
MAX_ERRORS = 3
#: Seconds to wait for the engine to become idle so its cache can be flushed.
FLUSH_TIMEOUT_S = 60.0


@dataclass
class Measurement:
    """One workload on one system. Rates are fractions in [0, 1]; None where not applicable."""

    workload: str
    system: str
    programs: int
    wall_s: float
    programs_per_s: float
    latency_s: Optional[float]
    latency_runs_s: list[float]
    hit_rate: Optional[float]          # achieved: cached / prompt tokens over the timed batch
    optimal_hit_rate: Optional[float]  # Theorem 3.1 bound for the timed batch's requests
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens_computed: int
    completion_tokens: int
    engine_steps: Optional[int]
    requests: Optional[int]            # model requests in the timed batch (engine trace / HF calls)
    num_errors: int                    # failed programs of the timed batch and of the latency runs
    errors: list[str]
    fingerprints: list[Optional[str]]  # per program, input order; None for a failed program
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fingerprint(variables: dict[str, Any]) -> str:
    """A short stable hash of a program's output variables (order of keys does not matter)."""
    text = json.dumps(variables, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


class SystemContext:
    """What measurements share: the base engine's weights and the HF baseline, each loaded once."""

    def __init__(self, dtype: str = "float32", hf_max_programs: Optional[int] = None) -> None:
        self.dtype = dtype
        #: HF times this many programs (the head of the timed inputs); None = all of them.
        self.hf_max_programs = hf_max_programs
        self._base: Any = None
        self._hf: Any = None

    def base_engine(self) -> Any:
        """The engine whose weights every system's fresh engine shares (loaded on first use)."""
        if self._base is None:
            from sglc_runtime.engine import Engine

            self._base = Engine(dtype=self.dtype)
        return self._base

    def hf_backend(self) -> Any:
        """The HF per-call baseline (loaded on first use)."""
        if self._hf is None:
            try:
                from bench.suite.hf_backend import HFPerCallBackend
            except ImportError as err:
                raise RuntimeError(f"the hf-per-call system needs bench.suite.hf_backend: {err}") from err
            self._hf = HFPerCallBackend(dtype=self.dtype)
        return self._hf

    def close(self) -> None:
        if self._base is not None:
            self._base.shutdown()
            self._base = None
        if self._hf is not None:
            close = getattr(self._hf, "close", None)
            if close is not None:
                close()
            self._hf = None


def measure(instance: Any, system: System, context: SystemContext, *, workload: str = "") -> Measurement:
    """Measure `instance` (a WorkloadInstance) on `system`; see the module docstring for the steps."""
    if not instance.inputs:
        raise ValueError(f"workload {workload!r} has no timed inputs")
    graph = compile_graph(instance.program, system)
    if system.kind == ENGINE:
        return _measure_engine(graph, instance, system, context, workload)
    if system.kind == HF:
        return _measure_hf(graph, instance, system, context, workload)
    raise ValueError(f"system {system.name!r} has unknown kind {system.kind!r}")


def _run(graph: Any, backend: Any, inputs: list[dict[str, Any]], concurrency: int, max_parallel: int) -> list[Any]:
    from sglc.executor.batch import run_graph_batch

    return run_graph_batch(graph, backend, inputs, concurrency=concurrency, max_parallel=max_parallel,
                           sampling=SAMPLING)


def _timed_run(graph: Any, backend: Any, inputs: list[dict[str, Any]], concurrency: int,
               max_parallel: int) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    results = _run(graph, backend, inputs, concurrency, max_parallel)
    return time.perf_counter() - t0, results


def _flush(engine: Any) -> None:
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while not engine.flush_cache():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the engine's cache could not be flushed within {FLUSH_TIMEOUT_S:.0f} s "
                               "(requests still running)")
        time.sleep(0.01)


def _check_engine_options(system: System) -> None:
    from sglc_runtime.engine.engine_config import EngineConfig

    known = {f.name for f in dataclasses.fields(EngineConfig)}
    missing = [k for k in system.engine_options if k not in known]
    if missing:
        raise RuntimeError(f"system {system.name!r} needs EngineConfig field(s) {', '.join(missing)}, "
                           "which this runtime does not have")


def _measure_engine(graph: Any, instance: Any, system: System, context: SystemContext, workload: str) -> Measurement:
    from bench.suite.hit_rate import achieved_hit_rate, optimal_hit_rate
    from sglc_runtime.server.engine_backend import EngineBackend
    from sglc_runtime.engine import Engine

    _check_engine_options(system)
    base = context.base_engine()
    engine = Engine(share_model_with=base, dtype=base.config.dtype, **dict(system.engine_options))
    if not hasattr(engine, "start_trace"):
        engine.shutdown()
        raise RuntimeError("Engine.start_trace() is missing: the optimal hit rate needs the request trace")
    backend = EngineBackend(engine)
    inputs = list(instance.inputs)
    try:
        _run(graph, backend, [instance.warmup], 1, system.max_parallel)
        _flush(engine)
        before, jumps_before = engine.stats(), dict(engine.jump_counts)
        engine.start_trace()
        try:
            wall, results = _timed_run(graph, backend, inputs, len(inputs), system.max_parallel)
        finally:
            traced = list(engine.stop_trace().requests)
        after, jumps_after = engine.stats(), dict(engine.jump_counts)
        latency_runs, latency_results = [], []
        for args in instance.latency_inputs if system.measures_latency else []:
            _flush(engine)
            seconds, alone = _timed_run(graph, backend, [args], 1, system.max_parallel)
            latency_runs.append(seconds)
            latency_results += alone
    finally:
        backend.close()
        engine.shutdown()
    prompt = after.prompt_tokens - before.prompt_tokens
    cached = after.cached_tokens - before.cached_tokens
    bound = optimal_hit_rate(traced)
    jumps = {k: jumps_after.get(k, 0) - jumps_before.get(k, 0) for k in jumps_after}
    return _measurement(
        workload, system, results, wall, latency_runs, latency_results,
        hit_rate=round(cached / prompt, 6) if prompt else 0.0,
        optimal_hit_rate=round(bound.optimal_hit_rate, 6),
        prompt_tokens=prompt, cached_tokens=cached,
        prefill_tokens_computed=after.computed_prefill_tokens - before.computed_prefill_tokens,
        completion_tokens=after.completion_tokens - before.completion_tokens,
        engine_steps=after.num_steps - before.num_steps, requests=len(traced),
        extra={"jump_forward": jumps, "trace_achieved_hit_rate": round(achieved_hit_rate(traced), 6),
               "trace_prompt_tokens": bound.prompt_tokens,
               "trace_min_computed_tokens": bound.min_computed_tokens},
    )


def _measure_hf(graph: Any, instance: Any, system: System, context: SystemContext, workload: str) -> Measurement:
    backend = context.hf_backend()
    inputs = list(instance.inputs)[: context.hf_max_programs or None]
    _run(graph, backend, [instance.warmup], 1, system.max_parallel)
    before = dict(backend.metrics())
    # NOTE: one program at a time is both how this baseline runs a batch and "a program alone".
    runs, results = [], []
    for args in inputs:
        seconds, alone = _timed_run(graph, backend, [args], 1, system.max_parallel)
        runs.append(seconds)
        results += [dataclasses.replace(r, index=len(results)) for r in alone]
    after = dict(backend.metrics())
    delta = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], (int, float))}
    prompt = int(delta.get("prompt_tokens", 0))
    return _measurement(
        workload, system, results, sum(runs), runs if system.measures_latency else [], [], hit_rate=0.0,
        optimal_hit_rate=None, prompt_tokens=prompt, cached_tokens=0, prefill_tokens_computed=prompt,
        completion_tokens=int(delta.get("completion_tokens", 0)), engine_steps=None,
        requests=int(delta["calls"]) if "calls" in delta else None,
        extra={"hf_metrics": delta, "timed_programs_of": len(instance.inputs)},
    )


def _measurement(workload: str, system: System, results: list[Any], wall: float, latency_runs: list[float],
                 latency_results: list[Any], **counts: Any) -> Measurement:
    # NOTE: a failed latency run makes its time meaningless, so it counts as an error too.
    errors = ([f"program {r.index}: {r.error}" for r in results if r.error]
              + [f"latency run {k}: {r.error}" for k, r in enumerate(latency_results) if r.error])
    return Measurement(
        workload=workload, system=system.name, programs=len(results), wall_s=round(wall, 4),
        programs_per_s=round(len(results) / wall, 5) if wall > 0 else 0.0,
        latency_s=round(sum(latency_runs) / len(latency_runs), 4) if latency_runs else None,
        latency_runs_s=[round(t, 4) for t in latency_runs],
        num_errors=len(errors), errors=errors[:MAX_ERRORS],
        fingerprints=[None if r.error else fingerprint(r.variables) for r in results],
        **counts,
    )
