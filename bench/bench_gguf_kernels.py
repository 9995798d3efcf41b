"""GGUF tile kernels with cold weights: each type's linear over a sweep of distinct copies (more than the
caches hold), at 1 and 8 rows, at each CPU level this machine runs; prints microseconds a linear and
the bytes it streams (what the repacked tensor holds).

    python bench/bench_gguf_kernels.py [--types Q4_K Q6_K] [--shape 1024 1536] [--copies 40] [--threads 2]

Random blocks from tests/gguf_blocks.py (valid tensors of every type). Run it alone on a quiet machine.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sglc_runtime.model.gguf import GGUFWeight  # noqa: E402
from sglc_runtime.model.models.gguf_linear import gguf_linear  # noqa: E402
from sglc_runtime.model.native import load_cpu_ops, running_level  # noqa: E402
from sglc_runtime.model.native.capabilities import supported_levels  # noqa: E402


def cold_weights_setup(threads: int):
    """The native kernels on ``threads`` threads, and the tests' random GGUF tensor maker
    (tests/gguf_blocks.py); None (with the reason printed) where the kernels are unavailable."""
    why = load_cpu_ops()
    if why is not None:
        print(f"no native kernels: {why}")
        return None
    torch.set_num_threads(threads)
    return importlib.import_module("gguf_blocks").gguf_tensor  # NOTE: the tests' helper (tests/ on the path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", nargs="*", default=["Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q8_0"])
    ap.add_argument("--shape", nargs=2, type=int, default=[1024, 1536], metavar=("OUT", "IN"))
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    gguf_tensor = cold_weights_setup(args.threads)
    if gguf_tensor is None:
        return 1
    n, k = args.shape
    levels = [lv for lv in supported_levels() if lv != "generic"]
    print(f"[{n} x {k}] weights, {args.copies} copies, {args.threads} threads; us a linear (GB/s)")
    for name in args.types:
        raws = [gguf_tensor(name, n, k, seed=s) for s in range(4)]
        lins = [gguf_linear(GGUFWeight(f"w{i}", name, n, k, raws[i % 4]), None, torch.float32, pack=False,
                            native=True) for i in range(args.copies)]
        nbytes = sum(a.numel() * a.element_size() for a in lins[0].tiled()[1])
        cells = []
        for level in levels:
            with running_level(level):
                for rows in (1, 8):
                    x = torch.randn(rows, k)
                    best = float("inf")
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        for lin in lins:
                            lin(x)
                        best = min(best, (time.perf_counter() - t0) / len(lins))
                    cells.append(f"{level} {rows} row{'s' if rows > 1 else ''} {best * 1e6:6.1f} ({nbytes / best / 1e9:4.1f})")
        print(f"{name:5s} {nbytes / 1e6:5.2f} MB | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
