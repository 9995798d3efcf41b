"""Our Llama implementation against Hugging Face transformers, and paged-KV consistency.

The ``model``-marked tests load the real SmolLM2-135M (converted default model) once per
module; the others use tiny random models saved by transformers itself.
"""
from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama import modeling_llama as hf_llama

from sglc_runtime.model.default_model import find_default_gguf, resolve_model_path
from sglc_runtime.model.forward_batch import ForwardBatch
from sglc_runtime.model.model_config import ModelConfig
from sglc_runtime.model.models import LlamaForCausalLM, get_model_class, load_model
from sglc_runtime.model.models.linear import Linear, can_pack_weights
from sglc_runtime.model.models.rope import RotaryEmbedding, apply_rope, rope_inv_freq
from sglc_runtime.model.tokenizer import Tokenizer
from sglc_runtime.model.weights import WeightError

# ---------------------------------------------------------------- helpers


def _prefill_all_logits(model, ids: list[int], slots: list[int] | None = None, kv=None):
    """Logits of every position of ``ids`` from one prefill."""
    kv = kv or model.new_kv_buffer(len(ids) + 8)
    slots = slots if slots is not None else list(range(len(ids)))
    return model.forward(ForwardBatch.from_requests([ids], [slots], logits_start=[0]), kv)


def _three_ways(model, prompts: list[list[int]]):
    """Per-position logits of each prompt computed (a) in one prefill batch, (b) as a prefix then
    the rest on top of the cached prefix, at shuffled non-contiguous slots, (c) token by token."""
    n = sum(len(p) for p in prompts)
    # (a) one prefill batch, contiguous slots
    kv = model.new_kv_buffer(n)
    slots, start = [], 0
    for p in prompts:
        slots.append(list(range(start, start + len(p))))
        start += len(p)
    out = model.forward(ForwardBatch.from_requests(prompts, slots, logits_start=[0] * len(prompts)), kv)
    one_go = list(out.split([len(p) for p in prompts]))

    # (b) prefix chunk, then the rest; slots scattered over a larger buffer in random order
    kv = model.new_kv_buffer(3 * n)
    perm = torch.randperm(3 * n, generator=torch.Generator().manual_seed(1)).tolist()
    cuts = [len(p) * 2 // 5 for p in prompts]
    slots = [perm[i * len(perm) // len(prompts) :][: len(p)] for i, p in enumerate(prompts)]
    first = model.forward(
        ForwardBatch.from_requests(
            [p[:c] for p, c in zip(prompts, cuts) if c],
            [s[:c] for s, c in zip(slots, cuts) if c],
            logits_start=[0] * sum(1 for c in cuts if c),
        ),
        kv,
    ).split([c for c in cuts if c])
    second = model.forward(
        ForwardBatch.from_requests(
            [p[c:] for p, c in zip(prompts, cuts)], slots, logits_start=[0] * len(prompts)
        ),
        kv,
    ).split([len(p) - c for p, c in zip(prompts, cuts)])
    firsts = iter(first)
    chunked = [torch.cat([next(firsts), s]) if c else s for c, s in zip(cuts, second)]

    # (c) token by token, all requests decoding together; finished requests drop out
    kv = model.new_kv_buffer(n)
    per_req: list[list[torch.Tensor]] = [[] for _ in prompts]
    base = [sum(len(p) for p in prompts[:i]) for i in range(len(prompts))]
    for t in range(max(len(p) for p in prompts)):
        live = [i for i, p in enumerate(prompts) if t < len(p)]
        batch = ForwardBatch.from_requests(
            [[prompts[i][t]] for i in live], [list(range(base[i], base[i] + t + 1)) for i in live]
        )
        for i, row in zip(live, model.forward(batch, kv)):
            per_req[i].append(row)
    stepwise = [torch.stack(rows) for rows in per_req]
    return one_go, chunked, stepwise


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def real():
    """(path, our fp32 model, HF fp32 model) for SmolLM2-135M, both on its GGUF's weights decoded."""
    from bench.hf_reference import hf_causal_lm

    path = resolve_model_path(None)
    ours = load_model(path, dtype="float32", gguf=find_default_gguf())
    hf = hf_causal_lm(path, torch.float32, gguf=find_default_gguf())
    return path, ours, hf


@pytest.mark.model
def test_prefill_logits_match_transformers(real):
    """fp32 logits of a 64-token prompt equal transformers' LlamaForCausalLM to < 1e-3."""
    _, ours, hf = real
    ids = torch.randint(100, 49152, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    got = _prefill_all_logits(ours, ids)
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].float()
    diff = (got - want).abs().max().item()
    print(f"max |logits - HF logits| over 64 positions: {diff:.2e}")
    assert got.shape == (64, 49152) and got.dtype == torch.float32
    assert diff < 1e-3
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.model
def test_one_prefill_equals_prefix_then_rest_equals_token_by_token(real):
    """Logits do not depend on how a prompt is split into forward steps or where its KV lives."""
    _, ours, _ = real
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(100, 49152, (n,), generator=gen).tolist() for n in (21, 9, 3, 14)]
    one_go, chunked, stepwise = _three_ways(ours, prompts)
    worst = 0.0
    for a, b, c in zip(one_go, chunked, stepwise):
        worst = max(worst, (a - b).abs().max().item(), (a - c).abs().max().item())
        assert torch.equal(a.argmax(-1), c.argmax(-1))
    print(f"max logit difference between the three schedules: {worst:.2e}")
    assert worst < 1e-3


@pytest.mark.model
def test_bf16_stays_close_to_fp32(real):
    """The bfloat16 model runs and mostly agrees with fp32 on the next token of a real chat prompt."""
    path, ours, _ = real
    bf16 = load_model(path, dtype="bfloat16", gguf=find_default_gguf())
    assert bf16.embed.dtype == torch.bfloat16
    tok = Tokenizer(path)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Name the planets of the solar system in order from the sun, "
                                     "and say one fact about each."}],
        add_generation_prompt=True, tokenize=True,
    ) + tok.encode("Sure! Here are the planets, in order from the sun: 1. Mercury")
    a, b = _prefill_all_logits(ours, ids), _prefill_all_logits(bf16, ids)
    assert b.dtype == torch.float32 and torch.isfinite(b).all()
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1).min().item()
    print(f"bf16 vs fp32: top-1 agreement {agree:.2%}, min cosine {cos:.4f}, "
          f"max abs diff {(a - b).abs().max().item():.3f}")
    assert agree >= 0.9 and cos > 0.98
    one_go, _, stepwise = _three_ways(bf16, [ids[:9], ids[:4]])
    for x, y in zip(one_go, stepwise):
        assert torch.nn.functional.cosine_similarity(x, y, dim=-1).min() > 0.99


