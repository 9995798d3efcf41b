"""Bring your own model: Hub names in the local Hugging Face cache (`sglc serve --model org/name`,
Engine(model=...)), `sglc inspect-model` and `sglc models`.

The cache is built here in huggingface_hub's own layout (models--org--name/refs/main ->
snapshots/<commit>/ of symlinks into blobs/) from the committed GGUF fixtures (tests/data/gguf/)
and a tiny safetensors Qwen3 saved by transformers; huggingface_hub's scan_cache_dir is the oracle
that the layout is the real one, gguf-py's GGUFReader and safetensors' safe_open the oracles of
what inspect-model counts.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from gguf_blocks import write_gguf
from sglc.cli import main
from sglc_runtime.model.chat_template_name import chat_template_name
from sglc_runtime.model.default_model import gguf_source, locate_model, resolve_model_path
from sglc_runtime.model.gguf import SUPPORTED_GGUF_ARCHITECTURES
from sglc_runtime.model.hf_cache import HubModelError, HubModelNotFound, cached_models, hub_cache_dir
from sglc_runtime.model.native import capabilities
from toy_tokenizer import train_toy_tokenizer

DATA = Path(__file__).parent / "data" / "gguf"
HF_REPO = "tiny-org/Qwen3-tiny"
LLAMA3_TEMPLATE = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
                   "<|eot_id|>{% endfor %}")
#: repo -> files of the snapshot (name in the repo -> source file)
GGUF_REPOS = {
    "tiny-org/Qwen3Moe-GGUF": {"qwen3moe-Q4_0.gguf": DATA / "qwen3moe-Q4_0.gguf"},
    "tiny-org/Gemma3-GGUF": {"gemma3-Q8_0.gguf": DATA / "gemma3-Q8_0.gguf",
                             "mmproj-gemma3-f16.gguf": DATA / "gemma3-Q8_0.gguf"},  # a projector is never picked
    "tiny-org/LlamaWide-GGUF": {"llama_wide-Q4_K_M.gguf": DATA / "llama_wide-Q4_K_M.gguf",
                                "Q6_K/llama_wide-Q6_K.gguf": DATA / "llama_wide-Q6_K.gguf"},
}


def put_in_cache(cache: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """Write ``files`` as huggingface_hub does: content-addressed blobs, a snapshot of relative
    symlinks, refs/main naming the commit."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    for rel, src in files.items():
        data = src.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return folder / "snapshots" / commit


def tiny_qwen3(folder: Path) -> Path:
    """A 2-layer Qwen3 saved by transformers, with the toy tokenizer and a Llama 3 chat template."""
    torch.manual_seed(0)
    config = transformers.Qwen3Config(vocab_size=400, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=256, eos_token_id=0, bos_token_id=0)
    transformers.Qwen3ForCausalLM(config).save_pretrained(folder)
    train_toy_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>", "chat_template": LLAMA3_TEMPLATE}))
    return folder


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """$HF_HUB_CACHE with the tiny safetensors model and the GGUF repos."""
    cache = tmp_path_factory.mktemp("hf_hub")
    src = tiny_qwen3(tmp_path_factory.mktemp("qwen3_src"))
    put_in_cache(cache, HF_REPO, {p.name: p for p in src.iterdir()})
    for repo, files in GGUF_REPOS.items():
        put_in_cache(cache, repo, files)
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_CACHE", str(cache))
    yield cache
    mp.undo()


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys, spec: str) -> tuple[int, dict]:
    code, out, _ = run_main(capsys, "inspect-model", spec, "--json")
    return code, json.loads(out)


# ---------------------------------------------------------------- the cache and hub names

def test_the_cache_is_the_layout_huggingface_hub_reads(hub):
    """huggingface_hub's own scan_cache_dir sees every repo written here, with its files."""
    from huggingface_hub import scan_cache_dir

    assert hub_cache_dir() == hub
    repos = {r.repo_id: r for r in scan_cache_dir(hub).repos}
    assert set(repos) == {HF_REPO, *GGUF_REPOS}
    for repo_id, files in GGUF_REPOS.items():
        (revision,) = repos[repo_id].revisions
        assert {f.file_path.relative_to(revision.snapshot_path).as_posix() for f in revision.files} == set(files)
        assert "main" in revision.refs
    assert "config.json" in {f.file_name for f in next(iter(repos[HF_REPO].revisions)).files}


