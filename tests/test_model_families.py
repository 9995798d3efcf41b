"""Every architecture family against transformers' own classes, on tiny random-weight models.

Each case builds a model from transformers' config class (3 layers, hidden 64, vocabulary 97),
with its norm weights randomised (transformers initialises them to constants, which would hide
a wrong norm), saves it with ``save_pretrained`` (one case sharded, with an index json) and
loads the folder. The oracle is transformers' float32 forward on the same weights:

* ``test_logits_match_transformers``: our logits of one prefill, of a prefix then the rest at
  scattered slots (a cached prefix longer than the sliding window, a chunk across its edge) and
  of token-by-token decoding all equal transformers' (1e-4);
* ``test_engine_greedy_matches_transformers``: through the Engine (prefill chunks of 8 tokens,
  three prompts sharing a 20-token prefix, the later two served from the radix cache and run
  together, so one's chunks share steps with the other's decoding), 64 greedy tokens of each are
  transformers' argmax at every step.

RoPE types whose frequencies depend on the sequence length ("dynamic", "longrope") are compared
with transformers decoding token by token (its generate loop), which is what a KV cache of
rotated keys reproduces (see ``models/rope.py``); within the original window one prefill is
exact as well.
"""
from __future__ import annotations

import copy

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama import modeling_llama as hf_llama

from sglc_runtime.engine import Engine
from sglc_runtime.model.model_config import ModelConfig
from sglc_runtime.model.models import get_model_class, load_model
from sglc_runtime.model.models.moe import SparseMoE
from sglc_runtime.model.models.rope import RotaryEmbedding, rope_inv_freq
from sglc_runtime.sampling.sampling_params import SamplingParams
from test_model_parity import _three_ways
from toy_tokenizer import train_toy_tokenizer

VOCAB = 97
_BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)
_GEMMA = dict(_BASE, head_dim=16, query_pre_attn_scalar=24)


@dataclass
class Case:
    config: Callable[[], transformers.PretrainedConfig]
    cls: type
    incremental: bool = False  # frequencies depend on the length: compare with token-by-token decoding
    engine: bool = True
    shard: bool = False
    window: int | None = None


CASES: dict[str, Case] = {
    "llama3_rope_untied": Case(lambda: transformers.LlamaConfig(**_BASE, tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}), transformers.LlamaForCausalLM),
    "llama_yarn_tied": Case(lambda: transformers.LlamaConfig(**_BASE, tie_word_embeddings=True, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32}),
        transformers.LlamaForCausalLM),
    "llama_dynamic": Case(lambda: transformers.LlamaConfig(**dict(_BASE, max_position_embeddings=24), rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}), transformers.LlamaForCausalLM,
        incremental=True, engine=False),
    "qwen2_window": Case(lambda: transformers.Qwen2Config(**_BASE, use_sliding_window=True, sliding_window=6,
                                                          max_window_layers=1),
                         transformers.Qwen2ForCausalLM, window=6),
    "qwen3_sharded": Case(lambda: transformers.Qwen3Config(**_BASE, head_dim=16), transformers.Qwen3ForCausalLM,
                          shard=True),
    "mistral_window": Case(lambda: transformers.MistralConfig(**_BASE, sliding_window=7),
                           transformers.MistralForCausalLM, window=7),
    "gemma2": Case(lambda: transformers.Gemma2Config(**_GEMMA, sliding_window=7, attn_logit_softcapping=8.0,
                                                     final_logit_softcapping=2.0), transformers.Gemma2ForCausalLM,
                   window=7),
    "gemma3": Case(lambda: transformers.Gemma3TextConfig(
        **_GEMMA, sliding_window=7, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
        transformers.Gemma3ForCausalLM, window=7),
    "phi3_longrope_partial_window": Case(lambda: transformers.Phi3Config(
        **_BASE, pad_token_id=0, sliding_window=11, original_max_position_embeddings=16, rope_parameters={
            "rope_type": "longrope", "rope_theta": 1e4, "partial_rotary_factor": 0.5,
            "short_factor": [1.0 + 0.05 * i for i in range(4)], "long_factor": [1.5 + 0.2 * i for i in range(4)]}),
        transformers.Phi3ForCausalLM, incremental=True, window=11),
    "olmoe": Case(lambda: transformers.OlmoeConfig(**dict(_BASE, num_key_value_heads=4), num_experts=6,
                                                   num_experts_per_tok=2, clip_qkv=3.0), transformers.OlmoeForCausalLM),
    "qwen3_moe": Case(lambda: transformers.Qwen3MoeConfig(**_BASE, num_experts=6, num_experts_per_tok=2,
                                                          moe_intermediate_size=32, norm_topk_prob=True,
                                                          mlp_only_layers=[1]), transformers.Qwen3MoeForCausalLM),
    "mixtral_window": Case(lambda: transformers.MixtralConfig(**_BASE, num_local_experts=4, num_experts_per_tok=2,
                                                              sliding_window=9), transformers.MixtralForCausalLM,
                           window=9),
}


