"""Weight precisions side by side: quality against the dequantized fp32 model, and decode speed.

The default model ships as Q4_1 (layers) + Q8_0 (embedding); the fp32 model is those weights
dequantized (``load_model(folder, dtype="float32", gguf=...)``: quantization none decodes the GGUF),
so it is the reference every other precision is measured against. "gguf" runs the file's own types
on their native kernels; "int8" / "int4" re-quantize the decoded weights (``decode_gguf``).

Quality (teacher-forced, so one early difference does not change every later position): the fp32
model writes a greedy continuation of each prompt of a fixed set; every model then prefills the
prompt and decodes the continuation one given token per step (its one-row decode kernels), and we
compare next-token logits position by position:
top-1 agreement, mean and max |logit difference|, and mean KL(fp32 || model).
Speed: one-stream and 8-stream decode steps of the bare model (no server), ms per step.

    python bench/bench_quantization.py [--new-tokens 32] [--steps 48] [--threads N]

Prints a table and writes bench/out/quantization.json. No assertions (tests/test_quantized_linear.py
checks agreement on a subset).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from sglc_runtime.model.default_model import find_default_gguf, resolve_model_path
from sglc_runtime.model.forward_batch import ForwardBatch
from sglc_runtime.model.models import load_model
from sglc_runtime.model.tokenizer import Tokenizer

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea:",
    "Q: What is 17 times 3?\nA:",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Three tips for staying healthy are",
    "Translate to French: 'The cat sleeps on the mat.'\nFrench:",
    "The main difference between a virus and a bacterium is",
    "Once upon a time, in a small village by the mountains,",
]
#: (name, dtype, quantization, native_ops, decode_gguf). The reference is "fp32 eager": plain torch
#: ops, the model tests/test_model_parity.py holds to Hugging Face's; "eager" rows run with the
#: native CPU kernels off (models/layer_ops.py), so each precision shows what the kernels change.
CONFIGS = [("fp32 eager", "float32", "none", False, False), ("fp32", "float32", "none", None, False),
           ("bf16", "bfloat16", "none", None, False), ("int8", None, "int8", None, True),
           ("int4 eager", None, "int4", False, True), ("int4", None, "int4", None, True),
           ("gguf (as shipped)", None, "int4", None, False)]


def _encode(prompts: list[str]) -> list[list[int]]:
    tok = Tokenizer(resolve_model_path(None))
    return [tok.encode(p) for p in prompts]


def float_continuations(model, prompts: list[str], new_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy continuation ids) of each prompt under ``model``."""
    out = []
    for ids in _encode(prompts):
        kv = model.new_kv_buffer(len(ids) + new_tokens + 1)
        logits = model.forward(ForwardBatch.from_requests([ids], [list(range(len(ids)))]), kv)
        cont = [int(logits[-1].argmax())]
        for _ in range(new_tokens - 1):
            n = len(ids) + len(cont)
            logits = model.forward(ForwardBatch.from_requests([[cont[-1]]], [list(range(n))], prefix_lens=[n - 1]), kv)
            cont.append(int(logits[-1].argmax()))
        out.append((ids, cont))
    return out


def _scored_logits(model, ids: list[int], cont: list[int]) -> torch.Tensor:
    """Next-token logits predicting each continuation token: the prompt's prefill, then one decode
    step per continuation token (fed the given token), as serving runs them (a quantized model
    uses its integer kernels for the one-row decode steps, its bf16 copy for the prefill)."""
    kv = model.new_kv_buffer(len(ids) + len(cont))
    rows = [model.forward(ForwardBatch.from_requests([ids], [list(range(len(ids)))]), kv)[-1]]
    for i, token in enumerate(cont[:-1]):
        n = len(ids) + i + 1
        rows.append(model.forward(ForwardBatch.from_requests([[token]], [list(range(n))], prefix_lens=[n - 1]), kv)[0])
    return torch.stack(rows).float()


def agreement(reference, model, sequences) -> dict[str, float]:
    """Top-1 agreement, mean/max |logit diff| and mean KL(reference || model) over all positions."""
    agree = total = 0
    diffs, maxdiff, kls = [], 0.0, []
    for ids, cont in sequences:
        ref, got = _scored_logits(reference, ids, cont), _scored_logits(model, ids, cont)
        agree += int((ref.argmax(-1) == got.argmax(-1)).sum())
        total += len(cont)
        d = (ref - got).abs()
        diffs.append(float(d.mean()))
        maxdiff = max(maxdiff, float(d.max()))
        kls.append(float(torch.nn.functional.kl_div(got.log_softmax(-1), ref.log_softmax(-1), log_target=True,
                                                    reduction="batchmean")))
    return {"top1_agreement": agree / total, "mean_abs_logit_diff": sum(diffs) / len(diffs),
            "max_abs_logit_diff": maxdiff, "mean_kl": sum(kls) / len(kls), "positions": total}


def decode_ms(model, batch: int, steps: int, prompt_len: int = 32) -> float:
    """Milliseconds per decode step of ``batch`` streams (after ``prompt_len``-token prefills)."""
    total = prompt_len + steps + 1
    kv = model.new_kv_buffer(batch * total)
    prompts = [[100 + (i * 7 + j) % 5000 for j in range(prompt_len)] for i in range(batch)]
    slots = [list(range(i * total, i * total + prompt_len)) for i in range(batch)]
    logits = model.forward(ForwardBatch.from_requests(prompts, slots), kv)
    toks = logits.argmax(-1).tolist()
    n = prompt_len
    timed = 0.0
    for step in range(steps):
        t0 = time.perf_counter()
        batch_slots = [list(range(i * total, i * total + n + 1)) for i in range(batch)]
        logits = model.forward(ForwardBatch.from_requests([[t] for t in toks], batch_slots, prefix_lens=[n] * batch), kv)
        toks = logits.argmax(-1).tolist()
        if step >= 4:  # NOTE: the first steps warm caches and allocators
            timed += time.perf_counter() - t0
        n += 1
    return timed / (steps - 4) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=str(Path(__file__).parent / "out" / "quantization.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    path, gguf = resolve_model_path(None), find_default_gguf()
    reference = load_model(path, dtype="float32", native_ops=False, gguf=gguf)
    sequences = float_continuations(reference, PROMPTS, args.new_tokens)
    rows = {}
    for name, dtype, quantization, native, decode in CONFIGS:
        model = reference if name == "fp32 eager" else load_model(path, dtype=dtype, quantization=quantization,
                                                                  native_ops=native, gguf=gguf, decode_gguf=decode)
        row = agreement(reference, model, sequences)
        row["ms_per_step_1"] = decode_ms(model, 1, args.steps)
        row["ms_per_step_8"] = decode_ms(model, 8, args.steps)
        rows[name] = row
        print(f"  {name}: {row}", flush=True)
    print(f"\n{platform.machine()}, {torch.get_num_threads()} threads; {len(PROMPTS)} prompts x "
          f"{args.new_tokens} tokens teacher-forced against the dequantized fp32 model")
    print("| weights | top-1 agreement | mean abs logit diff | max abs logit diff | mean KL | "
          "1-stream ms/step (tok/s) | 8-stream ms/step (tok/s) |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        print(f"| {name} | {r['top1_agreement']:.1%} | {r['mean_abs_logit_diff']:.3f} | {r['max_abs_logit_diff']:.2f} | "
              f"{r['mean_kl']:.4f} | {r['ms_per_step_1']:.1f} ({1e3 / r['ms_per_step_1']:.0f}) | "
              f"{r['ms_per_step_8']:.1f} ({8e3 / r['ms_per_step_8']:.0f}) |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