def test_hub_names_resolve_in_the_cache(hub):
    """org/name is the snapshot folder or its one GGUF (a projector file aside); :FILE.gguf and a
    quant tag pick among several; the tag is a whole part of the name (Q4_K is not Q4_K_M)."""
    path, is_gguf = locate_model(HF_REPO)
    assert not is_gguf and (path / "config.json").is_file() and path.parent.name == "snapshots"
    assert gguf_source("tiny-org/Qwen3Moe-GGUF").name == "qwen3moe-Q4_0.gguf"
    assert gguf_source("tiny-org/Gemma3-GGUF").name == "gemma3-Q8_0.gguf"
    assert gguf_source("tiny-org/LlamaWide-GGUF:Q6_K").name == "llama_wide-Q6_K.gguf"
    assert gguf_source("tiny-org/LlamaWide-GGUF:q4_k_m").name == "llama_wide-Q4_K_M.gguf"
    assert gguf_source("tiny-org/LlamaWide-GGUF:Q6_K/llama_wide-Q6_K.gguf").name == "llama_wide-Q6_K.gguf"
    assert gguf_source("tiny-org/LlamaWide-GGUF:llama_wide-Q4_K_M.gguf").name == "llama_wide-Q4_K_M.gguf"
    with pytest.raises(HubModelError, match="holds 2 GGUF files .Q6_K/llama_wide-Q6_K.gguf, llama_wide-Q4_K_M.gguf"
                                            ".*tiny-org/LlamaWide-GGUF:Q4_K_M"):
        locate_model("tiny-org/LlamaWide-GGUF")
    with pytest.raises(HubModelError, match="Q4_K matches no GGUF file"):
        locate_model("tiny-org/LlamaWide-GGUF:Q4_K")
    folder = resolve_model_path("tiny-org/Qwen3Moe-GGUF")  # its config and tokenizer folder
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Qwen3MoeForCausalLM"]


def test_a_name_not_in_the_cache_says_where_it_looked_and_how_to_fetch_it(hub, capsys):
    """One line: the folder looked for, the variables that place the cache, the download command."""
    with pytest.raises(HubModelNotFound, match="hf download Qwen/Qwen3-0.6B") as err:
        locate_model("Qwen/Qwen3-0.6B")
    assert str(hub / "models--Qwen--Qwen3-0.6B") in str(err.value) and "$HF_HUB_CACHE" in str(err.value)
    code, out, err_text = run_main(capsys, "inspect-model", "bartowski/Qwen3-0.6B-GGUF:Q4_K_M")
    assert code == 2 and not out
    assert err_text.count("\n") == 1 and "hf download bartowski/Qwen3-0.6B-GGUF --include '*Q4_K_M*'" in err_text


def test_a_local_path_wins_over_a_hub_name(hub, tmp_path, monkeypatch):
    """A folder spelled like org/name, relative to the working directory, is the model."""
    local = tiny_qwen3(tmp_path / "tiny-org" / "Qwen3-tiny")
    monkeypatch.chdir(tmp_path)
    path, is_gguf = locate_model(HF_REPO)
    assert path.resolve() == local.resolve() and not is_gguf


def test_engine_generates_from_hub_names(hub):
    """Engine(model=org/name) serves the safetensors snapshot (float32) and a GGUF repo (serve's
    auto quantization sees the hub GGUF: its tensors as shipped)."""
    from sglc_runtime.engine import Engine
    from sglc_runtime.sampling.sampling_params import SamplingParams

    greedy = SamplingParams(temperature=0, max_new_tokens=4, ignore_eos=True)
    for spec, quantization in ((HF_REPO, "none"), ("tiny-org/Qwen3Moe-GGUF", "int4")):
        engine = Engine(model=spec, quantization="auto", num_kv_slots=64, max_running_requests=2, threads=1)
        try:
            assert engine.config.quantization == quantization
            (out,) = engine.generate([[5, 6, 7, 8]], greedy)
            assert len(out.token_ids) == 4
        finally:
            engine.shutdown()


# ---------------------------------------------------------------- inspect-model

