"""GGUF files of every supported architecture, made by llama.cpp's own converter and llama-quantize from
tiny transformers models (tests/data/gguf/, scripts/make_gguf_fixtures.py), read in place.

Fixtures: Llama (llama3 rope, untied; F16), Llama 256 wide (yarn, tied; Q4_K_M, Q6_K), Mistral and
Mixtral (both converted to llama; Q4_1, Q8_0), Qwen2 (Q5_0), Qwen3 256 wide (Q4_K_M, Q5_K_M), Gemma 2
(soft-caps, windows; Q5_1), Gemma 3 (local rope, linear global scaling; Q8_0), Phi-3 (longrope,
partial rotary, window; Q4_0), OLMoE (Q4_1) and Qwen3-MoE (Q4_0): every supported tensor type but BF16.
For each file:

* the config its metadata describes is the source model's (tests/data/gguf/MODEL.config.json);
* every tensor decodes as gguf-py's ``dequantize`` does, bit for bit, and lands where the source
  model had it (its row sums correlate with the source's, MODEL.reference.json; vectors equal), and
  where transformers reads the architecture from GGUF its loader gives the same tensors exactly;
* the float path (quantization "none": the file decoded to float32) gives transformers' logits on
  those decoded weights (the source config, 1e-4): prefill, chunked over a cached prefix, token by token;
* the file's tensors run as shipped (native kernels, bf16 compute) stay within 3x the error of
  the bf16 float model on the same decoded weights: both round activations the same way, the
  native kernels' int8 activation blocks (at most 1/254 of a block's maximum) add an error of that size;
* through the Engine, greedy tokens are the oracle's argmax wherever its top-2 margin exceeds twice
  that bound (so a difference there would be a real one, not rounding), and at >= 90% of all steps.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.hf_reference import hf_causal_lm
from gguf_blocks import write_gguf
from sglc_runtime.engine import Engine
from sglc_runtime.model.default_model import cache_dir, gguf_source, resolve_model_path
from sglc_runtime.model.gguf import SUPPORTED_GGUF_ARCHITECTURES, GGUFFile, GGUFModelError, GGUFWeight
from sglc_runtime.model.gguf.architectures import rope_from_freq_factors
from sglc_runtime.model.gguf_convert import MARKER_FILE, convert_gguf
from sglc_runtime.model.model_config import ModelConfig
from sglc_runtime.model.models import load_model
from sglc_runtime.model.models.decoder import RowDispatchLinear
from sglc_runtime.model.models.tiled_linear import native_tile_kernels
from sglc_runtime.model.models.moe import SparseMoE
from sglc_runtime.model.native import kernel_info
from sglc_runtime.model.models.rope import rope_inv_freq
from sglc_runtime.model.tokenizer import Tokenizer
from sglc_runtime.sampling.sampling_params import SamplingParams
from test_model_parity import _three_ways

DATA = Path(__file__).parent / "data" / "gguf"
FIXTURES = sorted(p.stem for p in DATA.glob("*.gguf"))
VOCAB = 400
#: position-dependent rope (Phi-3's longrope): transformers compared token by token past this many
ORIGINAL_WINDOW = {"phi3": 16}
#: config fields that legitimately differ: Mistral without a window converts to (and is) a Llama
CONVERTED_AS = {"mistral": {"architecture": "LlamaForCausalLM"}}


def model_name(fixture: str) -> str:
    return fixture.split("-")[0]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: these models are tiny, and on a busy 2-core machine two threads wait
    on each other (a test's steps took 100x longer)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@dataclass
class Loaded:
    name: str
    path: Path
    folder: Path
    file: GGUFFile
    hf: torch.nn.Module
    fp32: object  # our float path (quantization none)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    cache: dict[str, Loaded] = {}

    def get(fixture: str) -> Loaded:
        if fixture not in cache:
            path = DATA / f"{fixture}.gguf"
            folder = convert_gguf(path, tmp_path_factory.mktemp(fixture))
            hf = hf_causal_lm(folder, torch.float32, gguf=path, config=DATA / f"{model_name(fixture)}.config.json")
            cache[fixture] = Loaded(model_name(fixture), path, folder, GGUFFile(path), hf,
                                    load_model(folder, dtype="float32", gguf=path))
        return cache[fixture]

    return get


def hf_logits(b: Loaded, ids: list[int]) -> torch.Tensor:
    """transformers' float32 logits of every position: one forward, or past a position-dependent
    rope's original window one token at a time (what a KV cache of rotated keys reproduces)."""
    window = ORIGINAL_WINDOW.get(b.name)
    with torch.no_grad():
        if window is None or len(ids) <= window:
            return b.hf(torch.tensor([ids])).logits[0]
        out = b.hf(torch.tensor([ids[:window]]), use_cache=True)
        rows, cache = [out.logits[0]], out.cache
        for t in ids[window:]:
            out = b.hf(torch.tensor([[t]]), cache=cache, use_cache=True)
            rows.append(out.logits[0])
            cache = out.cache
        return torch.cat(rows)