# ---------------------------------------------------------------- tiny random models

_TINY = dict(
    vocab_size=97,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def _save_tiny(tmp_path, cls, config):
    torch.manual_seed(0)
    model = cls(config).eval()
    model.save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize(
    "name",
    ["llama_tied", "llama_llama3_rope_bias", "llama_linear_rope", "qwen2", "mistral"],
)
def test_tiny_models_match_transformers(tmp_path, name):
    """Configs saved by transformers 5 (rope_parameters, biases, tying) load and match its logits."""
    if name == "qwen2":
        cfg = transformers.Qwen2Config(**_TINY, tie_word_embeddings=False)
        cls = transformers.Qwen2ForCausalLM
    elif name == "mistral":
        cfg = transformers.MistralConfig(**_TINY, sliding_window=None)
        cls = transformers.MistralForCausalLM
    else:
        rope = {
            "llama_tied": {"rope_type": "default", "rope_theta": 500.0},
            "llama_llama3_rope_bias": {
                "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
            },
            "llama_linear_rope": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 3.0},
        }[name]
        cfg = transformers.LlamaConfig(
            **_TINY, rope_parameters=rope, tie_word_embeddings=name == "llama_tied",
            attention_bias=name == "llama_llama3_rope_bias",
        )
        cls = transformers.LlamaForCausalLM
    hf = _save_tiny(tmp_path, cls, cfg)
    ours = load_model(tmp_path, dtype="float32")
    ids = torch.randint(0, 97, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0]
    got_one, got_chunked, got_steps = _three_ways(ours, [ids])
    for got in (got_one[0], got_chunked[0], got_steps[0]):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.skipif(
    not can_pack_weights(torch.bfloat16, torch.device("cpu")), reason="no oneDNN bf16 on this CPU"
)
def test_prepacked_bf16_linears_agree_with_plain_linears(tmp_path):
    """Pre-packed oneDNN weights compute the same model as F.linear, up to bf16 rounding."""
    _save_tiny(tmp_path, transformers.LlamaForCausalLM, transformers.LlamaConfig(**_TINY))
    packed = load_model(tmp_path, dtype="bfloat16", pack_weights=True)
    plain = load_model(tmp_path, dtype="bfloat16", pack_weights=False)
    assert packed.pack_weights and not plain.pack_weights
    ids = torch.randint(0, 97, (24,), generator=torch.Generator().manual_seed(6)).tolist()
    a, b = _prefill_all_logits(packed, ids), _prefill_all_logits(plain, ids)
    assert torch.nn.functional.cosine_similarity(a, b, dim=-1).min() > 0.999


