"""Engine benchmarks, side by side in one process (ratios are what count; never asserted).

1. Decode: B prompts of equal length, N greedy tokens each (eos ignored), end to end
   (prefill included on both sides): our Engine.generate vs HF transformers generate on the
   same weights and dtype, batches 1, 8, 32.
2. Shared prefix: R requests = one P-token prefix + a distinct 16-token question, N new tokens
   each: engine with the radix cache on, with it off, and HF calling generate once per request.
3. Radix bookkeeping: time inside radix-cache calls as a share of wall time on a workload
   with no reuse (distinct random prompts).

Each timed pair alternates ours/theirs --repeats times and keeps the best of each. Prints a
table and writes bench/out/engine.json.

    python bench/bench_engine.py [--quick] [--dtype float32] [--threads N] [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from sglc_runtime.engine import Engine
from sglc_runtime.sampling.sampling_params import SamplingParams

SIZES = {  # name: (decode prompt len, decode tokens, shared reqs, prefix len, shared tokens, noreuse reqs, len, tokens)
    "full": dict(prompt_len=64, decode_tokens=32, shared_reqs=64, prefix_len=1000, shared_tokens=32,
                 noreuse_reqs=64, noreuse_len=128, noreuse_tokens=32),
    "quick": dict(prompt_len=32, decode_tokens=16, shared_reqs=16, prefix_len=256, shared_tokens=8,
                  noreuse_reqs=16, noreuse_len=64, noreuse_tokens=8),
}


def _random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab, (n, length), generator=g).tolist()


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_new_tokens=n, ignore_eos=True)


def _hf_generate(hf, prompts: list[list[int]], n: int) -> list[list[int]]:
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                          do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[:, ids.shape[1]:].tolist()


def bench_decode(engine: Engine, hf, sz: dict, batches: list[int], repeats: int) -> list[dict]:
    rows = []
    n = sz["decode_tokens"]
    for b in batches:
        prompts = _random_prompts(b, sz["prompt_len"], engine.runner.vocab_size, seed=b)
        ours = theirs = float("inf")
        for _ in range(repeats):
            engine.flush_cache()
            t, outs = _timed(lambda: engine.generate(prompts, _greedy(n)))
            ours = min(ours, t)
            t, hf_ids = _timed(lambda: _hf_generate(hf, prompts, n))
            theirs = min(theirs, t)
        same = sum(o.token_ids == h for o, h in zip(outs, hf_ids))
        rows.append(dict(batch=b, ours_tok_s=round(b * n / ours, 1), hf_tok_s=round(b * n / theirs, 1),
                         ratio=round(theirs / ours, 2), identical_greedy=f"{same}/{b}"))
        print(f"decode  batch {b:3d}: ours {b * n / ours:8.1f} tok/s  HF {b * n / theirs:8.1f} tok/s  "
              f"ratio {theirs / ours:5.2f}x  identical {same}/{b}", flush=True)
    return rows


def bench_shared_prefix(engine: Engine, off: Engine, hf, sz: dict, repeats: int) -> dict:
    vocab = engine.runner.vocab_size
    prefix = _random_prompts(1, sz["prefix_len"], vocab, seed=1)[0]
    prompts = [prefix + q for q in _random_prompts(sz["shared_reqs"], 16, vocab, seed=2)]
    n = sz["shared_tokens"]
    on_t = off_t = hf_t = float("inf")
    for _ in range(repeats):
        engine.flush_cache()
        t, on_out = _timed(lambda: engine.generate(prompts, _greedy(n)))
        on_t = min(on_t, t)
        t, off_out = _timed(lambda: off.generate(prompts, _greedy(n)))
        off_t = min(off_t, t)
        t, hf_out = _timed(lambda: [_hf_generate(hf, [p], n)[0] for p in prompts])
        hf_t = min(hf_t, t)
    stats = engine.stats()
    total = len(prompts) * n
    res = dict(requests=len(prompts), prefix_len=len(prefix), new_tokens=n,
               cache_on_s=round(on_t, 2), cache_off_s=round(off_t, 2), hf_per_call_s=round(hf_t, 2),
               cache_on_tok_s=round(total / on_t, 1), cache_off_tok_s=round(total / off_t, 1),
               hf_tok_s=round(total / hf_t, 1), speedup_vs_cache_off=round(off_t / on_t, 2),
               speedup_vs_hf=round(hf_t / on_t, 2), cache_hit_rate=round(stats.cache_hit_rate, 3),
               identical_on_off=sum(a.token_ids == b.token_ids for a, b in zip(on_out, off_out)),
               identical_on_hf=sum(a.token_ids == b for a, b in zip(on_out, hf_out)))
    print(f"shared prefix {len(prompts)} x {len(prefix)} tok, {n} new: cache on {on_t:.2f}s  off {off_t:.2f}s  "
          f"HF {hf_t:.2f}s  -> {off_t / on_t:.2f}x vs off, {hf_t / on_t:.2f}x vs HF "
          f"(hit rate {stats.cache_hit_rate:.2f})", flush=True)
    return res


def bench_radix_share(engine: Engine, sz: dict) -> dict:
    prompts = _random_prompts(sz["noreuse_reqs"], sz["noreuse_len"], engine.runner.vocab_size, seed=3)
    engine.flush_cache()
    engine.reset_timers()
    wall, _ = _timed(lambda: engine.generate(prompts, _greedy(sz["noreuse_tokens"])))
    s = engine.stats()
    res = dict(requests=len(prompts), wall_s=round(wall, 3), radix_s=round(s.radix_s, 5), radix_calls=s.radix_calls,
               radix_share_pct=round(100 * s.radix_s / wall, 3),
               scheduler_share_pct=round(100 * s.schedule_s / wall, 3),
               process_share_pct=round(100 * s.process_s / wall, 3),
               forward_share_pct=round(100 * s.forward_s / wall, 2))
    print(f"no-reuse {len(prompts)} requests: radix {100 * s.radix_s / wall:.3f}% of wall "
          f"({s.radix_calls} calls), scheduler incl. radix {100 * s.schedule_s / wall:.2f}%, "
          f"output processing {100 * s.process_s / wall:.2f}%, model runner {100 * s.forward_s / wall:.1f}%", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller workloads (minutes on 2 CPU cores)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "engine.json"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sz = SIZES["quick" if args.quick else "full"]

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # NOTE: run as a script: bench/ is sys.path[0]
    from bench.hf_reference import hf_causal_lm
    from sglc_runtime.model.default_model import find_default_gguf

    engine = Engine(dtype=args.dtype, max_running_requests=64)
    off = Engine(share_model_with=engine, dtype=args.dtype, max_running_requests=64, disable_radix_cache=True)
    hf = hf_causal_lm(engine.tokenizer.path, engine.model.dtype, gguf=find_default_gguf())
    engine.generate([[100, 200, 300]], _greedy(2))  # warm-up both
    _hf_generate(hf, [[100, 200, 300]], 2)

    report = dict(benchmark="engine", size="quick" if args.quick else "full", dtype=args.dtype,
                  threads=torch.get_num_threads(), machine=platform.machine(), torch=torch.__version__,
                  targets=dict(batch1_vs_hf=1.5, batch32_vs_hf=3.0, shared_prefix_vs_cache_off=3.0,
                               radix_share_pct_max=0.3))
    report["decode"] = bench_decode(engine, hf, sz, args.batches, args.repeats)
    report["shared_prefix"] = bench_shared_prefix(engine, off, hf, sz, args.repeats)
    report["radix_bookkeeping"] = bench_radix_share(engine, sz)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
