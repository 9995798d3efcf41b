"""The native CPU kernels at every instruction-set level this CPU runs, side by side in one run.

    python bench/bench_cpu_kernels.py [--threads 2] [--rows 1,4,8,32,256] [--json out.json]

For the default model's shapes (SmolLM2-135M: hidden 576, 9 query / 3 kv heads of 64, MLP 1536,
vocabulary 49152), per level (avx512, avx2, generic on an AVX512 machine; ``SGLC_CPU_LEVEL``
plays no part: every level runs here, in turns):

- one decoder layer's four integer linears (int4, Q4_1 levels) and the int8 lm_head, per row
  count (decode batches up to prefill chunks), against torch's own kernels for the same weights
  (``_weight_int4pack_mm_for_cpu`` / ``_weight_int8pack_mm`` with bf16 activations) and the
  float GEMMs (oneDNN fp32 and bf16) a prefill could use instead;
- the same linears with cold weights: a sweep over 30 distinct layers, then the lm_head (a
  model's step streams its weights from memory; the repeated calls above hit the cache);
- decode attention for one and eight requests over 1,000 keys;
- the fused small ops of a layer at one row.

Prints microseconds per call (median of repeats) and each level's ratio to the best level.
Timings on a shared machine are noise: run it alone (``uptime``), threads pinned.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from sglc_runtime.model.models.linear import Linear, can_pack_weights
from sglc_runtime.model.models.quantized_linear import Int4Linear, Int8Linear
from sglc_runtime.model.native import load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import cpu_flags, native_bf16, supported_levels

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 576, 1536, 9, 3, 64, 49152
LAYER_SHAPES = {"qkv": ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), "o": (HIDDEN, HEADS * HEAD_DIM),
                "gate_up": (2 * INTER, HIDDEN), "down": (HIDDEN, INTER)}


def timed(fn, repeats: int, min_seconds: float = 0.2) -> float:
    """Median microseconds of one call (after a warm-up call), over >= repeats calls."""
    fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        if len(samples) > 10000:
            break
    return statistics.median(samples)


def layer_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=g) * 0.05 for name, shape in LAYER_SHAPES.items()}


def bench_linears(rows_list: list[int], levels: list[str], repeats: int) -> dict:
    """us per call of the layer's four linears together, and of the lm_head, per row count."""
    weights = layer_weights()
    head = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(1)) * 0.05
    results: dict = {"layer_int4": {}, "head_int8": {}}
    for level in levels:
        with running_level(level):
            layer = [Int4Linear.quantize(w, native=True) for w in weights.values()]
            lm = Int8Linear.quantize(head, native=True)
            for rows in rows_list:
                xs = [torch.randn(rows, w.shape[1]).bfloat16() for w in weights.values()]
                results["layer_int4"].setdefault(rows, {})[level] = timed(
                    lambda: [lin(x) for lin, x in zip(layer, xs)], repeats)
                xh = torch.randn(rows, HIDDEN)
                results["head_int8"].setdefault(rows, {})[level] = timed(lambda: lm(xh), repeats)
    # torch's own kernels and float GEMMs for the same shapes
    torch_layer = [Int4Linear.quantize(w, native=False) for w in weights.values()]
    torch_head = Int8Linear.quantize(head, native=False)
    f32 = [Linear.build(w, pack=can_pack_weights(torch.float32, torch.device("cpu"))) for w in weights.values()]
    bf = [Linear.build(w.bfloat16(), pack=can_pack_weights(torch.bfloat16, torch.device("cpu"))) for w in weights.values()]
    bf_head = Linear.build(head.bfloat16(), pack=can_pack_weights(torch.bfloat16, torch.device("cpu")))
    for rows in rows_list:
        xs = [torch.randn(rows, w.shape[1]).bfloat16() for w in weights.values()]
        xf = [x.float() for x in xs]
        results["layer_int4"][rows]["torch int4"] = timed(lambda: [lin(x) for lin, x in zip(torch_layer, xs)], repeats)
        results["layer_int4"][rows]["fp32 gemm"] = timed(lambda: [lin(x) for lin, x in zip(f32, xf)], repeats)
        results["layer_int4"][rows]["bf16 gemm"] = timed(lambda: [lin(x) for lin, x in zip(bf, xs)], repeats)
        results["head_int8"][rows]["torch int8"] = timed(lambda: torch_head(xs[0]), repeats)
        results["head_int8"][rows]["bf16 gemm"] = timed(lambda: bf_head(xs[0]), repeats)
    return results


