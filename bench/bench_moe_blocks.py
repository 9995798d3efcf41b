"""A GGUF mixture-of-experts model with its blocks' routing and experts as native calls
(``sglc_cpu.moe_route`` / ``moe_experts``) against the Python roads of models/moe.py, in one process:
the same engine, ``SparseMoE.native`` switched on and off, alternating runs; prints tok/s and the ratio
of the means.

    python bench/bench_moe_blocks.py bench/out/family_models/qwen3moe-Q4_K_M.gguf [--streams 1 8]
        [--tokens 96] [--repeats 3] [--threads 2]

(bench/family_models.py builds that file.) Run it alone on a quiet machine.
"""
from __future__ import annotations

import argparse
import gc
import time

import torch

from sglc_runtime.engine.engine import Engine
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.model.models.moe import SparseMoE
from sglc_runtime.sampling.sampling_params import SamplingParams


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--streams", nargs="*", type=int, default=[1, 8])
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = Engine(EngineConfig(model=args.model, num_kv_slots=4096, quantization="auto"))
    blocks = [o for o in gc.get_objects() if type(o) is SparseMoE]
    native = [b.native for b in blocks]
    if not blocks or any(n is None for n in native):
        print(f"{len(blocks)} MoE blocks, {sum(n is not None for n in native)} with native experts: nothing to compare")
        return 1
    params = SamplingParams(max_new_tokens=args.tokens, temperature=0, ignore_eos=True)

    def run(on: bool, streams: int) -> float:
        for block, plan in zip(blocks, native):
            block.native = plan if on else None
        t0 = time.perf_counter()
        engine.generate([f"Story {i}: once upon a time" for i in range(streams)], params)
        return args.tokens * streams / (time.perf_counter() - t0)

    print(f"{len(blocks)} MoE blocks; tok/s, native calls vs the Python roads")
    for streams in args.streams:
        run(True, streams), run(False, streams)  # NOTE: warm-up, both ways
        rates: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for on in (True, False):
                rates[on].append(run(on, streams))
        ratio = sum(rates[True]) / sum(rates[False])
        print(f"{streams} stream{'s' if streams > 1 else ''}: native {' '.join(f'{r:.1f}' for r in rates[True])} | "
              f"python {' '.join(f'{r:.1f}' for r in rates[False])} | {ratio:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
