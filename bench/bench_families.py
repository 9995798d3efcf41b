"""Each architecture as people serve it (a ~0.3-0.7 B random-weight Q4_K_M GGUF, bench/family_models.py):
sglc serve against llama.cpp's llama-server on the same file, one server at a time.

Per family and server: start time (process start until a first 1-token completion answers), resident
memory (VmRSS of the server's process tree after the runs, and its peak VmHWM) against the budget
"file size + KV pool + 300 MB", decode tok/s at 1 stream (256 new) and 8 concurrent streams (128
new each: bench_vs_llamacpp.py's workloads 1 and 2, greedy, eos ignored). Both servers get the same
threads and the same KV capacity in tokens (sglc --kv-slots N, llama-server -c N).

    python bench/bench_families.py --llama-server /work/llamacpp/native [--families qwen3 gemma3]
        [--quant Q4_K_M] [--threads 2] [--kv-tokens 4096] [--repeats 1] [--json bench/out/families.json]

--llama-server is a folder holding llama-server and its libggml-cpu-*.so (docs/benchmarks.md:
native/ loads the best variant for this CPU, avx2/ only the AVX2 one); with SGLC_CPU_LEVEL=avx2 in
the environment sglc runs its AVX2 kernels (pair it with the avx2/ folder). Run it alone on a quiet
machine (uptime). Prints a table with the ratios sglc / llama-server; no assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_vs_llamacpp import Server, concurrent_tok_s  # noqa: E402
from bench.family_models import FAMILIES, QUANT, gguf_path  # noqa: E402

MB = 2**20
BUDGET_EXTRA = 300 * MB


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_pids(pid: int) -> list[int]:
    """pid and all its descendants (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes, summed over the process tree."""
    rss = hwm = 0
    for p in tree_pids(pid):
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{p}/status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        rss += int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
        hwm += int(fields.get("VmHWM", "0 kB").split()[0]) * 1024
    return rss, hwm


def kv_bytes_per_token(gguf: Path) -> int:
    """K and V bytes per token over all layers, 2-byte elements (what both servers keep)."""
    from sglc_runtime.model.default_model import resolve_model_path
    from sglc_runtime.model.model_config import ModelConfig

    c = ModelConfig.from_pretrained(resolve_model_path(str(gguf)))
    return c.num_hidden_layers * 2 * c.num_key_value_heads * c.head_dim * 2


def start(cmd: list[str], cwd: str | None, url: str, log: Path, env: dict) -> tuple[subprocess.Popen, float]:
    """Start a server; seconds until a 1-token completion answers."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    deadline = t0 + 600
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}")
        try:
            Server("probe", url, None, 30).complete("Hello", 1)
            return proc, time.perf_counter() - t0
        except Exception:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not answer within 600 s; see {log}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(name: str, cmd: list[str], cwd: str | None, port: int, log: Path, env: dict) -> dict:
    url = f"http://127.0.0.1:{port}"
    proc, start_s = start(cmd, cwd, url, log, env)
    try:
        server = Server(name, url, None, 600)
        server.complete("Story 0: warm up", 8)
        one = concurrent_tok_s(server, 1, 256, seed=1)
        eight = concurrent_tok_s(server, 8, 128, seed=2)
        rss, hwm = memory(proc.pid)
    finally:
        stop(proc)
    return {"start_s": start_s, "rss": rss, "hwm": hwm, "tok_s_1": one, "tok_s_8": eight}


def run_family(family: str, args: argparse.Namespace, out: Path) -> dict:
    gguf = gguf_path(family, args.quant)
    if not gguf.exists():
        raise FileNotFoundError(f"{gguf} is missing: build it with bench/family_models.py --quant {args.quant}")
    threads, kv = str(args.threads), args.kv_tokens
    env = dict(os.environ)
    row = {"family": family, "file_bytes": gguf.stat().st_size, "kv_bytes": kv * kv_bytes_per_token(gguf)}
    lp = free_port()
    row["llama.cpp"] = measure("llama.cpp", [str(Path(args.llama_server) / "llama-server"), "-m", str(gguf),
                                             "--port", str(lp), "-t", threads, "-np", "8", "-c", str(kv),
                                             "--kv-unified", "--cont-batching"],
                               args.llama_server, lp, out / f"{family}-llama.log", env)
    sp = free_port()
    row["sglc"] = measure("sglc", [sys.executable, "-m", "sglc.cli", "serve", "--engine", args.engine, "--model", str(gguf),
                                   "--port", "0", "--http-port", str(sp), "--threads", threads, "--kv-slots", str(kv)],
                          None, sp, out / f"{family}-sglc.log", env)
    return row


def table(rows: list[dict]) -> str:
    head = ("family | file MiB | KV MiB | start s sglc / llama (ratio) | RSS MiB sglc / llama, peak sglc | budget MiB | "
            "1 stream tok/s sglc / llama (ratio) | 8 streams tok/s sglc / llama (ratio)")
    lines = [head, " | ".join("---" for _ in head.split(" | "))]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['family']} | error: {r['error']}")
            continue
        s, l = r["sglc"], r["llama.cpp"]
        budget = r["file_bytes"] + r["kv_bytes"] + BUDGET_EXTRA
        lines.append(
            f"{r['family']} | {r['file_bytes'] / MB:.0f} | {r['kv_bytes'] / MB:.0f} | "
            f"{s['start_s']:.1f} / {l['start_s']:.1f} ({s['start_s'] / l['start_s']:.2f}x) | "
            f"{s['rss'] / MB:.0f} / {l['rss'] / MB:.0f}, {s['hwm'] / MB:.0f} | {budget / MB:.0f} | "
            f"{s['tok_s_1']:.1f} / {l['tok_s_1']:.1f} ({s['tok_s_1'] / l['tok_s_1']:.2f}x) | "
            f"{s['tok_s_8']:.1f} / {l['tok_s_8']:.1f} ({s['tok_s_8'] / l['tok_s_8']:.2f}x)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", required=True, help="folder with llama-server and its libggml-cpu-*.so")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--quant", default=QUANT, help=f"the files' llama-quantize type (default {QUANT})")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--engine", choices=("torch", "native"), default="torch",
                    help="sglc serve's engine (native: the torch-free one, runtime/engine/native_engine.py)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "out" / "families.json"))
    args = ap.parse_args()
    out = Path(args.json).parent
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for repeat in range(args.repeats):
        for family in args.families:
            print(f"[{family} run {repeat + 1}] {os.getloadavg()[0]:.2f} load", flush=True)
            try:
                rows.append(run_family(family, args, out))
            except Exception as e:  # one family failing must not hide the others
                rows.append({"family": family, "error": f"{type(e).__name__}: {e}"})
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    note = (f"{args.quant} files, {platform.processor() or platform.machine()}, "
            f"SGLC_CPU_LEVEL={os.environ.get('SGLC_CPU_LEVEL', 'native')}, sglc --engine {args.engine}, "
            f"llama-server from {args.llama_server}, {args.threads} threads, {args.kv_tokens} KV tokens each")
    Path(args.json).write_text(json.dumps({"note": note, "rows": rows}, indent=1))
    print(f"\n{note}\n{table(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
