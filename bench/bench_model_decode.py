"""Decode throughput of our model forward vs Hugging Face transformers ``generate``, side by side.

Both run greedy decoding of the same prompts on the same weights and dtype in this process.
Ours: prefill each batch once, then a loop of decode steps over pre-allocated KV slots (argmax
on the returned logits). HF: ``generate(max_new_tokens=N)`` minus ``generate(max_new_tokens=1)``
(so the prefill is not counted on either side). Each side runs ``--repeats`` times,
alternating, and keeps its best. Prints tok/s and ratios; writes
bench/out/model_decode.json. No assertions: timings are noisy on shared machines.

--compare-plain also times our model with plain ``F.linear`` weights (``pack_weights=False``)
in the same alternation, to show what pre-packed oneDNN linears buy at each batch size.

    python bench/bench_model_decode.py [--batches 1 8 32] [--steps 32] [--prompt-len 64] [--dtype float32]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from sglc_runtime.model.default_model import gguf_source, resolve_model_path
from sglc_runtime.model.forward_batch import ForwardBatch
from sglc_runtime.model.models import load_model


def ours_decode_tok_s(model, prompts: list[list[int]], steps: int) -> tuple[float, list[list[int]]]:
    """Decode tok/s of our model, and the generated ids (for a sanity check against HF)."""
    bsz = len(prompts)
    total = max(len(p) for p in prompts) + steps + 1
    kv = model.new_kv_buffer(bsz * total)
    slots = [list(range(i * total, i * total + len(p))) for i, p in enumerate(prompts)]
    logits = model.forward(ForwardBatch.from_requests(prompts, slots), kv)
    nxt = logits.argmax(-1).tolist()
    out = [[t] for t in nxt]
    start = time.perf_counter()
    for _ in range(steps - 1):
        for i in range(bsz):
            slots[i].append(i * total + len(slots[i]))
        batch = ForwardBatch.from_requests([[t] for t in nxt], slots)
        nxt = model.forward(batch, kv).argmax(-1).tolist()
        for o, t in zip(out, nxt):
            o.append(t)
    elapsed = time.perf_counter() - start
    return bsz * (steps - 1) / elapsed, out


def hf_decode_tok_s(hf, prompts: list[list[int]], steps: int, pad_id: int) -> tuple[float, list[list[int]]]:
    """Decode tok/s of transformers generate (equal-length prompts, so no padding effects)."""
    ids = torch.tensor(prompts)
    kwargs = dict(do_sample=False, pad_token_id=pad_id, eos_token_id=None)
    with torch.inference_mode():
        hf.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
        t0 = time.perf_counter()
        hf.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs)
        t1 = time.perf_counter()
        out = hf.generate(ids, max_new_tokens=steps, min_new_tokens=steps, **kwargs)
        t2 = time.perf_counter()
    decode_time = (t2 - t1) - (t1 - t0)
    return len(prompts) * (steps - 1) / decode_time, out[:, ids.shape[1]:].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", default=None)
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs; the best of each is kept")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out" / "model_decode.json"))
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--compare-plain", action="store_true",
                        help="also time our model with unpacked weights (pack_weights=False)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # NOTE: run as a script: bench/ is sys.path[0]
    from bench.hf_reference import hf_causal_lm

    path, gguf = resolve_model_path(args.model), gguf_source(args.model)
    model = load_model(path, dtype=args.dtype, gguf=gguf)
    plain = load_model(path, dtype=args.dtype, pack_weights=False, gguf=gguf) if args.compare_plain else None
    hf = hf_causal_lm(path, model.dtype, gguf=gguf)
    gen = torch.Generator().manual_seed(0)
    results = []
    for bsz in args.batches:
        prompts = torch.randint(100, model.config.vocab_size, (bsz, args.prompt_len), generator=gen).tolist()
        for m in (model, plain) if plain is not None else (model,):
            ours_decode_tok_s(m, prompts[:1], 3)  # warm-up
        ours = theirs = unpacked = 0.0
        for _ in range(args.repeats):  # NOTE: alternate, so load changes hit both sides alike
            speed, ours_ids = ours_decode_tok_s(model, prompts, args.steps)
            ours = max(ours, speed)
            speed, hf_ids = hf_decode_tok_s(hf, prompts, args.steps, pad_id=0)
            theirs = max(theirs, speed)
            if plain is not None:
                speed, plain_ids = ours_decode_tok_s(plain, prompts, args.steps)
                unpacked = max(unpacked, speed)
        same = sum(a == b for a, b in zip(ours_ids, hf_ids))
        row = {
            "batch": bsz,
            "ours_tok_s": round(ours, 1),
            "hf_generate_tok_s": round(theirs, 1),
            "ratio": round(ours / theirs, 2),
            "identical_greedy_sequences": f"{same}/{bsz}",
        }
        extra = ""
        if plain is not None:
            same_plain = sum(a == b for a, b in zip(ours_ids, plain_ids))
            row.update(unpacked_tok_s=round(unpacked, 1), packed_vs_unpacked=round(ours / unpacked, 2),
                       identical_to_unpacked=f"{same_plain}/{bsz}")
            extra = f"   unpacked {unpacked:8.1f} tok/s ({ours / unpacked:4.2f}x, identical {same_plain}/{bsz})"
        results.append(row)
        print(
            f"batch {bsz:3d}: ours {ours:8.1f} tok/s   HF generate {theirs:8.1f} tok/s   "
            f"ratio {ours / theirs:5.2f}x   identical greedy outputs {same}/{bsz}{extra}",
            flush=True,
        )
    report = {
        "benchmark": "model_decode",
        "dtype": args.dtype,
        "pack_weights": model.pack_weights,
        "steps": args.steps,
        "prompt_len": args.prompt_len,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