@pytest.mark.parametrize("fixture, runs_as, window, experts", [
    ("qwen3moe-Q4_0", "Qwen3MoeForCausalLM", None, (6, 2)),
    ("gemma3-Q8_0", "Gemma3ForCausalLM", (7, "SSSSSF"), (0, 0)),
    ("llama_wide-Q4_K_M", "LlamaForCausalLM", None, (0, 0)),
    ("phi3-Q4_0", "Phi3ForCausalLM", (11, "SSS"), (0, 0)),
])
def test_inspect_model_reads_a_gguf_as_gguf_py_does(capsys, fixture, runs_as, window, experts):
    """Tensor types, counts, bytes and parameters are gguf-py's; context, windows and experts the
    source model's config.json; the kernels line names this CPU's level."""
    from gguf import GGUFReader

    path = DATA / f"{fixture}.gguf"
    code, s = inspect_json(capsys, str(path))
    assert code == 0 and s["supported"] and s["problems"] == []
    assert s["runs_as"] == runs_as and s["format"] == "gguf" and s["file_bytes"] == path.stat().st_size
    want: dict[str, dict[str, int]] = {}
    for t in GGUFReader(str(path)).tensors:
        use = want.setdefault(t.tensor_type.name, {"count": 0, "bytes": 0, "parameters": 0, "vectors": 0})
        use["count"] += 1
        use["vectors"] += len(t.shape) == 1
        use["bytes"] += int(t.n_bytes)
        use["parameters"] += int(t.n_elements)
    assert s["tensor_types"] == want
    assert s["parameters"] == sum(u["parameters"] for u in want.values())
    source = json.loads((DATA / f"{fixture.split('-')[0]}.config.json").read_text())
    assert s["context_length"] == source["max_position_embeddings"]
    assert (s["sliding_window"], s["layer_pattern"]) == (window or (None, None))
    assert (s["experts"], s["experts_per_token"]) == experts
    assert s["chat_template"] == "chatml" and s["tokenizer"].startswith("gpt2 (byte-level BPE)")
    k = s["kernels"]
    assert k["cpu_level"] == capabilities.chosen_level() and k["quantization"] == "int4"
    for kind in want:
        assert k["per_type"][kind].startswith("native ") == (kind in ("Q4_0", "Q4_K", "Q6_K", "Q8_0") and k["native_kernels"])

    code, out, _ = run_main(capsys, "inspect-model", str(path))
    assert code == 0
    lines = dict(line.split(":", 1) for line in out.splitlines() if not line.startswith(" "))
    assert f"runs as {runs_as}" in lines["architecture"]
    assert f"{source['max_position_embeddings']} tokens" in lines["context"]
    assert "ChatML" in lines["chat template"]
    assert f"CPU level {capabilities.chosen_level()}" in lines["kernels"]
    assert all(f"{kind} x{u['count']}" in lines["tensor types"] for kind, u in want.items())
    assert lines["status"].strip().startswith("supported")


def test_inspect_model_reads_a_safetensors_snapshot_by_its_headers(hub, capsys):
    """A hub safetensors model: dtypes, counts and parameters are safe_open's, the Llama 3
    template is named, the linears run in float32 (serve's auto quantization: none)."""
    from safetensors import safe_open

    code, s = inspect_json(capsys, HF_REPO)
    assert code == 0 and s["supported"], s["problems"]
    path = Path(s["path"])
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        shapes = [f.get_slice(k).get_shape() for k in f.keys()]
    assert s["tensor_types"]["F32"]["count"] == len(shapes)
    assert s["parameters"] == sum(int(np.prod(shape)) for shape in shapes)
    assert s["runs_as"] == "Qwen3ForCausalLM" and s["model_class"] == "LlamaForCausalLM (models/llama.py)"
    assert s["context_length"] == 256 and s["chat_template"] == "llama3" and s["tokenizer"].startswith("BPE")
    assert s["kernels"]["quantization"] == "none" and s["kernels"]["per_type"]["F32"].startswith("float32 linears")


