"""Next-token agreement with llama.cpp on the same GGUF files: tokenization and top-1.

For each GGUF (the default model, the test fixtures of every architecture, the bench family models
where built), llama.cpp's llama-server and sglc's Engine (the file's tensors as shipped, as `sglc
serve` runs them) get the same prompts. Per prompt: the token ids (llama-server's /tokenize against
our tokenizer: must be equal), then one greedy step with the top-2 log-probabilities of each. Counted:
prompts whose ids are equal, top-1 agreement on all prompts, and on the "sure" ones (llama.cpp's
top-2 margin above --margin nats: a near-tie may flip on any kernel's rounding, in either engine).
Random-weight models have flat distributions, so their sure prompts are few; the default model is
the trained one.

    python bench/agree_with_llamacpp.py --llama-server /work/llamacpp/native [--gguf F ...] [--margin 0.05]

Prints one row per file; no assertions.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_families import free_port, stop  # noqa: E402
from bench.family_models import FAMILIES, gguf_path  # noqa: E402

PROMPTS = [
    "The capital of France is", "def fibonacci(n):\n    ", "1, 2, 3, 4, 5,", "Once upon a time, there was a",
    "The quick brown fox jumps over the", "Q: What is the boiling point of water?\nA:", "import numpy as np\nx = np.",
    "東京は日本の", "Les trois couleurs du drapeau sont", "She opened the door and saw", "SELECT name FROM users WHERE",
    "The mitochondria is the", "In 1969, humans first", "for (int i = 0; i <", "My favourite emoji is 🎉 because",
    "The best way to learn a language is",
]


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _llama_top2(url: str, prompt_ids: list[int]) -> list[tuple[int, float]] | None:
    """llama.cpp's top-2 (id, logprob) for the next token, None where it gives none."""
    # NOTE: llama-server holds a token's probabilities back while its text is an incomplete UTF-8
    # sequence (a CJK character split over byte tokens): a few more tokens let it complete
    out = _post(url + "/completion", {"prompt": prompt_ids, "n_predict": 4, "temperature": 0, "n_probs": 2,
                                       "ignore_eos": True, "cache_prompt": False})
    if not out.get("completion_probabilities"):
        return None
    probs = out["completion_probabilities"][0]
    tops = probs.get("top_logprobs") or probs.get("probs")
    return [(int(t["id"]), float(t.get("logprob", t.get("prob", 0.0)))) for t in tops[:2]]


def compare(gguf: Path, llama_dir: Path, margin: float) -> dict:
    from sglc_runtime.engine import Engine
    from sglc_runtime.engine.engine_config import EngineConfig
    from sglc_runtime.sampling.sampling_params import SamplingParams

    port = free_port()
    proc = subprocess.Popen([str(llama_dir / "llama-server"), "-m", str(gguf), "--port", str(port), "-t", "2",
                             "-c", "2048", "-np", "1"], cwd=llama_dir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                _post(url + "/tokenize", {"content": "x"})
                break
            except Exception:
                if proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited with {proc.returncode}")
                time.sleep(0.2)
        # NOTE: "auto" as `sglc serve` resolves it: the file's tensors on their kernels
        engine = Engine(config=EngineConfig(model=str(gguf), quantization="auto", num_kv_slots=2048))
        params = SamplingParams(temperature=0, max_new_tokens=1, return_logprob=True, top_logprobs_num=2)
        same_ids = agree = sure = sure_agree = compared = 0
        for text in PROMPTS:
            theirs = _post(url + "/tokenize", {"content": text, "add_special": True})["tokens"]
            ours = engine.tokenizer.encode(text)
            same_ids += int(theirs == ours)
            # NOTE: both see llama.cpp's ids, so a tokenizer difference never hides in the top-1 figure
            top = _llama_top2(url, theirs)
            if top is None:
                continue
            compared += 1
            out = engine.generate([theirs], params)[0]
            agree += int(out.token_ids[0] == top[0][0])
            if len(top) > 1 and top[0][1] - top[1][1] > margin:
                sure += 1
                sure_agree += int(out.token_ids[0] == top[0][0])
        return {"file": gguf.name, "prompts": len(PROMPTS), "compared": compared, "same_ids": same_ids, "top1": agree, "sure": sure,
                "sure_top1": sure_agree}
    finally:
        stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, required=True, help="folder with llama-server and its libggml-cpu-*.so")
    ap.add_argument("--gguf", type=Path, nargs="*", help="files (default: the default model, the fixtures, the family models)")
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--json", default=str(ROOT / "bench" / "out" / "agree_with_llamacpp.json"))
    args = ap.parse_args()
    files = args.gguf
    if not files:
        from sglc_runtime.model.default_model import find_default_gguf

        files = [find_default_gguf(), *sorted((ROOT / "tests" / "data" / "gguf").glob("*.gguf"))]
        files += [gguf_path(f) for f in FAMILIES if gguf_path(f).exists()]
    rows = []
    for f in files:
        try:
            rows.append(compare(f, args.llama_server, args.margin))
        except Exception as e:  # one file failing must not hide the others
            rows.append({"file": f.name, "error": f"{type(e).__name__}: {e}"})
        print(json.dumps(rows[-1]), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\nfile | prompt ids equal | top-1 equal | top-1 equal where llama.cpp's margin > {args.margin}")
    for r in rows:
        if "error" in r:
            print(f"{r['file']} | error: {r['error']}")
        else:
            print(f"{r['file']} | {r['same_ids']}/{r['prompts']} | {r['top1']}/{r['compared']} | "
                  f"{r['sure_top1']}/{r['sure']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