def prompt(seed: int, n: int = 40) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# ---------------------------------------------------------------- config and tensors


@pytest.mark.parametrize("fixture", FIXTURES)
def test_config_is_the_source_model_s(loaded, fixture):
    """The config the GGUF's metadata describes is the transformers model's it was converted from,
    field by field (rope scaling, windows per layer, soft-caps, norms, experts, ...)."""
    b = loaded(fixture)
    ours = ModelConfig.from_dict(json.loads((b.folder / "config.json").read_text()))
    source = ModelConfig.from_dict(json.loads((DATA / f"{b.name}.config.json").read_text()))
    for field in ModelConfig.__dataclass_fields__:
        if field in ("extra", "dtype"):
            continue
        want = CONVERTED_AS.get(b.name, {}).get(field, getattr(source, field))
        assert getattr(ours, field) == want, field


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_tensor_decodes_as_gguf_py_does(fixture):
    """Every tensor of the file, of every type (3-D experts one by one), decodes to gguf-py's
    float32 values bit for bit."""
    from gguf import GGUFReader
    from gguf import dequantize as gguf_dequantize

    f = GGUFFile(DATA / f"{fixture}.gguf")
    reader = GGUFReader(str(DATA / f"{fixture}.gguf"))
    assert len(reader.tensors) == len(f.reader.tensors)
    for t in reader.tensors:
        want = np.asarray(gguf_dequantize(t.data, t.tensor_type), dtype=np.float32)
        dims = len(f.reader.tensors[t.name].shape)
        if dims == 1:
            got = f.vector(t.name).numpy()
        elif dims == 2:
            got = f.weight(t.name).dequantize()
        else:
            got = np.stack([w.dequantize() for w in f.experts(t.name)])
        assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32)), t.name


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_tensor_lands_where_the_source_model_had_it(fixture):
    """Under its Hugging Face name, each matrix's row sums correlate with the source model's
    (> 0.95; a wrong name, q/k row order, expert or gate/up swap gives ~0) and each vector equals
    the source's (Gemma's stored 1 + w back to w: within float32 rounding of 1)."""
    f = GGUFFile(DATA / f"{fixture}.gguf")
    ref = json.loads((DATA / f"{model_name(fixture)}.reference.json").read_text())
    ours = f.float_state_dict()
    tied = f.config_dict()["tie_word_embeddings"]
    assert set(ours) == set(ref["row_sums"]) | set(ref["vectors"]) - ({"lm_head.weight"} if tied else set())
    for name, values in ref["vectors"].items():
        torch.testing.assert_close(ours[name], torch.tensor(values), atol=1e-6, rtol=1e-6, msg=name)
    for name, sums in ref["row_sums"].items():
        if name == "lm_head.weight" and tied:
            continue
        got = ours[name].double().sum(-1)
        corr = torch.corrcoef(torch.stack([got, torch.tensor(sums, dtype=torch.float64)]))[0, 1].item()
        assert corr > 0.95, f"{name}: row sums correlate {corr:.3f} with the source model's"


def test_tensors_equal_transformers_gguf_loader():
    """Where transformers reads the architecture from GGUF itself (``load_gguf_checkpoint``, its
    own names and q/k un-permutation), it gives our decoded tensors exactly (its fused experts:
    gate then up rows of each expert)."""
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    checked = 0
    for fixture in FIXTURES:
        name = model_name(fixture)
        if name in ("mixtral", "olmoe"):  # NOTE: transformers reads neither from GGUF
            continue
        f = GGUFFile(DATA / f"{fixture}.gguf")
        config = f.config_dict()
        hf_config = transformers.AutoConfig.for_model(**config)
        theirs = load_gguf_checkpoint(str(f.path), return_tensors=True,
                                      model_to_load=transformers.AutoModelForCausalLM.from_config(hf_config))["tensors"]
        ours = f.float_state_dict(config)
        for key, value in theirs.items():
            if key.endswith("mlp.experts.gate_up_proj"):
                p = key.removesuffix("gate_up_proj")
                want = torch.stack([torch.cat([ours[f"{p}{e}.gate_proj.weight"], ours[f"{p}{e}.up_proj.weight"]])
                                    for e in range(value.shape[0])])
            elif key.endswith("mlp.experts.down_proj"):
                want = torch.stack([ours[f"{key.removesuffix('down_proj')}{e}.down_proj.weight"]
                                    for e in range(value.shape[0])])
            else:
                want = ours[key]
            assert torch.equal(value.float(), want), f"{fixture}: {key}"
            checked += 1
    assert checked > 250


