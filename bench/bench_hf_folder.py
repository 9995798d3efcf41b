"""A Hugging Face folder served by `sglc serve`, checkouts (or settings) side by side: resident
memory against the budget "file size + KV pool + 300 MB", start until a first answer, decode tok/s
at 1 stream (128 new) and 8 concurrent streams (64 new each), and prefill tok/s of a ~1,000-token
prompt (1 new token, a fresh prompt each run so nothing is cached). Greedy, eos ignored, through
HTTP; one server at a time, each setting once per round, rounds alternating.

    python bench/bench_hf_folder.py --model /path/to/hf_folder [--checkout LINKDIR:WORKTREE ...]
        [--dtype float32] [--rounds 2] [--threads 2] [--kv-tokens 4096]

--checkout as bench_start.py's (default: this checkout). With SGLC_CPU_LEVEL=avx2 in the
environment both sglc and torch (ATEN/oneDNN/MKL) are held to AVX2: the stand-in for an AVX2-only
CPU. Run it alone on a quiet machine (uptime). Prints one row per checkout and round; no assertions.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_families import free_port, memory, start, stop  # noqa: E402
from bench.bench_vs_llamacpp import Server, concurrent_tok_s, words  # noqa: E402

MB = 2**20
BUDGET_EXTRA = 300 * MB


def kv_bytes(folder: Path, tokens: int, dtype_bytes: int) -> int:
    import json

    c = json.loads((folder / "config.json").read_text())
    heads = c.get("num_key_value_heads", c["num_attention_heads"])
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * heads * head_dim * dtype_bytes * tokens


def prefill_tok_s(server: Server, seed: int) -> float:
    prompt = f"Report {seed}: " + words(random.Random(seed), 700)
    t0 = time.perf_counter()
    out = server._completion(prompt, 1)
    return int(out["usage"]["prompt_tokens"]) / (time.perf_counter() - t0)


def run(checkout: str, args: argparse.Namespace, seed: int) -> dict:
    link, _, tree = checkout.partition(":")
    env = dict(os.environ, PYTHONPATH=link if not tree else f"{link}:{tree}")
    port = free_port()
    cmd = [sys.executable, "-m", "sglc.cli", "serve", "--model", args.model, "--port", "0", "--http-port", str(port),
           "--threads", str(args.threads), "--kv-slots", str(args.kv_tokens)]
    if args.dtype:
        cmd += ["--dtype", args.dtype]
    log = Path("/tmp") / f"bench_hf_folder_{port}.log"
    proc, start_s = start(cmd, "/", f"http://127.0.0.1:{port}", log, env)
    try:
        server = Server("sglc", f"http://127.0.0.1:{port}", None, 600)
        server.complete("Story 0: warm up", 8)
        concurrent_tok_s(server, 8, 8, seed=3)  # NOTE: the first batch of 8 pays first-use costs
        prefill = prefill_tok_s(server, seed)
        one = concurrent_tok_s(server, 1, 128, seed=1)
        eight = concurrent_tok_s(server, 8, 64, seed=2)
        rss, hwm = memory(proc.pid)
    finally:
        stop(proc)
    return {"start_s": start_s, "rss": rss, "hwm": hwm, "prefill": prefill, "tok_s_1": one, "tok_s_8": eight}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a Hugging Face folder")
    ap.add_argument("--checkout", action="append", help="LINKDIR:WORKTREE or a checkout (default: this one)")
    ap.add_argument("--dtype", default="", help="--dtype for sglc serve (default: its own choice)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-tokens", type=int, default=4096)
    args = ap.parse_args()
    folder = Path(args.model)
    file_bytes = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    checkouts = args.checkout or [str(ROOT)]
    print(f"cpu level: {os.environ.get('SGLC_CPU_LEVEL', 'native')}; file {file_bytes / MB:.0f} MiB")
    print("| checkout | round | start s | RSS MiB (peak) | budget (fp32 KV) | prefill tok/s | 1 stream tok/s | 8 streams tok/s |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in range(args.rounds):
        for c in checkouts:
            row = run(c, args, seed=100 + r)
            budget = file_bytes + kv_bytes(folder, args.kv_tokens, 4) + BUDGET_EXTRA
            print(f"| {c} | {r} | {row['start_s']:.1f} | {row['rss'] / MB:.0f} ({row['hwm'] / MB:.0f}) | "
                  f"{budget / MB:.0f} | {row['prefill']:.1f} | {row['tok_s_1']:.1f} | {row['tok_s_8']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
