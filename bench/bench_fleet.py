"""Data-parallel serving: N `sglc serve` workers behind the real sglang-router, by router policy.

Workload (like RAG / multi-agent memory): G groups of P programs; the programs of a group share a
long context (~--context-words words) and differ in the question; each program makes two greedy gens
on its context. Programs are submitted interleaved across groups (g0 q0, g1 q0, ..., g0 q1, ...) by
--concurrency client threads with `--backend sglang` (sglc's HTTP backend) against the router.

For N in --workers and each policy in --policies (N = 1 runs once: the policy cannot matter) a fresh
fleet is started (fresh caches): each worker gets --threads-per-worker CPU threads (default 1: this
machine has 2 cores, so N = 2 already fills it and N = 4 oversubscribes it; say so when you quote
figures). Reported per configuration: programs/s (wall clock of the batch, not the startup) and the
total cache hit rate = sum(cached_tokens) / sum(prompt_tokens) over all workers' /metrics.

    python bench/bench_fleet.py [--workers 1,2] [--policies cache_aware,round_robin,random]
                                [--groups 4] [--per-group 6] [--context-words 300] [--max-tokens 8]
                                [--json bench/out/fleet.json]

Needs the fleet extra (pip install 'sglc[fleet]'). Ratios in one run are the figures; absolute
times on a shared CPU box are noise.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import sglc as sgl
from sglc.executor.backends.sglang_http import SGLangBackend
from sglc.executor.batch import run_graph_batch
from sglc.executor.semantics import sampling_defaults
from sglc.fleet import POLICIES, Fleet, FleetConfig, worker_metrics
from sglc.passes.pipeline import default_pipeline

WORDS = ("river stone market winter harbor lantern orchard signal copper meadow engine violet canyon "
         "ledger falcon tundra quartz ember willow beacon glacier saddle thistle marble").split()


@sgl.function
def rag(s, context, question):
    s += context + "\nQuestion: " + question + "\nAnswer:"
    s += sgl.gen("answer", stop="\n")
    s += "\nOne more detail:"
    s += sgl.gen("detail", stop="\n")


def workload(groups: int, per_group: int, context_words: int, seed: int = 0) -> list[dict]:
    """Interleaved inputs: every group's context is distinct; questions differ within a group."""
    rng = random.Random(seed)
    contexts = [f"Document {g}: " + " ".join(rng.choice(WORDS) for _ in range(context_words)) for g in range(groups)]
    return [{"context": contexts[g], "question": f"What does line {i} of document {g} say about {rng.choice(WORDS)}?"}
            for i in range(per_group) for g in range(groups)]


def compiled_graph():
    graph, _ = rag.trace_fixing_defaults()
    return default_pipeline().run(graph).graph


def run_one(n: int, policy: str, inputs: list[dict], args: argparse.Namespace, graph) -> dict:
    config = FleetConfig(num_workers=n, policy=policy, threads_per_worker=args.threads_per_worker,
                         worker_args=("--kv-slots", str(args.kv_slots)))
    with Fleet(config) as fleet:
        before = [worker_metrics(w.url) for w in fleet.workers]
        backend = SGLangBackend(fleet.url, timeout=600)
        t0 = time.perf_counter()
        results = run_graph_batch(graph, backend, inputs, concurrency=args.concurrency,
                                  sampling=sampling_defaults({"temperature": 0, "max_new_tokens": args.max_tokens,
                                                              "seed": None}))
        wall = time.perf_counter() - t0
        backend.close()
        after = [worker_metrics(w.url) for w in fleet.workers]
    failed = sum(1 for r in results if r.error is not None)
    delta = [{k: a.get(k, 0.0) - b.get(k, 0.0) for k in ("prompt_tokens", "cached_tokens", "num_requests")}
             for b, a in zip(before, after)]
    prompt = sum(d["prompt_tokens"] for d in delta)
    cached = sum(d["cached_tokens"] for d in delta)
    return {"workers": n, "policy": policy, "programs": len(inputs), "failed": failed, "wall_s": wall,
            "programs_per_s": len(inputs) / wall, "hit_rate": cached / prompt if prompt else 0.0,
            "requests_per_worker": [int(d["num_requests"]) for d in delta]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    parser.add_argument("--policies", default="cache_aware,round_robin,random")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--per-group", type=int, default=6)
    parser.add_argument("--context-words", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--kv-slots", type=int, default=16384)
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON here")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    policies = args.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            parser.error(f"unknown policy {p!r}; known: {', '.join(POLICIES)}")
    if min(counts) < 1 or min(args.groups, args.per_group, args.context_words, args.max_tokens) < 1:
        parser.error("worker counts, --groups, --per-group, --context-words and --max-tokens must be >= 1")

    inputs = workload(args.groups, args.per_group, args.context_words)
    graph = compiled_graph()
    rows = []
    for n in counts:
        for policy in (policies[:1] if n == 1 else policies):
            row = run_one(n, policy, inputs, args, graph)
            rows.append(row)
            print(f"  done: N={n} {policy}: {row['programs_per_s']:.2f} programs/s, hit rate {row['hit_rate']:.1%}",
                  flush=True)

    print(f"\nfleet: {args.groups} groups x {args.per_group} programs, ~{args.context_words}-word shared context, "
          f"{args.max_tokens} tokens per gen, {args.threads_per_worker} thread(s) per worker, "
          f"{platform.machine()} with {__import__('os').cpu_count()} cores")
    print(f"{'workers':>7}  {'policy':<12} {'programs/s':>10} {'hit rate':>9} {'failed':>6}  requests per worker")
    for r in rows:
        policy = "(any)" if r["workers"] == 1 else r["policy"]
        print(f"{r['workers']:>7}  {policy:<12} {r['programs_per_s']:>10.2f} {r['hit_rate']:>9.1%} "
              f"{r['failed']:>6}  {r['requests_per_worker']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