@pytest.mark.skipif(
    not can_pack_weights(torch.float32, torch.device("cpu")), reason="no oneDNN on this build"
)
def test_fp32_linear_uses_plain_weights_below_4_rows_and_packed_from_4():
    """An fp32 packed Linear keeps F.linear for 1-3 rows, oneDNN from 4, and both compute x @ W.T + b."""
    gen = torch.Generator().manual_seed(7)
    w, b = torch.randn(40, 24, generator=gen), torch.randn(40, generator=gen)
    lin = Linear.build(w, b, pack=True)
    assert lin.weight is w and lin.packed is not None
    assert [lin.uses_packed(n) for n in (1, 2, 3, 4, 8, 512)] == [False] * 3 + [True] * 3
    for rows in (1, 3, 4, 8, 33):
        x = torch.randn(rows, 24, generator=gen)
        torch.testing.assert_close(lin(x), torch.nn.functional.linear(x, w, b), atol=1e-5, rtol=1e-5)
    plain = Linear.build(w, b, pack=False)
    assert plain.packed is None and not plain.uses_packed(64)


@pytest.mark.skipif(
    not can_pack_weights(torch.float32, torch.device("cpu")), reason="no oneDNN on this build"
)
def test_fp32_packed_model_matches_plain_model_in_prefill_and_batched_decode(tmp_path):
    """fp32 pre-packed linears (on by default) give the logits of plain F.linear to fp32 rounding."""
    _save_tiny(tmp_path, transformers.LlamaForCausalLM, transformers.LlamaConfig(**_TINY))
    packed = load_model(tmp_path, dtype="float32")
    plain = load_model(tmp_path, dtype="float32", pack_weights=False)
    assert packed.pack_weights and not plain.pack_weights
    gen = torch.Generator().manual_seed(8)
    prompts = [torch.randint(0, 97, (n,), generator=gen).tolist() for n in (7, 12, 3, 9, 5)]
    for a, b in zip(*(_three_ways(m, prompts)[0] for m in (packed, plain))):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(*(_three_ways(m, prompts)[2] for m in (packed, plain))):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_packing_where_onednn_cannot_is_a_clear_error():
    """pack_weights=True off the CPU raises a ValueError naming pack_weights."""
    cfg = ModelConfig.from_dict(transformers.LlamaConfig(**_TINY).to_dict())
    with pytest.raises(ValueError, match="pack_weights"):
        LlamaForCausalLM(cfg, dtype="float32", device="meta", pack_weights=True)


# ---------------------------------------------------------------- RoPE


def _hf_llama_config(rope_parameters):
    return transformers.LlamaConfig(
        hidden_size=256, num_attention_heads=4, max_position_embeddings=8192, rope_parameters=rope_parameters
    )


_ROPES = [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 2048},
]