def test_experts_are_views_of_the_file_and_run_on_native_kernels(loaded):
    """A 3-D expert tensor is split into per-expert tensors that view the memory-mapped file (no
    copy), and in a quantized model each expert is a linear on its type's native kernel."""
    if not native_tile_kernels():
        pytest.skip(f"{kernel_info().level} runs no native integer linears (GGUF tensors are decoded there)")
    f = GGUFFile(DATA / "qwen3moe-Q4_0.gguf")
    experts = f.experts("blk.0.ffn_gate_exps.weight")
    assert len(experts) == 6 and all(isinstance(w, GGUFWeight) and w.shape == (32, 64) for w in experts)
    info = f.reader.tensors["blk.0.ffn_gate_exps.weight"]
    whole = f.reader.tensor_bytes(info, "Q4_0")
    assert all(np.shares_memory(w.raw, whole) and not w.raw.flags.owndata for w in experts)
    b = loaded("qwen3moe-Q4_0")
    model = load_model(b.folder, quantization="int4", gguf=b.path)
    moe = model.layers[0].mlp
    assert isinstance(moe, SparseMoE) and moe.num_experts == 6
    for linear in moe.gate_up + moe.down:
        small = linear.small if isinstance(linear, RowDispatchLinear) else linear
        assert small.kernel == "native"


# ---------------------------------------------------------------- logits


