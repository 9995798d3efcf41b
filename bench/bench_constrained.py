"""Constrained decoding, side by side in one run on one machine (printed and written to
bench/out/constrained.json; nothing is asserted: shared machines are noisy).

1. JSON decoding (the SGLang paper's workload: a character-sheet regex, one request per
   character): the same requests with jump-forward vs token-by-token masking in our engine;
   requests/s, decode steps, output tokens. Target: >= 1.6x.
2. Token-index build time for the same patterns on the SmolLM2 vocabulary: sglc.fsm vs
   outlines-core and xgrammar (bench/constrained_index.py; both optional — install them into a
   separate environment for the benchmark only, e.g. a venv with --system-site-packages).
3. Per-step masking overhead: the same greedy decode with and without a constraint that allows
   every token (so the tokens are identical), per decode step; and the sampler alone with and
   without per-row masks.

    python bench/bench_constrained.py [--requests 8 32] [--repeats 2] [--dtype float32] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from constrained_index import SGLANG_JSON_REGEX, bench_index  # noqa: E402

from sglc_runtime.constrained import ConstraintSpec  # noqa: E402
from sglc_runtime.engine import Engine  # noqa: E402
from sglc_runtime.sampling.sampler import Sampler, SamplingBatch  # noqa: E402
from sglc_runtime.sampling.sampling_params import SamplingParams  # noqa: E402

CHARACTERS = ["Harry Potter", "Hermione Granger", "Ron Weasley", "Albus Dumbledore", "Severus Snape",
              "Rubeus Hagrid", "Draco Malfoy", "Luna Lovegood", "Neville Longbottom", "Ginny Weasley",
              "Sirius Black", "Remus Lupin", "Minerva McGonagall", "Bellatrix Lestrange", "Dobby",
              "Cedric Diggory", "Cho Chang", "Fred Weasley", "George Weasley", "Lord Voldemort",
              "Nymphadora Tonks", "Alastor Moody", "Dolores Umbridge", "Gilderoy Lockhart",
              "Peter Pettigrew", "Lucius Malfoy", "Arthur Weasley", "Molly Weasley", "Horace Slughorn",
              "Filius Flitwick", "Argus Filch", "Kingsley Shacklebolt"]


def json_workload(engine: Engine, num_requests: int) -> list[str]:
    names = [CHARACTERS[i % len(CHARACTERS)] for i in range(num_requests)]
    return [engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": f"Give the character sheet of {n} as JSON."}], add_generation_prompt=True)
        for n in names]


def run_json(engine: Engine, prompts: list[str], jump: bool) -> dict:
    """One timed pass over the workload (cache flushed first, so both modes start equal)."""
    engine.flush_cache()
    params = SamplingParams(regex=SGLANG_JSON_REGEX, max_new_tokens=256, temperature=0, jump_forward=jump)
    steps0, jumps0 = engine.stats().num_steps, dict(engine.jump_counts)
    t = time.perf_counter()
    outs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - t
    import re

    valid = sum(1 for o in outs if re.fullmatch(SGLANG_JSON_REGEX, o.text))
    return {"seconds": elapsed, "requests_per_s": len(prompts) / elapsed, "valid": valid, "requests": len(prompts),
            "steps": engine.stats().num_steps - steps0, "output_tokens": sum(len(o.token_ids) for o in outs),
            "output_chars": sum(len(o.text) for o in outs),
            "jumps": {k: engine.jump_counts[k] - jumps0[k] for k in jumps0}}


def bench_json(engine: Engine, num_requests: int, repeats: int) -> dict:
    prompts = json_workload(engine, num_requests)
    engine.grammars.get(ConstraintSpec.of(regex=SGLANG_JSON_REGEX))  # compile + index outside the timing
    engine.generate(prompts[:2], SamplingParams(max_new_tokens=4))  # warm-up
    best: dict[bool, dict] = {}
    for _ in range(repeats):
        for jump in (True, False):  # alternate, keep each mode's best
            r = run_json(engine, prompts, jump)
            if jump not in best or r["seconds"] < best[jump]["seconds"]:
                best[jump] = r
    on, off = best[True], best[False]
    speedup = on["requests_per_s"] / off["requests_per_s"]
    for label, r in (("jump-forward", on), ("token-by-token", off)):
        print(f"[json] {label:15} {r['seconds']:7.2f}s  {r['requests_per_s']:6.2f} req/s  steps {r['steps']:4}  "
              f"tokens {r['output_tokens']:5}  valid {r['valid']}/{r['requests']}  jumps {r['jumps']}")
    print(f"[json] jump-forward speedup: {speedup:.2f}x (target >= 1.6x)")
    return {"jump_forward": on, "token_by_token": off, "speedup": speedup}


def bench_mask_overhead(engine: Engine, batch: int, steps: int, repeats: int) -> dict:
    """Per decode step: a constraint allowing every token vs none (identical greedy tokens)."""
    prompts = [engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": f"Write a long story about {CHARACTERS[i % len(CHARACTERS)]}."}],
        add_generation_prompt=True) for i in range(batch)]
    plain = SamplingParams(max_new_tokens=steps, temperature=0, ignore_eos=True)
    masked = plain.replace(regex=r"[\s\S]*")
    engine.grammars.get(ConstraintSpec.of(regex=r"[\s\S]*"))
    times: dict[str, float] = {}
    same = True
    for _ in range(repeats):
        for label, params in (("plain", plain), ("masked", masked)):
            engine.flush_cache()
            engine.generate(prompts, params.replace(max_new_tokens=1))  # prefill outside the timing
            steps0 = engine.stats().num_steps
            t = time.perf_counter()
            outs = engine.generate(prompts, params)
            per_step = (time.perf_counter() - t) / max(engine.stats().num_steps - steps0, 1)
            times[label] = min(times.get(label, float("inf")), per_step)
            if label == "plain":
                ref = [o.token_ids for o in outs]
            else:
                same &= [o.token_ids for o in outs] == ref
    overhead = times["masked"] - times["plain"]
    print(f"[mask] engine step, batch {batch}: plain {times['plain'] * 1e3:.1f} ms, masked {times['masked'] * 1e3:.1f} ms "
          f"-> overhead {overhead * 1e3:+.2f} ms/step ({overhead / times['plain'] * 100:+.1f}%), same tokens: {same}")
    sampler = sampler_overhead(engine, batch)
    return {"batch": batch, "plain_step_s": times["plain"], "masked_step_s": times["masked"],
            "overhead_s": overhead, "same_tokens": same, "sampler": sampler}


def sampler_overhead(engine: Engine, batch: int, iters: int = 50) -> dict:
    """The sampler alone on [batch, vocab] logits, with and without one bool mask per row."""
    vocab = engine.runner.vocab_size
    logits = torch.randn(batch, vocab)
    grammar = engine.grammars.get(ConstraintSpec.of(regex=SGLANG_JSON_REGEX))
    state = grammar.new_cursor()
    params = [SamplingParams(temperature=0)] * batch
    sampler = Sampler(0)
    out = {}
    for label in ("none", "masks"):
        t = time.perf_counter()
        for _ in range(iters):
            masks = [state.allowed_mask() for _ in range(batch)] if label == "masks" else None
            sampler(logits, SamplingBatch.build(params, vocab, masks=masks))
        out[label] = (time.perf_counter() - t) / iters
    print(f"[mask] sampler, batch {batch}: {out['none'] * 1e3:.2f} ms without masks, {out['masks'] * 1e3:.2f} ms with "
          f"({(out['masks'] - out['none']) / batch * 1e6:.1f} us per masked row)")
    return {"no_mask_s": out["none"], "masked_s": out["masks"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[8, 32], help="JSON workload sizes (one run each)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--skip-index", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(0)
    torch.manual_seed(0)
    engine = Engine(dtype=args.dtype, max_running_requests=max(64, *args.requests))
    result = {"machine": platform.platform(), "python": sys.version.split()[0], "torch_threads": torch.get_num_threads(),
              "dtype": args.dtype, "device": str(engine.model.device)}
    result["json_decoding"] = {}
    for n in args.requests:
        print(f"[json] {n} requests")
        result["json_decoding"][str(n)] = bench_json(engine, n, args.repeats)
    if not args.skip_index:
        result["index_build"] = bench_index(engine.tokenizer, repeats=3)
    result["mask_overhead"] = [bench_mask_overhead(engine, batch=b, steps=24, repeats=args.repeats) for b in (1, 32)]
    out = Path(__file__).resolve().parent / "out" / "constrained.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
