"""Every architecture's GGUF fixture on a CUDA GPU against the same model on the CPU.

The fixtures (tests/data/gguf: tiny random models of each family, converted by llama.cpp's own
converter) run through the Engine on ``--device`` (cuda) and on the CPU, both float32 with the
file's tensors decoded (quantization none), greedy, three prompts sharing a prefix (radix cache,
chunked prefill). The CPU run is the reference: same weights, same float32, only the device and
its kernels differ. Prints, per fixture, the attention backend the GPU engine chose (auto: Triton,
or torch where the family needs sliding windows or soft-capping), the agreement of greedy tokens
and the first step where they part. Random tiny models have flat distributions, so a late
divergence after a near-tie is rounding, not a bug: the table reports, it does not assert.

    python bench/check_families_gpu.py [--device cuda] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglc_runtime.engine import Engine  # noqa: E402
from sglc_runtime.sampling.sampling_params import SamplingParams  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "gguf"
NEW_TOKENS = 16


def greedy_tokens(path: Path, device: str) -> tuple[list[list[int]], Engine]:
    """Float32 greedy tokens of three prompts sharing a 12-token prefix (the first alone, then
    two over its cached prefix, chunked prefill of 8) on ``device``, and the engine."""
    engine = Engine(model=str(path), device=device, dtype="float32", quantization="none",
                    num_kv_slots=512, chunked_prefill_size=8, max_running_requests=4)
    params = SamplingParams(temperature=0, max_new_tokens=NEW_TOKENS, ignore_eos=True)
    prefix = [(7 * i + 3) % 200 + 10 for i in range(12)]
    prompts = [prefix + [(11 * i + j) % 200 + 10 for i in range(n)] for j, n in enumerate((3, 5, 9))]
    outs = [engine.generate([prompts[0]], params)[0].token_ids]
    outs += [o.token_ids for o in engine.generate(prompts[1:], params)]
    return outs, engine


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for path in sorted(FIXTURES.glob("*.gguf")):
        row = {"fixture": path.name}
        t0 = time.perf_counter()
        try:
            ref, _ = greedy_tokens(path, "cpu")
            got, engine = greedy_tokens(path, args.device)
            backend = engine.placement.attention_backend
            flat_ref = [t for out in ref for t in out]
            flat_got = [t for out in got for t in out]
            # NOTE: the first step where they part, or where the shorter one ends (a failed request)
            parts = [next((i for i, (a, b) in enumerate(zip(r, g)) if a != b),
                          None if len(r) == len(g) else min(len(r), len(g))) for r, g in zip(ref, got)]
            row.update(backend=backend, agree=sum(a == b for a, b in zip(flat_ref, flat_got)),
                       steps=len(flat_ref), lengths=[len(g) for g in got], first_difference=parts)
        except Exception as e:  # one family failing must not hide the others
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        row["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("\nfixture | backend | greedy tokens equal to the CPU's | first difference per prompt | error")
    for r in rows:
        print(f"{r['fixture']} | {r.get('backend', '')} | {r.get('agree', '')}/{r.get('steps', '')} | "
              f"{r.get('first_difference', '')} | {r.get('error', '')}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "families_gpu.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