@pytest.mark.parametrize("fixture", FIXTURES)
def test_float_path_gives_transformers_logits_on_the_decoded_weights(loaded, fixture):
    """quantization "none" decodes the file into a float32 model whose logits are transformers'
    (source config, the same decoded weights) to 1e-4: one prefill, a prefix then the rest at
    scattered slots, token by token (past the sliding windows)."""
    b = loaded(fixture)
    ids = prompt(4)
    want = hf_logits(b, ids)
    one_go, chunked, stepwise = (x[0] for x in _three_ways(b.fp32, [ids]))
    window = ORIGINAL_WINDOW.get(b.name)
    if window is not None:  # NOTE: one prefill is transformers' only within the original window
        torch.testing.assert_close(one_go[:window], want[:window], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(stepwise, want, atol=1e-4, rtol=1e-4)
        return
    for got in (one_go, chunked, stepwise):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def native_bound(b: Loaded, ids: list[int]) -> tuple[object, float]:
    """The quantized model (the file's tensors as shipped) and its error bound: 3x the bf16 float
    model's max |logit error| on ``ids`` (every schedule), at least 1e-3."""
    want = _three_ways(b.fp32, [ids])[2][0]
    bf16 = load_model(b.folder, dtype="bfloat16", gguf=b.path)
    err = max((x[0] - want).abs().max().item() for x in _three_ways(bf16, [ids]))
    return load_model(b.folder, quantization="int4", gguf=b.path), max(3 * err, 1e-3)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_tensors_as_shipped_stay_within_the_bound(loaded, fixture):
    """The file's tensors on their kernels (bf16 compute) give the float model's logits within 3x
    the bf16 float model's own error, in every schedule."""
    b = loaded(fixture)
    ids = prompt(4)
    quantized, bound = native_bound(b, ids)
    want = _three_ways(b.fp32, [ids])[2][0]
    for got in _three_ways(quantized, [ids]):
        err = (got[0] - want).abs().max().item()
        assert err <= bound, f"max |logit error| {err:.4f} > bound {bound:.4f}"


@pytest.mark.parametrize("fixture", FIXTURES)
def test_engine_greedy_tokens_are_the_oracle_s_where_it_is_sure(loaded, fixture):
    """Through the Engine (the .gguf path as the model, its tensors as shipped, chunked prefill,
    three prompts sharing a 12-token prefix from the radix cache): every greedy token is the
    float oracle's argmax wherever the oracle's top-2 margin exceeds twice the error bound, and
    at >= 90% of the steps overall."""
    b = loaded(fixture)
    _, bound = native_bound(b, prompt(4))
    engine = Engine(model=str(b.path), quantization="int4", num_kv_slots=256, chunked_prefill_size=8,
                    max_running_requests=4, threads=1)
    prefix = prompt(7, 12)
    prompts = [prefix + prompt(8 + i, n) for i, n in enumerate((3, 5, 9))]
    greedy = SamplingParams(temperature=0, max_new_tokens=16, ignore_eos=True)
    outs = [engine.generate(prompts[:1], greedy)[0].token_ids]
    outs += [o.token_ids for o in engine.generate(prompts[1:], greedy)]
    assert engine.stats().cached_tokens >= 2 * (len(prefix) - 1)
    sure = agree = 0
    for p, out in zip(prompts, outs):
        assert len(out) == 16
        logits = _three_ways(b.fp32, [p + out])[2][0][len(p) - 1:-1]
        top2 = logits.topk(2, dim=-1)
        for i, token in enumerate(out):
            agree += int(token == int(top2.indices[i, 0]))
            if (top2.values[i, 0] - top2.values[i, 1]).item() > 2 * bound:
                sure += 1
                assert token == int(top2.indices[i, 0]), f"step {i}: {token} vs the oracle's {int(top2.indices[i, 0])}"
    # NOTE: random tiny models have flat distributions (a MoE's routing amplifies rounding): few
    # margins clear the bound, so the overall agreement is held too (measured: 45-48 of 48)
    assert agree >= 0.9 * 48, f"greedy tokens agree with the oracle at {agree} of 48 steps ({sure} sure ones)"


# ---------------------------------------------------------------- folders, rope, refusals


def test_a_gguf_resolves_to_a_config_and_tokenizer_folder(tmp_path):
    """resolve_model_path(x.gguf) writes config.json and the tokenizer files, no weights; the model
    loads from the file, the tokenizer carries the file's chat template; a folder without weights
    asks for the GGUF by name."""
    fixture = DATA / "qwen3_wide-Q4_K_M.gguf"
    folder = resolve_model_path(str(fixture))
    assert gguf_source(str(fixture)) == fixture
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", MARKER_FILE])
    tok = Tokenizer(folder)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(tok.encode("the quick brown fox")) == "the quick brown fox"
    with pytest.raises(FileNotFoundError, match="gguf="):
        load_model(folder)


def test_llama3_rope_comes_back_from_rope_freqs_and_anything_else_rotates_as_written():
    """llama.cpp bakes Llama 3's rope scaling into per-frequency factors: a Llama 3 recipe comes
    back as "llama3" (the llama fixture's config says so), other factors as per-frequency factors
    whose frequencies are llama.cpp's (base^(-2i/d) / factor_i)."""
    factors = np.array([1.0, 1.5, 3.0, 2.0, 4.0, 4.0, 4.0, 4.0], dtype=np.float32)
    scaling = rope_from_freq_factors(factors, 10000.0, 16, 128)
    assert scaling["rope_type"] == "longrope"
    inv_freq, attention = rope_inv_freq(16, 10000.0, scaling, 128)
    expected = 1.0 / (torch.tensor(factors) * 10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    torch.testing.assert_close(inv_freq, expected, atol=0, rtol=1e-6)
    assert attention == 1.0
    assert rope_from_freq_factors(np.ones(8, dtype=np.float32), 10000.0, 16, 128) is None
    llama3 = GGUFFile(DATA / "llama-F16.gguf").config_dict()["rope_scaling"]
    assert llama3 == {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64}


def test_other_architectures_and_unknown_tensors_are_refused_by_name(tmp_path):
    """A GGUF of an architecture sglc does not run is refused naming it and listing those it runs;
    a tensor no mapping knows is refused by name, before any folder is written."""
    embd = np.zeros((16, 32), dtype=np.float32)
    bloom = write_gguf(tmp_path / "bloom.gguf", "bloom", {"token_embd.weight": embd})
    supported = ", ".join(SUPPORTED_GGUF_ARCHITECTURES)
    with pytest.raises(GGUFModelError, match=f"'bloom' is not supported; supported: {supported}"):
        GGUFFile(bloom).config_dict()
    with pytest.raises(ValueError, match="bloom"):
        resolve_model_path(str(bloom))
    odd = write_gguf(tmp_path / "odd.gguf", "qwen2", {"token_embd.weight": embd,
                                                       "blk.0.ffn_magic.weight": embd})
    with pytest.raises(GGUFModelError, match="blk.0.ffn_magic.weight"):
        GGUFFile(odd).state_dict()
    with pytest.raises(GGUFModelError, match="ffn_magic"):
        resolve_model_path(str(odd))
    assert not (cache_dir() / "bloom").exists() and not (cache_dir() / "odd").exists()