@dataclass
class Built:
    path: str
    hf: torch.nn.Module
    case: Case
    ours: object = field(default=None)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str], Built]:
    """Saves each case's model once (with a toy tokenizer for the Engine) and loads ours."""
    cache: dict[str, Built] = {}
    tokenizer = train_toy_tokenizer()

    def get(name: str) -> Built:
        if name not in cache:
            case = CASES[name]
            path = tmp_path_factory.mktemp(name)
            torch.manual_seed(0)
            hf = case.cls(case.config()).eval()
            with torch.no_grad():
                for n, p in hf.named_parameters():
                    if "norm" in n:  # NOTE: transformers initialises them to constants
                        p.add_(torch.randn_like(p) * 0.2)
            hf.save_pretrained(path, **({"max_shard_size": "60KB"} if case.shard else {}))
            tokenizer.save(str(path / "tokenizer.json"))
            cache[name] = Built(str(path), hf, case, load_model(path, dtype="float32"))
        return cache[name]

    return get


def _hf_logits(b: Built, ids: list[int], prefill: int) -> torch.Tensor:
    """transformers' float32 logits of every position of ``ids``: one forward, or (incremental
    cases) a prefill of the first ``prefill`` tokens and then one token at a time with its cache."""
    with torch.no_grad():
        if not b.case.incremental:
            return b.hf(torch.tensor([ids])).logits[0]
        out = b.hf(torch.tensor([ids[:prefill]]), use_cache=True)
        rows, cache = [out.logits[0]], out.cache
        for t in ids[prefill:]:
            out = b.hf(torch.tensor([[t]]), cache=cache, use_cache=True)
            rows.append(out.logits[0])
            cache = out.cache
        return torch.cat(rows)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(built, name):
    """One prefill, a prefix then the rest at scattered slots, and token by token all give
    transformers' float32 logits (past the sliding window, across its edge)."""
    b = built(name)
    if b.case.shard:
        index = json.loads((Path(b.path) / "model.safetensors.index.json").read_text())
        assert len(set(index["weight_map"].values())) > 1, "the sharded case must span several files"
    ids = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    one_go, chunked, stepwise = _three_ways(b.ours, [ids])
    want = _hf_logits(b, ids, prefill=16)
    if b.case.incremental:  # NOTE: within the original window one prefill is exact too
        torch.testing.assert_close(one_go[0][:16], want[:16], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(stepwise[0], want, atol=1e-4, rtol=1e-4)
        return
    for got in (one_go[0], chunked[0], stepwise[0]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.engine))
def test_engine_greedy_matches_transformers(built, name):
    """64 greedy tokens per prompt through the Engine (chunked prefill across the window's edge,
    a shared prefix longer than the window served from the radix cache, mixed prefill/decode
    batches) are transformers' argmax at every step."""
    b = built(name)
    engine = Engine(model=b.path, dtype="float32", num_kv_slots=512, chunked_prefill_size=8,
                    max_running_requests=4, threads=None)
    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, VOCAB, (20,), generator=gen).tolist()
    prompts = [prefix + torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in (3, 5, 14)]
    greedy = SamplingParams(temperature=0, max_new_tokens=64, ignore_eos=True)
    # NOTE: the first alone (its prefix enters the cache), then two together: the second's chunks
    # run beside the first's decode steps (mixed batches)
    outs = [engine.generate(prompts[:1], greedy)[0].token_ids]
    outs += [o.token_ids for o in engine.generate(prompts[1:], greedy)]
    assert engine.stats().cached_tokens >= 2 * (len(prefix) - 1) > 2 * (b.case.window or 0)
    checked = list(zip(prompts, outs))
    if b.case.incremental:  # NOTE: transformers token by token is slow: the first and the mixed-batch one
        checked = [checked[0], checked[2]]
    for prompt, out in checked:
        assert len(out) == 64
        prefill = min(len(prompt), 16) if b.case.incremental else len(prompt)  # NOTE: within the original window
        logits = _hf_logits(b, prompt + out, prefill=prefill)[len(prompt) - 1:-1]
        picks = logits.argmax(-1).tolist()
        for i, (ours, want) in enumerate(zip(out, picks)):
            if ours != want:  # NOTE: only a tie within float32 noise may differ
                gap = (logits[i, want] - logits[i, ours]).item()
                assert gap < 1e-5, f"step {i}: we chose {ours}, transformers {want} (gap {gap:.2e})"


