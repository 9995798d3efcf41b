"""gRPC service overhead, side by side in one process (ratios are what count; never asserted).

The same N short requests (1-2 greedy tokens each, 8 distinct prompts) go to ONE engine in its
background thread, submitted by C client threads:
  - direct: ``Engine.submit`` + ``Engine.wait`` (no network),
  - grpc:   ``Generate`` over loopback gRPC (raw stub, stream=false),
  - srt:    ``SrtBackend.generate`` over the same server.
Each mode runs --repeats times, alternating, best kept. Prints a table and writes
bench/out/grpc_load.json. Absolute times on a shared CPU box are noise; the ratio is the figure.

    python bench/bench_grpc_load.py [--requests 1000] [--clients 64] [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from sglc.executor.backends.srt import SrtBackend
from sglc.wire.backend import GenParams, Prompt
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.sampling.sampling_params import SamplingParams
from sglc_runtime.server.launch import Runtime, ServeConfig

TOPICS = ["cats", "rain", "music", "trees", "boats", "stars", "bread", "snow"]


def prompt(i: int) -> str:
    return f"Write one word about {TOPICS[i % len(TOPICS)]}:"


def run(mode: str, n: int, clients: int, rt: Runtime, stub, backend: SrtBackend) -> float:
    engine = rt.engine

    def direct(i: int) -> int:
        rid = engine.submit(prompt(i), SamplingParams(max_new_tokens=1 + i % 2, temperature=0.0))
        return len(engine.wait(rid, timeout=600).token_ids)

    def via_grpc(i: int) -> int:
        req = pb.GenerateRequest(rid=f"b{i}", prompt=pb.Prompt(text=prompt(i)),
                                 sampling=pb.SamplingParams(max_new_tokens=1 + i % 2, temperature=0.0))
        msgs = list(stub.Generate(req, timeout=600))
        return len(msgs[-1].complete.output_ids)

    def via_srt(i: int) -> int:
        return backend.generate(Prompt(prompt(i)), GenParams(max_new_tokens=1 + i % 2, temperature=0)).meta.completion_tokens

    fn = {"direct": direct, "grpc": via_grpc, "srt": via_srt}[mode]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = list(pool.map(fn, range(n)))
    elapsed = time.perf_counter() - t0
    assert len(tokens) == n and all(t >= 1 for t in tokens), f"{mode}: lost or empty answers"
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    rt = Runtime(ServeConfig(port=0, kv_slots=8192))
    channel = grpc.insecure_channel(rt.frontends[0].address)
    stub = pb_grpc.RuntimeStub(channel)
    backend = SrtBackend(rt.frontends[0].address)
    try:
        run("direct", 64, args.clients, rt, stub, backend)  # warm-up
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            for mode in ("direct", "grpc", "srt"):
                t = run(mode, args.requests, args.clients, rt, stub, backend)
                best[mode] = min(best.get(mode, t), t)
    finally:
        backend.close()
        channel.close()
        rt.stop(1.0)
    n = args.requests
    print(f"{n} requests, {args.clients} client threads, 1-2 greedy tokens each (best of {args.repeats})")
    print(f"{'mode':8} {'seconds':>8} {'req/s':>8} {'vs direct':>10}")
    for mode, t in best.items():
        print(f"{mode:8} {t:8.2f} {n / t:8.0f} {t / best['direct']:9.2f}x")
    out = Path(__file__).resolve().parent / "out" / "grpc_load.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "requests": n, "clients": args.clients, "repeats": args.repeats, "seconds": best,
        "ratio_vs_direct": {m: t / best["direct"] for m, t in best.items()},
        "machine": platform.platform(), "cpus": __import__("os").cpu_count(),
    }, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
