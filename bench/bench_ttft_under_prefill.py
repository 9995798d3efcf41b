"""Time to first token of a 1-token request submitted while a long prompt is prefilling (issue 30).

Side by side in one process, on one loaded model shared by the engines:

1. Step length per chunk size: a P-token prompt (default 4,000) prefilled alone with chunks of
   each --chunk-sizes value ("auto": EngineConfig's default, sized from the measured rate):
   median and longest step, and the whole prefill's time (what the chunking costs in prefill
   throughput). The default should keep the median step near 100-200 ms on a 2-core CPU.
2. TTFT under prefill: the engine serves in its thread; the P-token prompt is submitted, and once
   its prefill has started a 1-token request ("Hi", max_new_tokens 1) is submitted; its TTFT is
   the time from submit to its output. With "auto" chunks (the default), fixed 256-token chunks
   and chunking off (the pre-issue-30 default): the ratio is what counts. Each mode runs --repeats times (best kept).

Absolute times depend on the machine and its load; only the ratios taken in one run mean
something. Prints a table and writes bench/out/ttft_under_prefill.json.

    python bench/bench_ttft_under_prefill.py [--prompt-tokens 4000] [--chunk-sizes auto 128 256 512]
        [--quantization auto] [--threads N] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from sglc_runtime.engine import Engine
from sglc_runtime.engine.engine_config import DEFAULT_CHUNKED_PREFILL_SIZE


def _random_ids(n: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab - 100, (n,), generator=g).tolist()


def _timing_steps(engine: Engine) -> list[float]:
    """Wrap the engine's runner: the returned list gets each step's forward time (seconds)."""
    times: list[float] = []
    run = engine.runner.run

    def timed(batch):
        t0 = time.perf_counter()
        try:
            return run(batch)
        finally:
            times.append(time.perf_counter() - t0)

    engine.runner.run = timed
    return times


def bench_step_lengths(base: Engine, prompt_tokens: int, chunk_sizes: list, kv_slots: int) -> list[dict]:
    rows = []
    for chunk in chunk_sizes:
        engine = Engine(share_model_with=base, chunked_prefill_size=chunk, num_kv_slots=kv_slots)
        times = _timing_steps(engine)
        t0 = time.perf_counter()
        seed = chunk if isinstance(chunk, int) else 1
        engine.generate([_random_ids(prompt_tokens, engine.runner.vocab_size, seed=seed)], {"max_new_tokens": 1})
        total = time.perf_counter() - t0
        row = dict(chunk=chunk, steps=len(times), median_step_ms=round(1000 * statistics.median(times), 1),
                   first_step_ms=round(1000 * times[0], 1), max_step_ms=round(1000 * max(times), 1),
                   prefill_s=round(total, 2), prefill_tok_s=round(prompt_tokens / total, 1))
        rows.append(row)
        print(f"chunk {chunk!s:>5}: {row['steps']:3d} steps, step median {row['median_step_ms']:7.1f} ms, first "
              f"{row['first_step_ms']:7.1f} ms, longest {row['max_step_ms']:7.1f} ms; {prompt_tokens}-token prefill "
              f"{total:6.2f} s ({row['prefill_tok_s']:.0f} tok/s)", flush=True)
    return rows


def ttft_under_prefill(base: Engine, chunk: int | None, prompt_tokens: int, kv_slots: int, seed: int) -> dict:
    """One run: the long prompt, then (once its prefill started) the 1-token request."""
    engine = Engine(share_model_with=base, chunked_prefill_size=chunk, num_kv_slots=kv_slots)
    engine.start()
    try:
        long_ids = _random_ids(prompt_tokens, engine.runner.vocab_size, seed)
        t_long = time.perf_counter()
        long_rid = engine.submit(long_ids, {"max_new_tokens": 1})
        while engine.stats().computed_prefill_tokens == 0:  # NOTE: counted when its first step is planned
            time.sleep(0.001)
        t_short = time.perf_counter()
        short = engine.wait(engine.submit("Hi", {"max_new_tokens": 1, "temperature": 0}))
        ttft = time.perf_counter() - t_short
        engine.wait(long_rid)
        long_s = time.perf_counter() - t_long
        assert short.completion_tokens == 1
        return dict(ttft_s=ttft, long_prompt_s=long_s, steps=engine.stats().num_steps)
    finally:
        engine.shutdown()


def chunk_arg(text: str) -> int | str:
    return text if text == "auto" else int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--chunk-sizes", type=chunk_arg, nargs="*", default=["auto", 128, 256, 512],
                    help="chunk sizes (or auto) whose step lengths part 1 measures (none: skip part 1)")
    ap.add_argument("--quantization", default="auto", choices=["auto", "none", "int8", "int4"],
                    help="as `sglc serve` (default auto: int4 for the default model on a CPU)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "ttft_under_prefill.json"))
    args = ap.parse_args()
    kv_slots = args.prompt_tokens + 512

    base = Engine(quantization=args.quantization, threads=args.threads, num_kv_slots=kv_slots)
    base.generate([_random_ids(300, base.runner.vocab_size, seed=0)], {"max_new_tokens": 2})  # warm-up
    report = dict(benchmark="ttft_under_prefill", prompt_tokens=args.prompt_tokens,
                  quantization=base.config.quantization, dtype=base.config.dtype, threads=torch.get_num_threads(),
                  machine=platform.machine(), processor=platform.processor(), torch=torch.__version__,
                  default_chunk=DEFAULT_CHUNKED_PREFILL_SIZE)
    report["step_lengths"] = bench_step_lengths(base, args.prompt_tokens, args.chunk_sizes, kv_slots)

    modes = {"auto": "auto", f"chunked {DEFAULT_CHUNKED_PREFILL_SIZE}": DEFAULT_CHUNKED_PREFILL_SIZE,
             "unchunked": None}
    best: dict[str, dict] = {}
    for r in range(args.repeats):
        for name, chunk in modes.items():
            got = ttft_under_prefill(base, chunk, args.prompt_tokens, kv_slots, seed=100 + r)
            if name not in best or got["ttft_s"] < best[name]["ttft_s"]:
                best[name] = got
    on, off = best["auto"], best["unchunked"]
    for name, got in best.items():
        print(f"TTFT of a 1-token request during a {args.prompt_tokens}-token prefill, {name:>12}: "
              f"{got['ttft_s']:7.3f} s   (the long prompt's own time: {got['long_prompt_s']:6.2f} s, "
              f"{got['steps']} steps)", flush=True)
    ratio = off["ttft_s"] / on["ttft_s"]
    print(f"TTFT unchunked / auto chunks: {ratio:.1f}x; the long prompt's time auto chunks / unchunked: "
          f"{on['long_prompt_s'] / off['long_prompt_s']:.2f}x", flush=True)
    report["ttft"] = {name: {k: round(v, 3) if isinstance(v, float) else v for k, v in got.items()}
                      for name, got in best.items()}
    report["ttft_ratio_unchunked_over_auto"] = round(ratio, 2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