# ---------------------------------------------------------------- RoPE scaling types

_ROPES = [
    {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 3.0},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0, "original_max_position_embeddings": 16,
     "beta_fast": 16, "beta_slow": 2, "mscale": 0.7, "mscale_all_dim": 1.0},
    {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 16,
     "short_factor": [1.0 + 0.1 * i for i in range(32)], "long_factor": [2.0 + 0.3 * i for i in range(32)]},
]


@pytest.mark.parametrize("rope", _ROPES, ids=lambda r: r["rope_type"])
def test_rope_scaling_matches_transformers_at_every_position(rope):
    """inv_freq and attention scaling equal ROPE_INIT_FUNCTIONS exactly, and cos/sin at each
    position equal transformers' rotary embedding as its decode loop computes them (growing
    past the original window)."""
    cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=64,
                                   rope_parameters=rope)
    want, want_scale = ROPE_INIT_FUNCTIONS[rope["rope_type"]](cfg, torch.device("cpu"))
    ours_cfg = ModelConfig.from_dict(cfg.to_dict() | {"architectures": ["LlamaForCausalLM"]})
    got, scale = rope_inv_freq(64, ours_cfg.rope_theta, ours_cfg.rope_scaling, ours_cfg.max_position_embeddings)
    assert torch.equal(got, want.float()) and scale == want_scale
    hf = hf_llama.LlamaRotaryEmbedding(cfg)
    ours = RotaryEmbedding(64, ours_cfg.rope_theta, ours_cfg.rope_scaling, ours_cfg.max_position_embeddings)
    x = torch.zeros(1, 1, 64)
    for p in (0, 5, 15, 16, 17, 40, 63, 64, 65, 100, 130):  # NOTE: increasing, as a decode loop goes
        cos, sin = hf(x, torch.tensor([[p]]))
        c, s = ours.cos_sin(torch.tensor([p]), torch.float32)
        assert torch.equal(cos[0], c[:, 0]), f"cos at position {p}"
        half = 32
        assert torch.equal(sin[0, :, half:], s[:, 0, half:]), f"sin at position {p}"


def test_unknown_rope_type_and_refused_architectures_are_named():
    """A rope type nobody implements, and the architectures we refuse, fail at config time by name."""
    base = dict(vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)
    with pytest.raises(ValueError, match="mrope"):
        ModelConfig.from_dict(dict(base, architectures=["LlamaForCausalLM"], rope_scaling={"type": "mrope"}))
    with pytest.raises(ValueError, match="Gemma3ForConditionalGeneration.*multimodal"):
        ModelConfig.from_dict(dict(base, architectures=["Gemma3ForConditionalGeneration"]))
    with pytest.raises(ValueError, match="bidirectional"):
        ModelConfig.from_dict(dict(base, architectures=["Gemma3ForCausalLM"], use_bidirectional_attention=True))


def test_triton_backend_refuses_windows_and_softcap_by_name(built):
    """The Triton backend does not run sliding windows or soft-capping: loading such a model on it
    is an error that names both features (it runs on CPU only in the interpreter)."""
    pytest.importorskip("triton")
    b = built("gemma2")
    with pytest.raises(ValueError, match=r"sliding-window attention \(window 7 on 2 of 3 layers\).*soft-capping"):
        load_model(b.path, dtype="float32", attention="triton")


