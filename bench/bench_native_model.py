"""From a fresh process to a GGUF model's first token: the torch-free model
(runtime/model/native_model.py) against the torch engine's model (``load_model``), each in its own
child process, alternating; wall seconds until the first greedy token of a short prompt, and the
child's VmRSS then. Both run the same tiles and kernels in bfloat16 (the torch engine's GGUF
path), so the difference is what importing torch and its Python model cost:

    python bench/bench_native_model.py --model bench/out/family_models/llama-Q4_K_M.gguf \
        [--runs 3] [--threads 2] [--kv-tokens 4096]

Run it alone on a quiet machine (uptime). Prints medians and ratios; no assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROMPT = list(range(1, 33))

_COMMON = """
import json, sys, time
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) // 1024
"""

TORCH_FREE = _COMMON + """
from sglc_runtime.model.native_model import NativeGGUFModel
m = NativeGGUFModel({model!r}, kv_slots={kv}, threads={threads}, dtype='bfloat16')
token = m.generate_greedy({prompt}, 1)[0]
print(json.dumps({{"token": token, "rss": rss(), "torch": 'torch' in sys.modules}}))
"""

TORCH_ENGINE = _COMMON + """
import torch
torch.set_num_threads({threads})
from sglc_runtime.model.default_model import gguf_source, resolve_model_path
from sglc_runtime.model.forward_batch import ForwardBatch
from sglc_runtime.model.models import load_model
m = load_model(resolve_model_path({model!r}), gguf=gguf_source({model!r}), quantization='int4')
kv = m.new_kv_buffer({kv})
with torch.inference_mode():
    logits = m.forward(ForwardBatch.from_requests([{prompt}], [list(range({n}))]), kv)
print(json.dumps({{"token": int(logits[-1].argmax()), "rss": rss(), "torch": True}}))
"""


def one_run(code: str) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-tokens", type=int, default=4096)
    args = ap.parse_args()
    model = str(Path(args.model).resolve())
    fill = dict(model=model, kv=args.kv_tokens, threads=args.threads, prompt=PROMPT, n=len(PROMPT))
    kinds = {"torch engine model": TORCH_ENGINE.format(**fill), "torch-free model": TORCH_FREE.format(**fill)}
    one_run(kinds["torch-free model"])  # NOTE: builds the binding once if this machine has none yet
    results: dict[str, list[tuple[float, dict]]] = {k: [] for k in kinds}
    print(f"load {os.getloadavg()[0]:.2f}; {args.runs} runs each, alternating; {Path(model).name}, "
          f"{Path(model).stat().st_size / 2**20:.0f} MiB, KV {args.kv_tokens} tokens, {args.threads} threads")
    for _ in range(args.runs):
        for kind, code in kinds.items():
            results[kind].append(one_run(code))
    base = None
    for kind, runs in results.items():
        seconds = statistics.median(s for s, _ in runs)
        rss = statistics.median(r["rss"] for _, r in runs)
        tokens = {r["token"] for _, r in runs}
        base = base or (seconds, rss)
        print(f"{kind}: first token after {seconds:.2f} s (runs {' '.join(f'{s:.2f}' for s, _ in runs)}), "
              f"RSS {rss:.0f} MiB; {seconds / base[0]:.2f}x the time, {rss - base[1]:+.0f} MiB; "
              f"token {sorted(tokens)}; torch imported: {runs[0][1]['torch']}")


if __name__ == "__main__":
    main()
