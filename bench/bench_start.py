"""How long `sglc serve` takes to answer: process start until a first 1-token completion answers
over HTTP (polled every 50 ms), and the server's VmRSS then. Several checkouts side by side, runs
alternating, so that a change to the start is measured against its parent on the same machine
state:

    python bench/bench_start.py --model bench/out/family_models/llama-Q4_K_M.gguf \
        [--checkout /tmp/parent_wt --checkout .] [--engine torch --engine native]
        [--llama-server /work/llamacpp/native] [--runs 4] [--threads 2] [--kv-tokens 4096]

Each checkout runs `python -m sglc.cli serve` with PYTHONPATH at it (``sglc_runtime`` must
resolve there too: a worktree needs a folder with a ``sglc_runtime`` link to its ``runtime/``,
given as ``--checkout LINKDIR:WORKTREE``). Python may write bytecode (a stale cache would
recompile every start). Run it alone on a quiet machine (uptime). Prints medians and the ratio of
each checkout to the first; no assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_families import free_port, stop  # noqa: E402

POLL_S = 0.05


def one_start(pythonpath: str, model: str, threads: int, kv_tokens: int, engine: str = "torch") -> tuple[float, int]:
    """(seconds until a first completion answers, VmRSS MiB then) of one fresh server: `sglc serve`
    from the checkout ``pythonpath``, or llama-server from the folder ``engine`` names
    ("llama-server:DIR")."""
    env = dict(os.environ, PYTHONPATH=pythonpath)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    port = free_port()
    llama = engine.startswith("llama-server:")
    body = json.dumps({"prompt": "Hello", "max_tokens": 1}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    if llama:
        folder = engine.partition(":")[2]
        cmd = [str(Path(folder) / "llama-server"), "-m", model, "--port", str(port), "-t", str(threads), "-np", "8",
               "-c", str(kv_tokens), "--kv-unified", "--cont-batching"]
    else:
        folder = "/"
        cmd = [sys.executable, "-m", "sglc.cli", "serve", "--engine", engine, "--model", model, "--port", "0",
               "--http-port", str(port), "--threads", str(threads), "--kv-slots", str(kv_tokens)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=folder)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode} (PYTHONPATH={pythonpath})")
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    answer.read()
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(POLL_S)
            if time.perf_counter() - t0 > 600:
                raise RuntimeError("sglc serve did not answer within 600 s")
        seconds = time.perf_counter() - t0
        rss = int(Path(f"/proc/{proc.pid}/status").read_text().split("VmRSS:")[1].split()[0]) // 1024
        return seconds, rss
    finally:
        stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--checkout", action="append", default=None,
                    help="a checkout to start (PYTHONPATH entries joined by ':'; default: this one)")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-tokens", type=int, default=4096)
    ap.add_argument("--engine", action="append", choices=("torch", "native"), default=None,
                    help="sglc serve's engine; repeat to start each checkout with each (default: torch)")
    ap.add_argument("--llama-server", default=None, metavar="DIR",
                    help="also start llama-server from DIR (with its libggml-cpu-*.so) on the same file, first")
    args = ap.parse_args()
    engines = args.engine or ["torch"]
    # NOTE: a variant is (its label, the PYTHONPATH it starts with, the engine: "torch", "native" or
    # "llama-server:DIR")
    variants = [(c if len(engines) == 1 and e == "torch" else f"{c} --engine {e}", c, e)
                for c in (args.checkout or [str(ROOT)]) for e in engines]
    if args.llama_server:
        variants.insert(0, (f"llama-server ({args.llama_server})", "", f"llama-server:{args.llama_server}"))
    print(f"load {os.getloadavg()[0]:.2f}; {args.runs} runs each, alternating", flush=True)
    times: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    rss: dict[str, int] = {}
    for _ in range(args.runs):
        for label, path, engine in variants:
            seconds, rss[label] = one_start(path, str(Path(args.model).resolve()), args.threads, args.kv_tokens, engine)
            times[label].append(seconds)
    first = statistics.median(times[variants[0][0]])
    for label, _, _ in variants:
        median = statistics.median(times[label])
        print(f"{label}: start median {median:.2f} s ({median / first:.2f}x the first; runs "
              f"{' '.join(f'{t:.2f}' for t in times[label])}), RSS after the answer {rss[label]} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