def test_experts_run_grouped_by_expert(built):
    """A prefill calls each expert that got tokens once (with all its tokens), never per token,
    and the output equals a per-token reference."""
    b = built("qwen3_moe")
    moe = next(layer.mlp for layer in b.ours.layers if isinstance(layer.mlp, SparseMoE))
    calls: list[int] = []
    originals = list(moe.gate_up)

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, x):
            calls.append(x.shape[0])
            return self.inner(x)

    x = torch.randn(33, 64, generator=torch.Generator().manual_seed(3))
    moe.gate_up = [Counting(g) for g in originals]
    try:
        got = moe(x, b.ours.act)
    finally:
        moe.gate_up = originals
    weights, experts = moe.route(x)
    assert len(calls) == len(set(experts.reshape(-1).tolist())) and sum(calls) == 33 * moe.top_k
    want = torch.zeros_like(x)
    for t in range(33):
        for j in range(moe.top_k):
            e = int(experts[t, j])
            want[t] += weights[t, j] * moe.down[e](b.ours.act(moe.gate_up[e](x[t:t + 1])))[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_every_family_names_its_checkpoint_tensors():
    """Each registered architecture's class lists the tensors its checkpoints hold."""
    for name, case in CASES.items():
        cfg = ModelConfig.from_dict(case.config().to_dict() | {"architectures": [case.cls.__name__]})
        shapes = get_model_class(cfg.architecture).checkpoint_shapes(cfg)
        assert "model.embed_tokens.weight" in shapes and "model.layers.2.input_layernorm.weight" in shapes, name


@pytest.mark.parametrize("name,dtype,quantization", [
    ("gemma2", "bfloat16", "none"), ("gemma3", "bfloat16", "none"), ("phi3_longrope_partial_window", "bfloat16", "none"),
    ("mixtral_window", "bfloat16", "none"), ("qwen3_moe", None, "int8"), ("gemma3", None, "int8"),
])
def test_bf16_and_int8_weights_stay_close_to_float32(built, name, dtype, quantization):
    """Every block of the families also runs in bf16 and on int8 weights (experts included), close
    to the float32 model (the tiny models' logits are small, so cosine and top-1 are the measures)."""
    b = built(name)
    other = load_model(b.path, dtype=dtype, quantization=quantization)
    ids = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    want = _three_ways(b.ours, [ids])[0][0]
    for got in _three_ways(other, [ids]):
        got = got[0]
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        assert torch.nn.functional.cosine_similarity(got, want, dim=-1).min() > 0.99
        assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.85


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bf16_folder_run_in_float32_matches_transformers_on_half_tiles(built, name, tmp_path):
    """The same model stored in bfloat16 and run in float32 keeps its linears (experts too) as
    bf16 half tiles where the native SIMD kernels run (models/half_linear.py): its logits, three
    ways, are transformers' float32 model of the same widened weights."""
    from sglc_runtime.model.models.half_linear import HalfTiledLinear
    from sglc_runtime.model.models.tiled_linear import native_tile_kernels

    b = built(name)
    hf = copy.deepcopy(b.hf)
    with torch.no_grad():  # NOTE: the oracle: the stored values widened (buffers such as RoPE's stay float32)
        for p in hf.parameters():
            p.copy_(p.bfloat16().float())
    copy.deepcopy(hf).to(torch.bfloat16).save_pretrained(tmp_path, **({"max_shard_size": "60KB"} if b.case.shard else {}))
    ours = load_model(tmp_path, dtype="float32")
    if native_tile_kernels():
        layer = ours.layers[0]
        assert isinstance(layer.attn.o, HalfTiledLinear)
        moe = next((layer.mlp for layer in ours.layers if isinstance(layer.mlp, SparseMoE)), None)
        assert moe is None or moe.native is not None, "bf16 experts should run as one native call"
    ids = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    one_go, chunked, stepwise = _three_ways(ours, [ids])
    want = _hf_logits(Built(str(tmp_path), hf, b.case), ids, prefill=16)
    if b.case.incremental:
        torch.testing.assert_close(one_go[0][:16], want[:16], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(stepwise[0], want, atol=1e-4, rtol=1e-4)
        return
    for got in (one_go[0], chunked[0], stepwise[0]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_one_token_moe_equals_the_grouped_path(built):
    """A single token (one stream's decode step) takes the short road; it sums the same
    contributions in the same order and dtype as the grouped path."""
    b = built("qwen3_moe")
    moe = next(layer.mlp for layer in b.ours.layers if isinstance(layer.mlp, SparseMoE))
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(4))
    for t in range(5):
        one = x[t:t + 1]
        weights, experts = moe.route(one)
        assert torch.equal(moe(one, b.ours.act), moe._grouped(one, b.ours.act, weights, experts)), t


def test_a_bf16_moe_router_rounds_float32_logits_once(built):
    """A bf16 model's router computes in float32 (oneDNN's bf16 GEMV is ~15x slower for its few
    logits) and rounds once: within one bf16 rounding of the bf16 linear transformers runs."""
    b = built("qwen3_moe")
    model = load_model(b.path, dtype="bfloat16")
    moe = next(layer.mlp for layer in model.layers if isinstance(layer.mlp, SparseMoE))
    x = torch.randn(7, 64, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    got = moe.router(x)
    weight = moe.router.linear.weight  # float32, exactly the bf16 checkpoint values
    assert got.dtype == torch.bfloat16 and weight.dtype == torch.float32
    assert torch.equal(weight.to(torch.bfloat16).float(), weight)
    want = torch.nn.functional.linear(x, weight.to(torch.bfloat16))
    torch.testing.assert_close(got, want, atol=0, rtol=2 ** -7)