@pytest.mark.parametrize("rope", _ROPES, ids=lambda r: r["rope_type"])
def test_rope_inv_freq_matches_transformers(rope):
    """inv_freq and attention scaling equal transformers' rope init functions exactly."""
    cfg = _hf_llama_config(rope)
    if rope["rope_type"] == "default":
        want, want_scale = hf_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        want, want_scale = ROPE_INIT_FUNCTIONS[rope["rope_type"]](cfg, torch.device("cpu"))
    ours_cfg = ModelConfig.from_dict(cfg.to_dict() | {"architectures": ["LlamaForCausalLM"]})
    got, scale = rope_inv_freq(64, ours_cfg.rope_theta, ours_cfg.rope_scaling, ours_cfg.max_position_embeddings)
    assert torch.equal(got, want.float()) and scale == want_scale


@pytest.mark.parametrize("rope", _ROPES, ids=lambda r: r["rope_type"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_rotation_matches_transformers(rope, dtype):
    """Rotated q/k equal HF's rotary embedding + apply_rotary_pos_emb, incl. positions past the table."""
    cfg = _hf_llama_config(rope)
    ours_cfg = ModelConfig.from_dict(cfg.to_dict() | {"architectures": ["LlamaForCausalLM"]})
    positions = torch.tensor([0, 1, 5, 4095, 4096, 7000, 3])
    x = torch.randn(len(positions), 4, 64, generator=torch.Generator().manual_seed(5)).to(dtype)
    hf_rope = hf_llama.LlamaRotaryEmbedding(cfg)
    cos, sin = hf_rope(x, positions[None])
    want, _ = hf_llama.apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], cos, sin)
    ours = RotaryEmbedding(64, ours_cfg.rope_theta, ours_cfg.rope_scaling, ours_cfg.max_position_embeddings)
    c, s = ours.cos_sin(positions, dtype)
    got = apply_rope(x, c, s)
    torch.testing.assert_close(got, want[0].transpose(0, 1), atol=0, rtol=0)


def test_unsupported_rope_scaling_is_rejected():
    """A rope type we do not implement fails at config time, naming it."""
    with pytest.raises(ValueError, match="proportional"):
        ModelConfig.from_dict(dict(
            architectures=["LlamaForCausalLM"], vocab_size=10, hidden_size=8, intermediate_size=8,
            num_hidden_layers=1, num_attention_heads=2, rope_scaling={"type": "proportional", "factor": 2.0},
        ))


# ---------------------------------------------------------------- bad inputs


def test_unknown_model_path_is_a_clear_error(tmp_path):
    """A path that does not exist raises FileNotFoundError naming it."""
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        resolve_model_path(str(missing))


def test_folder_without_weights_is_a_clear_error(tmp_path):
    """A folder with config.json but no safetensors is rejected, naming the folder."""
    transformers.LlamaConfig(**_TINY).save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="safetensors"):
        resolve_model_path(tmp_path)
    with pytest.raises(FileNotFoundError, match=str(tmp_path.name)):
        load_model(tmp_path)


def test_missing_and_misshapen_tensors_are_named(tmp_path):
    """Loading a checkpoint lacking a tensor, or with a wrong shape, names the tensor."""
    from safetensors.torch import load_file, save_file

    _save_tiny(tmp_path, transformers.LlamaForCausalLM, transformers.LlamaConfig(**_TINY))
    file = tmp_path / "model.safetensors"
    tensors = load_file(str(file))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(file))
    with pytest.raises(WeightError, match="model.layers.1.mlp.up_proj.weight"):
        load_model(tmp_path)
    tensors["model.layers.1.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(file))
    with pytest.raises(WeightError, match=r"up_proj.weight: expected \(80, 48\)"):
        load_model(tmp_path)


def test_unsupported_architecture_is_rejected(tmp_path):
    """A config.json naming an architecture we do not implement raises ValueError naming it."""
    _save_tiny(tmp_path, transformers.LlamaForCausalLM, transformers.LlamaConfig(**_TINY))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        resolve_model_path(tmp_path)
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        get_model_class("GPT2LMHeadModel")
    assert get_model_class("Qwen2ForCausalLM") is LlamaForCausalLM
