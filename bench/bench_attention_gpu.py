"""GPU attention: torch vs triton (vs flashinfer where it exists), checks and timings in one run.

Runs on a CUDA machine, on a SmolLM2-135M-shaped Llama with RANDOM weights (the real checkpoint
cannot travel to the benchmark machine; attention cost does not depend on weight values, and a
greedy identity check between two attention backends on the same random weights is still a
check of attention). Sections, each independent (an error is recorded and the rest still runs):

1. identity: engine greedy tokens on a shared-prefix workload, torch vs triton vs
   triton + CUDA graphs (float32: must be identical; bfloat16: agreement reported);
2. attention: one layer's ``backend.forward`` (KV write + attention) on decode batches,
   B x context, scattered slots; median ms and the KV bytes read per second; and the same for
   extend (prefill of new tokens over a cached prefix);
3. decode step: the model's forward over a running decode loop (context grows by one per step),
   torch vs triton vs triton + CUDA graphs; ms/step and tok/s;
4. shared prefix: the engine on N requests sharing a long cached prefix, wall time and tok/s.

    python bench/bench_attention_gpu.py --config-dir DIR_WITH_CONFIG_AND_TOKENIZER [--out DIR]
    python bench/bench_attention_gpu.py --smoke   # tiny sizes (CPU + TRITON_INTERPRET=1 works)

Prints a table last; writes attention_gpu.json under --out. No assertions on timings.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.random_model import write_random_model  # noqa: E402
from sglc_runtime.engine import Engine  # noqa: E402
from sglc_runtime.model.attention import create_backend, unavailable_reason  # noqa: E402
from sglc_runtime.model.attention.torch_backend import TorchAttentionBackend  # noqa: E402
from sglc_runtime.model.cuda_graph import DecodeGraphs  # noqa: E402
from sglc_runtime.model.forward_batch import ForwardBatch  # noqa: E402
from sglc_runtime.model.models import load_model  # noqa: E402
from sglc_runtime.sampling.sampling_params import SamplingParams  # noqa: E402

BACKENDS = ("torch", "triton", "triton+graphs")


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn, device, warmup: int = 3, reps: int = 20) -> float:
    """Median wall time of fn() in ms, device-synchronized (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    cuda = torch.device(device).type == "cuda"
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


# ----------------------------------------------------------------------------- 1. identity
def _prompts(n: int, prefix_words: int) -> tuple[str, list[str]]:
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
             "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
    shared = " ".join(words[i % len(words)] for i in range(prefix_words)) + "\n"
    return shared, [shared + f"Question {i}: what comes after {words[i % len(words)]}?" for i in range(n)]


def _engine(model_dir, backend: str, dtype: str, device: str, max_running: int, num_slots: int) -> Engine:
    attention, graphs = ("triton", True) if backend == "triton+graphs" else (backend, False)
    return Engine(model=str(model_dir), device=device, attention_backend=attention, dtype=dtype,
                  cuda_graph=graphs, num_kv_slots=num_slots, max_running_requests=max_running)


def _shared_prefix_tokens(engine: Engine, first: str, rest: list[str], new_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True)
    out = [o.token_ids for o in engine.generate([first], params)]  # caches the shared prefix
    return out + [o.token_ids for o in engine.generate(rest, params)]


def identity(model_dir, device: str, smoke: bool) -> dict:
    n, words, new = (3, 20, 3) if smoke else (8, 150, 24)
    _, prompts = _prompts(n, words)
    result = {}
    for dtype in ("float32",) if smoke else ("float32", "bfloat16"):
        runs, cached = {}, {}
        for backend in BACKENDS if device == "cuda" else ("torch", "triton"):
            engine = _engine(model_dir, backend, dtype, device, max_running=16, num_slots=8192)
            runs[backend] = _shared_prefix_tokens(engine, prompts[0], prompts[1:], new)
            cached[backend] = engine.stats().cached_tokens
            del engine
        ref = runs["torch"]
        result[dtype] = {
            b: {"identical": toks == ref,
                "requests_differing": sum(a != r for a, r in zip(toks, ref)),
                "tokens_differing": sum(x != y for a, r in zip(toks, ref) for x, y in zip(a, r)),
                "tokens": sum(len(a) for a in toks), "cached_prompt_tokens": cached[b]}
            for b, toks in runs.items() if b != "torch"
        }
    return result


# ----------------------------------------------------------------------------- 2. attention
def _decode_case(batch: int, context: int, heads: int, kv_heads: int, head_dim: int, dtype, device, seed=0):
    """One layer's decode inputs with every request's context at scattered pool slots."""
    gen = torch.Generator().manual_seed(seed)
    num_slots = batch * context + 64
    perm = torch.randperm(num_slots, generator=gen)
    kv = [perm[i * context : (i + 1) * context] for i in range(batch)]
    fb = ForwardBatch.from_requests([[0]] * batch, kv, device=device)
    from sglc_runtime.cache.kv_buffer import KVBuffer

    buf = KVBuffer(1, num_slots, kv_heads, head_dim, dtype=dtype, device=device)
    buf.k[0].normal_()
    buf.v[0].normal_()
    q = torch.randn(batch, heads, head_dim, dtype=dtype, device=device)
    k = torch.randn(batch, kv_heads, head_dim, dtype=dtype, device=device)
    v = torch.randn(batch, kv_heads, head_dim, dtype=dtype, device=device)
    return fb, buf, q, k, v


def attention(device: str, smoke: bool) -> list[dict]:
    heads, kv_heads, head_dim = 9, 3, 64
    batches, contexts = ((1, 4), (16, 40)) if smoke else ((1, 8, 32), (512, 2048))
    rows = []
    for dtype in (torch.bfloat16,) if not smoke else (torch.float32,):
        for b in batches:
            for ctx in contexts:
                fb, buf, q, k, v = _decode_case(b, ctx, heads, kv_heads, head_dim, dtype, device)
                row = {"dtype": str(dtype).split(".")[1], "batch": b, "context": ctx}
                outs = {}
                for name in ("torch", "triton"):
                    backend = (TorchAttentionBackend(heads, kv_heads, head_dim, decode_workspace_bytes=0)
                               if name == "torch" else create_backend("triton", heads, kv_heads, head_dim))
                    backend.prepare(fb)
                    outs[name] = backend.forward(0, q, k, v, buf).float()
                    row[f"{name}_ms"] = _median_ms(lambda: backend.forward(0, q, k, v, buf), device,
                                                   reps=3 if smoke else 50)
                    row[f"{name}_prepare_ms"] = _median_ms(lambda: backend.prepare(fb), device,
                                                           reps=3 if smoke else 20)
                kv_bytes = b * ctx * kv_heads * head_dim * 2 * buf.k[0].element_size()
                row["kv_mb"] = kv_bytes / 1e6
                row["triton_gb_s"] = kv_bytes / (row["triton_ms"] * 1e-3) / 1e9
                row["speedup"] = row["torch_ms"] / row["triton_ms"]
                row["max_abs_diff"] = float((outs["torch"] - outs["triton"]).abs().max())
                rows.append(row)
    return rows


def extend(device: str, smoke: bool) -> list[dict]:
    """Prefill of new tokens over a cached prefix (one layer), torch vs triton."""
    heads, kv_heads, head_dim = 9, 3, 64
    cases = ((2, 8, 24),) if smoke else ((1, 512, 0), (8, 256, 1024), (32, 64, 2048))
    dtype = torch.float32 if smoke else torch.bfloat16
    rows = []
    for reqs, new, prefix in cases:
        gen = torch.Generator().manual_seed(reqs + new)
        num_slots = reqs * (prefix + new) + 8
        perm = torch.randperm(num_slots, generator=gen)
        kv = [perm[i * (prefix + new) : (i + 1) * (prefix + new)] for i in range(reqs)]
        fb = ForwardBatch.from_requests([[0] * new] * reqs, kv, prefix_lens=[prefix] * reqs, device=device)
        from sglc_runtime.cache.kv_buffer import KVBuffer

        buf = KVBuffer(1, num_slots, kv_heads, head_dim, dtype=dtype, device=device)
        buf.k[0].normal_()
        buf.v[0].normal_()
        t = reqs * new
        q = torch.randn(t, heads, head_dim, dtype=dtype, device=device)
        k = torch.randn(t, kv_heads, head_dim, dtype=dtype, device=device)
        v = torch.randn(t, kv_heads, head_dim, dtype=dtype, device=device)
        row = {"dtype": str(dtype).split(".")[1], "requests": reqs, "new": new, "prefix": prefix}
        outs = {}
        for name in ("torch", "triton"):
            backend = create_backend(name, heads, kv_heads, head_dim)
            backend.prepare(fb)
            outs[name] = backend.forward(0, q, k, v, buf).float()
            row[f"{name}_ms"] = _median_ms(lambda: backend.forward(0, q, k, v, buf), device,
                                           reps=3 if smoke else 30)
        row["speedup"] = row["torch_ms"] / row["triton_ms"]
        row["max_abs_diff"] = float((outs["torch"] - outs["triton"]).abs().max())
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- 3. decode step
def decode_step(model_dir, device: str, smoke: bool) -> list[dict]:
    batches, contexts, steps = ((1, 3), (12,), 4) if smoke else ((1, 8, 32), (512, 2048), 32)
    dtype = "float32" if smoke else "bfloat16"
    rows = []
    models = {}
    for b in batches:
        for ctx in contexts:
            row = {"dtype": dtype, "batch": b, "context": ctx}
            for backend in BACKENDS if device == "cuda" else ("torch", "triton"):
                attn = "triton" if backend.startswith("triton") else "torch"
                if attn not in models:
                    models[attn] = load_model(model_dir, dtype=dtype, device=device, attention=attn)
                model = models[attn]
                num_slots = b * (ctx + steps) + 2
                kv = model.new_kv_buffer(num_slots)
                for t in kv.k + kv.v:
                    t.normal_()
                gen = torch.Generator().manual_seed(b * 7 + ctx)
                perm = torch.randperm(num_slots - 1, generator=gen)
                slots = [perm[i * (ctx + steps) : (i + 1) * (ctx + steps)] for i in range(b)]
                graphs = None
                if backend == "triton+graphs":
                    graphs = DecodeGraphs(model, kv, pad_slot=num_slots - 1, max_batch=b,
                                          max_context=ctx + steps + 1)

                def batch_at(i: int) -> ForwardBatch:
                    return ForwardBatch.from_requests([[5]] * b, [s[: ctx + i] for s in slots], device=device)

                batches_ = [batch_at(i) for i in range(1, steps + 1)]
                if isinstance(model.attn, TorchAttentionBackend) and model.attn.workspace is not None:
                    model.attn.workspace.invalidate()

                def loop():
                    for fb in batches_:
                        if graphs is not None:
                            graphs.forward(fb)
                        else:
                            model.forward(fb, kv)

                ms = _median_ms(loop, device, warmup=1, reps=1 if smoke else 5) / steps
                row[f"{backend}_ms"] = ms
                row[f"{backend}_tok_s"] = b / (ms * 1e-3)
                del kv, graphs
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- 4. shared prefix
def shared_prefix(model_dir, device: str, smoke: bool) -> list[dict]:
    n, words, new = (3, 20, 3) if smoke else (32, 800, 128)
    dtype = "float32" if smoke else "bfloat16"
    _, prompts = _prompts(n + 3, words)
    first, warm, rest = prompts[0], prompts[1:3], prompts[3:]
    rows = []
    for backend in BACKENDS if device == "cuda" else ("torch", "triton"):
        engine = _engine(model_dir, backend, dtype, device, max_running=64, num_slots=65536)
        params = SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True)
        engine.generate([first], params)  # the shared prefix is cached (and the kernels compiled)
        engine.generate(warm, params)  # warm-up of the batched paths (other suffixes)
        before = engine.stats()
        _sync(device)
        t = time.perf_counter()
        outs = engine.generate(rest, params)
        _sync(device)
        wall = time.perf_counter() - t
        after = engine.stats()
        tokens = sum(len(o.token_ids) for o in outs)
        rows.append({"backend": backend, "dtype": dtype, "requests": len(rest), "new_tokens": new,
                     "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
                     "cached_tokens": after.cached_tokens - before.cached_tokens,
                     "wall_s": wall, "tok_s": tokens / wall})
        del engine
    return rows