def bench_model_sweep(rows_list: list[int], levels: list[str], repeats: int, layers: int = 30) -> dict:
    """us per layer of a sweep over ``layers`` distinct layers' four int4 linears, then the int8
    lm_head right after (us): the weights come from memory, as in a model's step (~60 MB here),
    where the repeated calls above find them in the cache."""
    g = torch.Generator().manual_seed(3)
    results: dict = {"layer_int4": {}, "head_int8": {}}
    for level in levels:
        with running_level(level):
            model = [[Int4Linear.quantize(torch.randn(*shape, generator=g) * 0.05, native=True)
                      for shape in LAYER_SHAPES.values()] for _ in range(layers)]
            head = Int8Linear.quantize(torch.randn(VOCAB, HIDDEN, generator=g) * 0.05, native=True)
            for _ in range(2):  # NOTE: untimed: the first sweeps after packing run far slower (page faults)
                for layer in model:
                    for lin, shape in zip(layer, LAYER_SHAPES.values()):
                        lin(torch.zeros(1, shape[1]).bfloat16())
                head(torch.zeros(1, HIDDEN))
            for rows in rows_list:
                xs = [torch.randn(rows, shape[1]).bfloat16() for shape in LAYER_SHAPES.values()]
                xh = torch.randn(rows, HIDDEN)
                per_layer, per_head = [], []
                for _ in range(max(5, repeats // 2)):
                    t0 = time.perf_counter()
                    for layer in model:
                        for lin, x in zip(layer, xs):
                            lin(x)
                    t1 = time.perf_counter()
                    head(xh)
                    per_layer.append((t1 - t0) * 1e6 / layers)
                    per_head.append((time.perf_counter() - t1) * 1e6)
                results["layer_int4"].setdefault(rows, {})[level] = statistics.median(per_layer)
                results["head_int8"].setdefault(rows, {})[level] = statistics.median(per_head)
            del model, head
    return results


def bench_attention(levels: list[str], repeats: int) -> dict:
    """us per decode_attention_ call: B requests x 1000 keys each, scattered slots, bf16."""
    results: dict = {}
    g = torch.Generator().manual_seed(2)
    for batch in (1, 8):
        keys = 1000
        slots = batch * keys + 8
        k_cache = torch.randn(slots, KV_HEADS, HEAD_DIM, generator=g).bfloat16()
        v_cache = torch.randn(slots, KV_HEADS, HEAD_DIM, generator=g).bfloat16()
        index = torch.randperm(slots, generator=g)[: batch * keys].view(batch, keys).contiguous()
        lens = torch.full((batch,), keys, dtype=torch.long)
        loc = index[:, -1].contiguous()
        q = torch.randn(batch, HEADS, HEAD_DIM, generator=g).bfloat16()
        kn = torch.randn(batch, KV_HEADS, HEAD_DIM, generator=g).bfloat16()
        vn = torch.randn(batch, KV_HEADS, HEAD_DIM, generator=g).bfloat16()
        for level in levels:
            with running_level(level):
                results.setdefault(f"{batch} x {keys} keys", {})[level] = timed(
                    lambda: torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, kn, vn, q, index, lens, 0.125),
                    repeats)
    return results


def bench_small_ops(levels: list[str], repeats: int) -> dict:
    """us per call at one row, bf16: add_rms_norm_, rope_ on q and k, silu_mul."""
    from sglc_runtime.model.models.rope import RotaryEmbedding

    rope = RotaryEmbedding(HEAD_DIM, 10000.0, None, 2048)
    cos, sin = rope.tables(2047)
    h = torch.randn(1, HIDDEN).bfloat16()
    delta = torch.randn(1, HIDDEN).bfloat16()
    w = torch.randn(HIDDEN).bfloat16()
    qkv = torch.randn(1, (HEADS + 2 * KV_HEADS) * HEAD_DIM).bfloat16()
    gu = torch.randn(1, 2 * INTER).bfloat16()
    pos = torch.tensor([100])
    results: dict = {}
    ops = torch.ops.sglc_cpu
    for level in levels:
        with running_level(level):
            results.setdefault("add_rms_norm_", {})[level] = timed(lambda: ops.add_rms_norm_(h, delta, w, 1e-5), repeats)
            results.setdefault("rope_", {})[level] = timed(lambda: ops.rope_(qkv, pos, cos, sin, HEADS + KV_HEADS), repeats)
            results.setdefault("silu_mul", {})[level] = timed(lambda: ops.silu_mul(gu), repeats)
    return results


def print_table(title: str, rows: dict, levels: list[str]) -> None:
    columns = list(next(iter(rows.values())).keys())
    print(f"\n{title} (us per call; ratio: the level's time over {levels[0]}'s)")
    print(" | ".join(["case".ljust(16)] + [c.rjust(12) for c in columns]))
    for case, cells in rows.items():
        best = cells[levels[0]]
        line = [str(case).ljust(16)]
        for c in columns:
            line.append(f"{cells[c]:8.1f} {cells[c] / best:4.2f}x".rjust(12) if c in cells else "".rjust(12))
        print(" | ".join(line))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,4,8,32,256")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    why = load_cpu_ops()
    if why is not None:
        raise SystemExit(f"the native kernels are unavailable: {why}")
    levels = list(supported_levels())
    flags = sorted(f for f in cpu_flags() if f.startswith(("avx512", "avx2", "amx", "asimd")))
    print(f"cpu: {platform.processor() or platform.machine()}; flags: {' '.join(flags)}; levels: {levels}; "
          f"native bf16: {native_bf16(levels[0])}; threads {args.threads}")
    rows_list = [int(r) for r in args.rows.split(",")]
    linears = bench_linears(rows_list, levels, args.repeats)
    sweep = bench_model_sweep([r for r in rows_list if r <= 32], levels, args.repeats)
    attention = bench_attention(levels, args.repeats)
    small = bench_small_ops(levels, args.repeats * 5)
    print_table("one layer's int4 linears (qkv, o, gate_up, down)", {f"{r} rows": v for r, v in linears["layer_int4"].items()}, levels)
    print_table("int8 lm_head 49152 x 576", {f"{r} rows": v for r, v in linears["head_int8"].items()}, levels)
    print_table("cold weights: a layer's int4 linears in a 30-layer sweep", {f"{r} rows": v for r, v in sweep["layer_int4"].items()}, levels)
    print_table("cold weights: the int8 lm_head after the sweep", {f"{r} rows": v for r, v in sweep["head_int8"].items()}, levels)
    print_table("decode attention, bf16", attention, levels)
    print_table("small ops, one row, bf16", small, levels)
    if args.json:
        args.json.write_text(json.dumps({"levels": levels, "flags": flags, "threads": args.threads,
                                         "linears": linears, "model_sweep": sweep, "attention": attention,
                                         "small_ops": small}, indent=1))


if __name__ == "__main__":
    main()
