"""Precompute on vs off (issue 28): program hints on in both, the same runtime, graphs and inputs.

With precompute on, a gen whose hint carries its continuation (the text the program appends before
its next call, as the executor knows it) has prompt + output + continuation prefilled by the
engine the moment it ends (runtime/engine/precompute.py); off, the next call prefills that text
itself once the executor has sent it. Work is the same either way; what changes is when it is
done: precompute moves the prefill of the text between two calls off the program's critical
path (the executor's turnaround) and into steps where the engine has room.

For each workload and each number of programs at once (1: latency alone; more: a busy engine),
the embedded runtime runs the batch with the KV pool at the workload's unbounded size, the two
modes alternating which runs first (bench_program_hints.run_once: a fresh engine per run, warm-up
inputs first, then all programs submitted at t=0). Reported: programs/s, p50/p99 program latency,
precomputes queued and withdrawn (the next call came first), prompt tokens computed, and how many
programs' outputs differ between the modes (greedy; information, see bench_program_hints).

    python bench/bench_precompute.py                               # native engine, 1 / 8 / 64 programs
    python bench/bench_precompute.py --programs 1,4 --workloads multi_turn --repeats 3
    python bench/bench_precompute.py --engine torch
    python bench/bench_precompute.py --workloads multi_turn_long --programs 1,4 --rtt-ms 20   # a remote executor

Writes bench/out/precompute.json (precompute_torch.json with --engine torch). One benchmark at a
time on a quiet machine (`uptime`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_program_hints import WARMUP_PROGRAMS, WORKLOADS as HINT_WORKLOADS, _cpu_flags, run_once  # noqa: E402

def multi_turn_long(n: int, seed: int) -> tuple[Any, list[dict]]:
    """multi_turn with long user turns (each follow-up carries a ~150-token paragraph): the text
    between two calls is long, so its prefill is what precompute can take off the path."""
    from bench.suite.workloads import multi_turn as w
    from bench.suite.workloads.synthetic import paragraph, rng_for

    rng = rng_for("multi_turn_long_hints", seed, "inputs")
    inputs = []
    for _ in range(n):
        turns = w.conversation_input(rng, 3)
        inputs.append({k: v + " " + paragraph(rng, 8) for k, v in turns.items()})
    return w.make_program("multi_turn_long", [12, 12, 12, 12]), inputs


WORKLOADS = {**HINT_WORKLOADS, "multi_turn_long": multi_turn_long}

#: The pool of every run (--slots): 64 programs of every workload but tool_agents fit (what
#: precompute does under memory pressure is bench_program_hints' question; its hints-on rows
#: include precompute). NOTE: ~23 KB of bf16 KV a slot for SmolLM2-135M, allocated per engine.
SLOTS = 32768


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="1,8,64", help="programs at once, comma-separated")
    ap.add_argument("--workloads", default="multi_turn,react_agent,tool_agents,generative_agents,tree_of_thought")
    ap.add_argument("--engine", choices=("native", "torch"), default="native")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1, help="alternating on/off pairs per row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtt-ms", type=float, default=0.0,
                    help="added to every generate call, half before and half after (an executor over a network)")
    ap.add_argument("--slots", type=int, default=SLOTS, help="KV slots of every run's engine")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = Path(args.out or ROOT / "bench" / "out" / ("precompute.json" if args.engine == "native" else "precompute_torch.json"))
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    counts = [int(n) for n in args.programs.split(",")]
    if args.repeats < 1 or min(counts) < 1:
        raise SystemExit("--repeats and --programs must be positive")
    if args.engine == "native":
        from sglc_runtime.engine.native_engine_config import NativeEngineConfig

        base: Any = NativeEngineConfig(threads=args.threads, max_running_requests=64)
    else:
        from sglc_runtime.engine import Engine

        base = Engine(quantization="auto", threads=args.threads)
    report: dict[str, Any] = {"engine": args.engine, "cpu": _cpu_flags(), "load_before": os.getloadavg()[0],
                              "slots": args.slots, "rtt_ms": args.rtt_ms, "workloads": {}}
    print(f"# precompute on vs off (program hints on in both), {args.engine} engine, executor round trip "
          f"+{args.rtt_ms:g} ms; cpu {report['cpu']}; load {report['load_before']:.2f}")
    print(f"{'workload':18} {'progs':>5} {'mode':4} {'prog/s':>7} {'p50 s':>7} {'p99 s':>7} {'precomp':>7} "
          f"{'withdr':>6} {'computed':>9} {'busy':>5} {'diff':>4} {'steps':>6}")
    for name in names:
        rows = []
        for n in counts:
            program, inputs = WORKLOADS[name](n + WARMUP_PROGRAMS, args.seed)
            inputs, warmup = inputs[:n], inputs[n:]
            compiled = program.compile()
            run_once(base, compiled, inputs[:1], args.slots, hints=True)  # warm-up: compile paths, caches
            p50 = {True: [], False: []}
            for rep in range(args.repeats):
                pair = {}
                for on in ((False, True) if rep % 2 == 0 else (True, False)):
                    pair[on] = run_once(base, compiled, inputs, args.slots, True, warmup, rtt_s=args.rtt_ms / 1000,
                                        precompute=on)
                differ = sum(a != b for a, b in zip(pair[True]["outputs"], pair[False]["outputs"]))
                for on in (False, True):
                    r = pair[on]
                    p50[on].append(r["p50_s"])
                    rows.append({**{k: v for k, v in r.items() if k != "outputs"}, "precompute": on, "repeat": rep,
                                 "outputs_differing_from_other_mode": differ})
                    print(f"{name:18} {n:5d} {'on' if on else 'off':4} {r['programs_per_s']:7.2f} {r['p50_s']:7.2f} "
                          f"{r['p99_s']:7.2f} {r['precomputes']:7d} {r['precomputes_withdrawn']:6d} "
                          f"{r['computed_tokens']:9d} {r['busy']:5.0%} {differ:4d} {r['steps']:6d}"
                          + (f"  errors {r['errors']}: {r['first_error']}" if r["errors"] else ""))
                on_r, off_r = pair[True], pair[False]
                print(f"{'':18} {n:5d} on/off: programs/s {on_r['programs_per_s'] / off_r['programs_per_s']:.2f}x, "
                      f"p50 {on_r['p50_s'] / off_r['p50_s']:.2f}x, p99 {on_r['p99_s'] / off_r['p99_s']:.2f}x")
                sys.stdout.flush()
            if args.repeats > 1:
                print(f"{'':18} {n:5d} {args.repeats} pairs: p50 on/off {statistics.mean(p50[True]) / statistics.mean(p50[False]):.2f}x (means)")
        report["workloads"][name] = rows
    if args.engine == "torch":
        base.shutdown()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