# ----------------------------------------------------------------------------- report
def _table(title: str, rows: list[dict], cols: list[str]) -> str:
    lines = [title, " | ".join(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            cells.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config-dir", help="folder with config.json (+ tokenizer files); default: the default model")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script itself")
    ap.add_argument("--sections", default="identity,attention,extend,decode,shared_prefix")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.config_dir is None:
        from sglc_runtime.model.default_model import resolve_model_path

        args.config_dir = resolve_model_path("default")
    results: dict = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "weights": "random (SmolLM2-135M shapes: 30 layers, hidden 576, 9 q / 3 kv heads, head_dim 64)",
        "flashinfer": unavailable_reason("flashinfer") or "available",
        "errors": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_random_model(args.config_dir, Path(tmp) / "model", seed=0)
        sections = {"identity": lambda: identity(model_dir, device, args.smoke),
                    "attention": lambda: attention(device, args.smoke),
                    "extend": lambda: extend(device, args.smoke),
                    "decode": lambda: decode_step(model_dir, device, args.smoke),
                    "shared_prefix": lambda: shared_prefix(model_dir, device, args.smoke)}
        for name in args.sections.split(","):
            t = time.perf_counter()
            try:
                results[name] = sections[name]()
            except Exception as err:  # NOTE: one broken section must not cost the others' numbers
                results["errors"][name] = "".join(traceback.format_exception(err))[-3000:]
                print(f"[{name}] FAILED: {err!r}", flush=True)
            print(f"[{name}] {time.perf_counter() - t:.1f} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "attention_gpu.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\n{results['device']}  torch {results['torch']}  triton {results['triton']}  "
          f"flashinfer: {results['flashinfer']}")
    if "identity" in results:
        print("identity (greedy tokens vs torch):", json.dumps(results["identity"]))
    if "attention" in results:
        print(_table("\nattention, one layer forward (KV write + attend), median ms:", results["attention"],
                     ["dtype", "batch", "context", "torch_ms", "triton_ms", "speedup", "triton_gb_s",
                      "torch_prepare_ms", "triton_prepare_ms", "max_abs_diff"]))
    if "extend" in results:
        print(_table("\nextend over a cached prefix, one layer forward, median ms:", results["extend"],
                     ["dtype", "requests", "new", "prefix", "torch_ms", "triton_ms", "speedup", "max_abs_diff"]))
    if "decode" in results:
        print(_table("\ndecode step, model forward (30 layers), ms/step and tok/s:", results["decode"],
                     ["dtype", "batch", "context"] + [f"{b}_ms" for b in BACKENDS]
                     + [f"{b}_tok_s" for b in BACKENDS]))
    if "shared_prefix" in results:
        print(_table("\nshared prefix, engine generate:", results["shared_prefix"],
                     ["backend", "dtype", "requests", "new_tokens", "prompt_tokens", "cached_tokens",
                      "wall_s", "tok_s"]))
    for name, err in results["errors"].items():
        print(f"\nERROR in {name}:\n{err}")


if __name__ == "__main__":
    main()
