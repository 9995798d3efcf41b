"""Program hints on vs off (issue 28): the same runtime, graphs and inputs, side by side.

For each workload, N programs run at once (all submitted together) on the embedded runtime,
with the KV pool sized to 100%, 50% and 25% of the workload's working set, once with program
hints (`run_batch(program_hints=True)`: retention by expected next use, programs admitted as
units) and once without (LRU eviction, per-call admission): the two modes alternate which runs
first per pool size. Reported per run: programs/s, p50/p99 program latency (all submitted at
t=0, so latency = completion time), prompt tokens computed, tokens recomputed (computed minus
the least any schedule must compute, from the request trace: bench.suite.hit_rate), cache hit
rate, and how many programs' outputs differ from the other mode's (greedy; see the NOTE in main:
concurrent runs are not batch-invariant, so this is information, not the equality test).

Warm-up: each run's fresh engine first runs 2 other inputs of the workload in the same mode
(untimed; with hints the runtime learns the program's footprint from them), then flushes.

Working set: the most tokens the batch's programs hold at once, measured by a first, untimed
run with hints on an unbounded pool: sampled every 20 ms, the sum over the programs in flight of
the longest text each has asked for so far (less the prefix it shared when it started), plus the
largest shared prefix once (ProgramTable.held_tokens). Programs that ended hold nothing, so this
is less than all the distinct tokens of the batch (recorded too, as "distinct_tokens").

    python bench/bench_program_hints.py                      # all workloads, 64 programs
    python bench/bench_program_hints.py --programs 128 --workloads tool_agents,react_agent
    python bench/bench_program_hints.py --quick              # 16 programs, 2 workloads (minutes)
    python bench/bench_program_hints.py --workloads multi_turn --fractions 1 --repeats 3   # noisy rows
    python bench/bench_program_hints.py --engine native       # the torch-free engine (GGUF weights)
    python bench/bench_program_hints.py --policy fcfs         # the torch engine against LRU + FCFS

Engines: ``torch`` (default: the embedded Engine, int4 weights of the default model, one loaded
model shared by every run; ``--policy`` its queue order for what hints do not order: ``lpm``, its
default, or ``fcfs``, the issue's baseline) or ``native`` (``NativeEngine``, the default model's
GGUF file as shipped, loaded per run outside the timed part; it queues in arrival order).

Writes bench/out/program_hints.json (program_hints_native.json with ``--engine native``,
program_hints_fcfs.json with ``--policy fcfs``). One benchmark at a time on a quiet machine (`uptime`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.suite.hit_rate import optimal_hit_rate  # noqa: E402

FRACTIONS = (1.0, 0.5, 0.25)
#: Programs run (untimed) on each fresh engine before the timed batch, in the same mode.
WARMUP_PROGRAMS = 2
#: The "unbounded" pool of the working-set run (tokens; ~3 GB of KV for SmolLM2-135M).
UNBOUNDED_SLOTS = 131072


# --- workloads: (program, inputs) at a chosen number of programs --------------------------------
def react_agent(n: int, seed: int) -> tuple[Any, list[dict]]:
    from bench.suite.workloads import react_agent as w
    from bench.suite.workloads.synthetic import rng_for

    shots = rng_for(w.NAME, seed, "examples")
    prefix = w.INSTRUCTION + "".join(w.example_text(*w.make_trace(shots)) for _ in range(2))
    rng = rng_for(w.NAME, seed, "inputs")
    return w.make_program(prefix, 3, 12), [w.trace_input(rng) for _ in range(n)]


def multi_turn(n: int, seed: int) -> tuple[Any, list[dict]]:
    from bench.suite.workloads import multi_turn as w
    from bench.suite.workloads.synthetic import rng_for

    rng = rng_for("multi_turn_hints", seed, "inputs")
    return w.make_program("multi_turn", [12, 12, 12, 12]), [w.conversation_input(rng, 3) for _ in range(n)]


def generative_agents(n: int, seed: int) -> tuple[Any, list[dict]]:
    from bench.suite.workloads import generative_agents as w
    from bench.suite.workloads.synthetic import rng_for

    inputs: list[dict] = []
    for a in range(max(1, n // 8)):
        inputs += w.agent_inputs(rng_for(w.NAME, seed, f"agent{a}"), min(8, n - len(inputs)), 10)
    return w.make_program(10), inputs[:n]


def tree_of_thought(n: int, seed: int) -> tuple[Any, list[dict]]:
    from bench.suite.workloads import tree_of_thought as w
    from bench.suite.workloads.synthetic import rng_for, word_problem

    rng = rng_for(w.NAME, seed, "inputs")
    return w.make_program(2, 2, 8, 8, 4), [{"question": word_problem(rng)[0]} for _ in range(n)]


TOOL_DELAY_S = 2.0  # mean seconds a tool call takes (--tool-delay)


def tool_agents(n: int, seed: int) -> tuple[Any, list[dict]]:
    from bench.suite.workloads import tool_agents as w

    return w.make_program(3, 12, TOOL_DELAY_S), w.inputs(seed, n)


WORKLOADS: dict[str, Callable[[int, int], tuple[Any, list[dict]]]] = {
    "tool_agents": tool_agents, "react_agent": react_agent, "multi_turn": multi_turn,
    "generative_agents": generative_agents, "tree_of_thought": tree_of_thought,
}


# --- one run --------------------------------------------------------------------------------------
def new_engine(base: Any, slots: int, **overrides: Any) -> Any:
    """A fresh engine of ``base``'s kind with ``slots`` KV slots (``base``: a torch Engine whose
    model and queue policy it shares, or a NativeEngineConfig); ``overrides``: other config fields."""
    from sglc_runtime.engine import Engine
    from sglc_runtime.engine.native_engine import NativeEngine
    from sglc_runtime.engine.native_engine_config import NativeEngineConfig

    if isinstance(base, NativeEngineConfig):
        return NativeEngine(dataclasses.replace(base, num_kv_slots=slots, **overrides))
    return Engine(share_model_with=base, dtype=base.config.dtype, quantization=base.config.quantization,
                  schedule_policy=base.config.schedule_policy, num_kv_slots=slots, max_running_requests=64,
                  **overrides)


def program_table(engine: Any) -> Any:
    """The engine's ProgramTable (the engine thread's state: read it under ``engine._lock``)."""
    return engine.programs if hasattr(engine, "programs") else engine.scheduler.programs


def delayed_backend(engine: Any, rtt_s: float) -> Any:
    """An EngineBackend whose generate calls take ``rtt_s`` more, half before the engine sees the
    call and half after it answers: an executor that reaches the runtime over a network (what
    the engine does meanwhile is the point; 0: the plain embedded backend)."""
    from sglc_runtime.server.engine_backend import EngineBackend

    if rtt_s <= 0:
        return EngineBackend(engine)

    class Delayed(EngineBackend):
        def generate(self, prompt, params):  # noqa: ANN001, ANN202
            time.sleep(rtt_s / 2)
            result = super().generate(prompt, params)
            time.sleep(rtt_s / 2)
            return result

    return Delayed(engine)


def run_once(base: Any, compiled: Any, inputs: list[dict], slots: int, hints: bool,
             warmup: list[dict] | None = None, watch: Callable[[Any], Any] | None = None,
             rtt_s: float = 0.0, **overrides: Any) -> dict[str, Any]:
    """A fresh engine with ``slots`` KV slots (``overrides``: other config fields): ``warmup``
    (untimed, same mode; a runtime that has served the program before has learned its
    footprint), a flush, then every input at once. ``rtt_s``: delayed_backend."""
    engine = new_engine(base, slots, **overrides)
    backend = delayed_backend(engine, rtt_s)
    try:
        for args in warmup or []:
            compiled.run(backend=backend, temperature=0.0, program_hints=hints, **args)
        while not engine.flush_cache():
            time.sleep(0.01)
        if hasattr(engine, "wait_settled"):  # NOTE: the native model's move into huge pages, not timed
            engine.wait_settled()
        before = engine.stats()
        engine.start_trace()
        stop_watch = watch(engine) if watch is not None else None
        done: list[float] = [0.0] * len(inputs)
        outputs: list[str] = [""] * len(inputs)
        errors: list[str] = []

        def one(i: int) -> None:  # NOTE: a thread per program: its latency is its own completion time
            try:
                state = compiled.run(backend=backend, temperature=0.0, program_hints=hints, **inputs[i])
                outputs[i] = json.dumps(state.variables(), sort_keys=True)
            except Exception as err:  # noqa: BLE001  (counted and shown, the run goes on)
                errors.append(f"{type(err).__name__}: {err}")
            done[i] = time.perf_counter() - t0

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(inputs))]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if stop_watch is not None:
            stop_watch()
        traced = list(engine.stop_trace().requests)
        after = engine.stats()
    finally:
        backend.close()
        engine.shutdown()
    bound = optimal_hit_rate(traced)
    computed = after.computed_prefill_tokens - before.computed_prefill_tokens
    prompt = after.prompt_tokens - before.prompt_tokens
    cached = after.cached_tokens - before.cached_tokens
    done.sort()
    return {
        "hints": hints, "slots": slots, "programs": len(inputs), "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 3), "programs_per_s": round(len(inputs) / wall, 4),
        "p50_s": round(statistics.median(done), 3), "p99_s": round(done[min(len(done) - 1, int(0.99 * len(done)))], 3),
        "prompt_tokens": prompt, "computed_tokens": computed,
        "recomputed_tokens": max(0, computed - bound.min_computed_tokens),
        "min_computed_tokens": bound.min_computed_tokens,
        "completion_tokens": after.completion_tokens - before.completion_tokens,
        "hit_rate": round(cached / prompt, 4) if prompt else 0.0,
        "retractions": after.num_retractions - before.num_retractions,
        "hint_evictions": after.hint_evictions - before.hint_evictions,
        "provisional_programs": after.provisional_programs - before.provisional_programs,
        "promoted_programs": after.promoted_programs - before.promoted_programs,
        "busy": round((after.busy_s - before.busy_s) / wall, 3),  # NOTE: share of the wall the engine was stepping
        "steps": after.num_steps - before.num_steps,
        "precomputes": after.precomputes - before.precomputes,
        "precomputes_withdrawn": after.precomputes_withdrawn - before.precomputes_withdrawn,
        "outputs": outputs,
    }


def working_set(base: Any, compiled: Any, inputs: list[dict], warmup: list[dict]) -> tuple[int, int]:
    """(peak tokens held by programs in flight, distinct tokens of the batch) with an unbounded
    pool (see the module docstring)."""
    peak = [0]

    def watch(engine: Any) -> Callable[[], None]:
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                with engine._lock:  # NOTE: the scheduler's state is the engine thread's
                    peak[0] = max(peak[0], program_table(engine).held_tokens())
        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        return lambda: (done.set(), thread.join())

    r = run_once(base, compiled, inputs, UNBOUNDED_SLOTS, hints=True, warmup=warmup, watch=watch)
    if r["errors"]:
        raise RuntimeError(f"the unbounded run failed: {r['first_error']}")
    distinct = r["min_computed_tokens"] + r["completion_tokens"]
    if distinct > UNBOUNDED_SLOTS * 0.9:
        raise RuntimeError(f"the batch's {distinct} tokens come too close to the 'unbounded' pool of {UNBOUNDED_SLOTS}")
    return peak[0], distinct


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=64)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--engine", choices=("torch", "native"), default="torch")
    ap.add_argument("--policy", choices=("lpm", "fcfs"), default="lpm",
                    help="the torch engine's queue order for calls hints do not order (the native engine's is arrival order)")
    ap.add_argument("--repeats", type=int, default=1, help="alternating on/off pairs per pool size")
    ap.add_argument("--unbounded-slots", type=int, default=UNBOUNDED_SLOTS,
                    help="the working-set run's pool (tokens; raise it for 128+ tool agents)")
    ap.add_argument("--tool-delay", type=float, default=TOOL_DELAY_S, help="tool_agents: mean tool seconds")
    ap.add_argument("--quick", action="store_true", help="16 programs, tool_agents and react_agent")
    ap.add_argument("--out", default=None, help="default bench/out/program_hints.json (_native.json: --engine native; _fcfs.json: --policy fcfs)")
    args = ap.parse_args()
    if args.out is None:
        suffix = "_native" if args.engine == "native" else "_fcfs" if args.policy == "fcfs" else ""
        args.out = str(ROOT / "bench" / "out" / f"program_hints{suffix}.json")
    if args.quick:
        args.programs, args.workloads = 16, "tool_agents,react_agent"
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    fractions = [float(f) for f in args.fractions.split(",")]
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    globals()["TOOL_DELAY_S"] = args.tool_delay  # NOTE: read by tool_agents() when the workload is built
    globals()["UNBOUNDED_SLOTS"] = args.unbounded_slots  # NOTE: read by working_set() and the warm-up run

    if args.engine == "native":
        from sglc_runtime.engine.native_engine_config import NativeEngineConfig

        base: Any = NativeEngineConfig(threads=args.threads, max_running_requests=64)
    else:
        from sglc_runtime.engine import Engine

        base = Engine(quantization="auto", threads=args.threads, schedule_policy=args.policy)
    report: dict[str, Any] = {"engine": args.engine, "policy": args.policy if args.engine == "torch" else "fcfs",
                              "programs": args.programs, "tool_delay_s": args.tool_delay, "cpu": _cpu_flags(), "load_before": os.getloadavg()[0],
                              "workloads": {}}
    print(f"# program hints on vs off, {args.engine} engine ({report['policy']}): {args.programs} programs at once; cpu {report['cpu']}; "
          f"load {report['load_before']:.2f}")
    print(f"{'workload':18} {'pool':>5} {'slots':>6} {'mode':4} {'prog/s':>7} {'p50 s':>7} {'p99 s':>7} "
          f"{'computed':>9} {'recomp':>8} {'hit':>5} {'busy':>5} {'steps':>6} {'diff':>4}")
    for name in names:
        program, inputs = WORKLOADS[name](args.programs + WARMUP_PROGRAMS, args.seed)
        inputs, warmup = inputs[:args.programs], inputs[args.programs:]
        compiled = program.compile()
        run_once(base, compiled, inputs[:1], UNBOUNDED_SLOTS, hints=True)  # warm-up: compile paths, caches
        ws, distinct = working_set(base, compiled, inputs, warmup)
        print(f"{name}: working set {ws} tokens (peak held by programs in flight); {distinct} distinct tokens")
        rows = []
        for k, frac in enumerate(fractions):
            slots = max(int(ws * frac), 1024)
            rates: dict[bool, list[float]] = {False: [], True: []}
            for rep in range(args.repeats):
                pair = {}
                for hints in ((False, True) if (k + rep) % 2 == 0 else (True, False)):
                    pair[hints] = run_once(base, compiled, inputs, slots, hints, warmup)
                # NOTE: concurrent runs are not batch-invariant (hints off twice can differ in a few
                # programs' greedy tokens); tests/test_program_hints_outputs.py checks equality one
                # program at a time. This count is for information.
                differ = sum(a != b for a, b in zip(pair[True]["outputs"], pair[False]["outputs"]))
                for hints in (False, True):
                    r = pair[hints]
                    r["outputs_differing_from_other_mode"] = differ
                    r["fraction"] = frac
                    r["repeat"] = rep
                    rates[hints].append(r["programs_per_s"])
                    rows.append({k2: v for k2, v in r.items() if k2 != "outputs"})
                    print(f"{name:18} {frac:5.0%} {slots:6d} {'on' if hints else 'off':4} {r['programs_per_s']:7.2f} "
                          f"{r['p50_s']:7.2f} {r['p99_s']:7.2f} {r['computed_tokens']:9d} {r['recomputed_tokens']:8d} "
                          f"{r['hit_rate']:5.2f} {r['busy']:5.0%} {r['steps']:6d} {differ:4d}" + (f"  errors {r['errors']}" if r["errors"] else ""))
                on, off = pair[True], pair[False]
                print(f"{'':18} {frac:5.0%} ratio on/off: programs/s {on['programs_per_s'] / off['programs_per_s']:.2f}x, "
                      f"p99 {on['p99_s'] / off['p99_s']:.2f}x, recomputed {on['recomputed_tokens']} vs {off['recomputed_tokens']}")
                sys.stdout.flush()
            if args.repeats > 1:
                print(f"{'':18} {frac:5.0%} {args.repeats} pairs: programs/s on/off "
                      f"{statistics.mean(rates[True]) / statistics.mean(rates[False]):.2f}x (means)")
        report["workloads"][name] = {"working_set_tokens": ws, "distinct_tokens": distinct, "runs": rows}
    if args.engine == "torch":
        base.shutdown()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(f for f in line.split(":", 1)[1].split() if f.startswith("avx512") or f in ("avx2", "amx_tile"))
            break
    return " ".join(sorted(flags))


if __name__ == "__main__":
    main()
