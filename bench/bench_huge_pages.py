"""Cold GGUF tile kernels reading the weight arena's huge pages against the same tiles in ordinary
4 KiB pages, side by side (runtime/model/native/binding/weight_arena.h says why).

Many distinct copies of one weight (more than the caches hold) are repacked by ``gguf_tiles`` (so
they live in the arena) and cloned (so the clones live in malloc's 4 KiB pages); each round runs
one row through every copy of each set, alternating. Prints microseconds a linear, the bytes it
streams per second, and how much of this process's memory the kernel gave huge pages.

    python bench/bench_huge_pages.py [--types Q4_K Q6_K] [--shape 1536 1024] [--copies 400] [--threads 2]

Run it alone on a quiet machine. No assertions.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_gguf_kernels import cold_weights_setup  # noqa: E402  (puts tests/ on the path)
from sglc_runtime.model.gguf import GGUFWeight  # noqa: E402
from sglc_runtime.model.models.gguf_linear import gguf_linear  # noqa: E402


def anon_huge_kib() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", nargs="*", default=["Q4_K", "Q6_K"])
    ap.add_argument("--shape", nargs=2, type=int, default=[1536, 1024], metavar=("OUT", "IN"))
    ap.add_argument("--copies", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    gguf_tensor = cold_weights_setup(args.threads)
    if gguf_tensor is None:
        return 1
    n, k = args.shape
    print(f"[{n} x {k}] weights, {args.copies} copies, {args.threads} threads, 1 row; us a linear (GB/s)")
    stacked = torch.ops.sglc_cpu.stacked_linear
    for name in args.types:
        raws = [gguf_tensor(name, n, k, seed=s) for s in range(4)]
        arena = [gguf_linear(GGUFWeight(f"w{i}", name, n, k, raws[i % 4]), None, torch.float32, pack=False,
                             native=True).tiled() for i in range(args.copies)]
        small = [(kind, tuple(t.clone() for t in tensors)) for kind, tensors in arena]
        nbytes = sum(t.numel() * t.element_size() for t in arena[0][1])
        x = torch.randn(1, k)
        best = {"huge pages": float("inf"), "4 KiB pages": float("inf")}
        for _ in range(args.rounds):
            for label, weights in (("huge pages", arena), ("4 KiB pages", small)):
                t0 = time.perf_counter()
                for kind, tensors in weights:
                    stacked(x, [kind], list(tensors))
                best[label] = min(best[label], (time.perf_counter() - t0) / len(weights))
        cells = [f"{label} {t * 1e6:6.1f} ({nbytes / t / 1e9:4.1f})" for label, t in best.items()]
        print(f"{name:5s} {nbytes / 1e6:5.2f} MB | " + " | ".join(cells)
              + f" | {best['4 KiB pages'] / best['huge pages']:.2f}x", flush=True)
    print(f"AnonHugePages of this process: {anon_huge_kib() / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