def test_chat_templates_are_named_by_their_turn_markers():
    """ChatML, Llama 3, [INST], Gemma and Phi-3 templates are recognised; others are custom."""
    assert chat_template_name("{{'<|im_start|>' + m.role}}{{'<|im_end|>'}}") == "chatml"
    assert chat_template_name(LLAMA3_TEMPLATE) == "llama3"
    assert chat_template_name("{{ bos_token }}[INST] {{ m }} [/INST]") == "llama2"
    assert chat_template_name("<start_of_turn>user\n{{ m }}<end_of_turn>") == "gemma"
    assert chat_template_name("<|user|>\n{{ m }}<|end|>\n<|assistant|>") == "phi3"
    assert chat_template_name("### Human: {{ m }}") == "custom"
    assert chat_template_name(None) == chat_template_name("") == "none"


# ---------------------------------------------------------------- refusals

def test_what_cannot_run_is_reported_by_name_with_exit_status_2(tmp_path, capsys):
    """An unsupported architecture, tensor type, tokenizer or Hugging Face architecture: the
    loader's own message (listing what is supported), status 2, no traceback."""
    import gguf

    embd = np.zeros((16, 32), dtype=np.float32)
    bloom = write_gguf(tmp_path / "bloom.gguf", "bloom", {"token_embd.weight": embd})
    code, s = inspect_json(capsys, str(bloom))
    assert code == 2 and not s["supported"]
    assert f"GGUF architecture 'bloom' is not supported; supported: {', '.join(SUPPORTED_GGUF_ARCHITECTURES)}" \
        in s["problems"]
    q2k = np.zeros((32, 84), dtype=np.uint8)  # NOTE: 32 rows of one Q2_K block (256 values in 84 bytes)
    odd = write_gguf(tmp_path / "q2k.gguf", "qwen2", {"token_embd.weight": embd},
                     raw={"blk.0.attn_q.weight": (q2k, gguf.GGMLQuantizationType.Q2_K)})
    code, out, err = run_main(capsys, "inspect-model", str(odd))
    assert code == 2 and not err
    assert "tensor 'blk.0.attn_q.weight' is Q2_K, which sglc does not read; supported GGUF tensor types: Q4_0" in out
    assert "the GGUF holds no tokenizer" in out and "status:" in out and "refused" in out
    gemma1 = tmp_path / "gemma1"
    gemma1.mkdir()
    (gemma1 / "config.json").write_text(json.dumps({"architectures": ["GemmaForCausalLM"], "hidden_size": 32,
                                                    "num_attention_heads": 2, "vocab_size": 16,
                                                    "num_hidden_layers": 1, "intermediate_size": 32}))
    code, s = inspect_json(capsys, str(gemma1))
    assert code == 2 and any("Gemma 1 is not implemented" in p for p in s["problems"])


# ---------------------------------------------------------------- sglc models

def test_models_lists_default_cache_and_paths(hub, tmp_path, capsys):
    """The default model, each cached model under the name --model takes (a projector left out),
    and the paths given, unsupported ones with the reason."""
    bloom = write_gguf(tmp_path / "bloom.gguf", "bloom", {"token_embd.weight": np.zeros((16, 32), np.float32)})
    code, out, _ = run_main(capsys, "models", str(bloom), "--json")
    assert code == 0
    listing = json.loads(out)
    rows = {r["name"]: r for r in listing["models"]}
    assert listing["hf_cache"] == str(hub)
    assert set(rows) == {"default", HF_REPO, "tiny-org/Qwen3Moe-GGUF", "tiny-org/Gemma3-GGUF",
                         "tiny-org/LlamaWide-GGUF:llama_wide-Q4_K_M.gguf",
                         "tiny-org/LlamaWide-GGUF:Q6_K/llama_wide-Q6_K.gguf", str(bloom)}
    assert {h.name for h in cached_models()} == set(rows) - {"default", str(bloom)}
    assert rows[HF_REPO]["format"] == "hf" and rows[HF_REPO]["architecture"] == "Qwen3ForCausalLM"
    assert rows["tiny-org/Gemma3-GGUF"]["architecture"] == "Gemma3ForCausalLM"
    assert all(r["supported"] for name, r in rows.items() if name != str(bloom))
    assert not rows[str(bloom)]["supported"] and "'bloom' is not supported" in rows[str(bloom)]["problems"][0]
    for name in rows:  # every listed name is one --model resolves
        if name != str(bloom):
            locate_model(name)
    code, out, _ = run_main(capsys, "models")
    assert code == 0 and "tiny-org/Qwen3Moe-GGUF" in out and "Qwen3MoeForCausalLM" in out and str(hub) in out
