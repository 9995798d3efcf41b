"""In-process prefill of one prompt at several lengths: the model's forward alone (no server, no
scheduler), best of 3 per length, so a kernel change shows without the engine's pacing around it.

    python bench/bench_prefill.py MODEL [--lengths 68 100 200 300 700] [--threads 2]

MODEL is a GGUF file (served as `sglc serve` does: its types on the native kernels) or a Hugging
Face folder (its default dtype for this CPU). For an A/B, run it once per checkout with PYTHONPATH
at that checkout. SGLC_CPU_LEVEL=avx2 holds the kernels (and torch) to AVX2. Run it alone on a
quiet machine; prints one line per length, no assertions.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglc_runtime.model.default_model import gguf_source, resolve_model_path  # noqa: E402
from sglc_runtime.model.forward_batch import ForwardBatch  # noqa: E402
from sglc_runtime.model.models import load_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--lengths", type=int, nargs="*", default=[68, 100, 200, 300, 700])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = Path(args.model)
    if path.suffix == ".gguf":
        model = load_model(resolve_model_path(path), gguf=gguf_source(path), quantization="int4")
    else:
        from sglc_runtime.engine.engine_config import EngineConfig

        model = load_model(path, dtype=EngineConfig(model=str(path), device="cpu").dtype)
    print(model.describe_kernels())
    for length in args.lengths:
        ids = [100 + j % 1000 for j in range(length)]
        best = float("inf")
        for _ in range(3):
            kv = model.new_kv_buffer(length + 8)
            t0 = time.perf_counter()
            model.forward(ForwardBatch.from_requests([ids], [list(range(length))]), kv)
            best = min(best, time.perf_counter() - t0)
        print(f"prefill {length}: {best * 1e3:.0f} ms ({length / best:.0f} tok/s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
