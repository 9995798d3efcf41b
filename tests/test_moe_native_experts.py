"""The sparse MoE block's routing and experts in one native call each (``sglc_cpu.moe_route``,
``sglc_cpu.moe_experts``, models/moe.py): routing chooses torch's experts with torch's weights to
a few float32 ulps; where every expert is a GGUF weight on a tile kernel, the block's output equals the
Python grouped path's bit for bit, for one token and many, every GGUF kind an expert can have, bf16 and
float32, routing weights in the model's dtype or float32 (Mixtral), SiLU and tanh-GELU; it is
used only where it applies, and bad arguments are refused by name."""
from __future__ import annotations

import pytest
import torch

from gguf_blocks import gguf_tensor
from sglc_runtime.model.gguf import GGUFWeight
from sglc_runtime.model.models.gguf_linear import gguf_linear
from sglc_runtime.model.models.linear import Linear
from sglc_runtime.model.models.moe import SparseMoE, native_experts
from sglc_runtime.model.models.quantized_linear import CastLinear
from sglc_runtime.model.native import load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import supported_levels

HIDDEN, INTER, EXPERTS, TOP_K = 256, 256, 6, 2


@pytest.fixture(scope="module", autouse=True)
def kernels():
    why = load_cpu_ops()
    assert why is None, f"the native kernels did not build: {why}"


def expert_linear(kind: str, rows: int, cols: int, seed: int):
    w = GGUFWeight(f"e{seed}", kind, rows, cols, gguf_tensor(kind, rows, cols, seed=seed))
    return gguf_linear(w, None, torch.float32, pack=False, native=True)


def build_moe(gate_up_kinds: list[str], down_kinds: list[str], float_weights: bool = False) -> SparseMoE:
    # NOTE: a float32 router for any dtype, as WeightLoader.float_linear builds it
    router = CastLinear(Linear.build(torch.randn(EXPERTS, HIDDEN, generator=torch.Generator().manual_seed(1)), None,
                                     pack=False))
    gate_up = [expert_linear(k, 2 * INTER, HIDDEN, 10 + e) for e, k in enumerate(gate_up_kinds)]
    down = [expert_linear(k, HIDDEN, INTER, 30 + e) for e, k in enumerate(down_kinds)]
    return SparseMoE(router, gate_up, down, TOP_K, renormalize=True, float_weights=float_weights)


def python_path(moe: SparseMoE, x: torch.Tensor, act) -> torch.Tensor:
    weights, experts = moe.route(x)
    return moe._grouped(x, act, weights, experts)


MIXES = {
    "q4_k_m": (["Q4_K"] * EXPERTS, ["Q6_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K"]),
    "q5_k_m": (["Q5_K"] * EXPERTS, ["Q6_K", "Q5_K"] * 3),
    "32-blocks": (["Q8_0", "Q5_0", "Q5_1", "Q8_0", "Q5_0", "Q5_1"], ["Q5_1", "Q8_0", "Q5_0"] * 2),
    "q4-tiles": (["Q4_0", "Q4_1"] * 3, ["Q4_1", "Q8_0", "Q4_0"] * 2),  # NOTE: the int4 linear's q4 tiles
}


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 3, 9])
def test_native_experts_equal_the_python_grouped_path(mix, dtype, tokens):
    moe = build_moe(*MIXES[mix])
    assert moe.native is not None
    act = torch.ops.sglc_cpu.silu_mul
    x = (torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens)) * 2).to(dtype)
    got = moe(x, act)
    want = python_path(moe, x, act)
    assert got.dtype == dtype and torch.equal(got, want)
    if tokens == 1:
        weights, experts = moe.route(x)
        assert torch.equal(got, moe._one_token(x, act, weights[0], experts[0]))


@pytest.mark.parametrize("level", supported_levels())
def test_every_level_runs_the_native_experts_as_its_python_path(level):
    moe = build_moe(*MIXES["q4_k_m"])
    x = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(5)).bfloat16()
    with running_level(level):
        act = torch.ops.sglc_cpu.gelu_tanh_mul
        assert torch.equal(moe(x, act), python_path(moe, x, act))


def test_float32_routing_weights_round_as_mixtral_s_path():
    moe = build_moe(*MIXES["q4_k_m"], float_weights=True)
    x = torch.randn(4, HIDDEN, generator=torch.Generator().manual_seed(6)).bfloat16()
    weights, _ = moe.route(x)
    assert weights.dtype == torch.float32
    act = torch.ops.sglc_cpu.silu_mul
    assert torch.equal(moe(x, act), python_path(moe, x, act))


def test_the_native_call_is_made_only_where_it_applies(monkeypatch):
    moe = build_moe(*MIXES["q4_k_m"])
    calls = []
    real = torch.ops.sglc_cpu.moe_experts
    monkeypatch.setattr(torch.ops.sglc_cpu, "moe_experts", lambda *a: calls.append(1) or real(*a), raising=False)
    x = torch.randn(2, HIDDEN, generator=torch.Generator().manual_seed(7))
    moe(x, torch.ops.sglc_cpu.silu_mul)
    assert calls == [1]
    moe(x, lambda gu: torch.nn.functional.silu(gu[:, :INTER]) * gu[:, INTER:])  # an eager activation
    assert calls == [1]
    float_expert = Linear.build(torch.randn(2 * INTER, HIDDEN), None, pack=False)
    assert native_experts([float_expert] + moe.gate_up[1:], moe.down) is None


def test_bad_arguments_are_refused_by_name():
    moe = build_moe(*MIXES["q4_k_m"])
    n = moe.native
    x = torch.randn(2, HIDDEN)
    ids = torch.tensor([[0, 1], [2, EXPERTS]])
    w = torch.full((2, 2), 0.5)
    with pytest.raises(RuntimeError, match="expert id 6 outside"):
        torch.ops.sglc_cpu.moe_experts(x, ids, w, n.gate_up_kinds, n.gate_up, n.down_kinds, n.down, "silu")
    ids = torch.tensor([[0, 1], [2, 3]])
    with pytest.raises(RuntimeError, match="unknown weight kind 'q3k'"):
        torch.ops.sglc_cpu.moe_experts(x, ids, w, ["q3k"] + n.gate_up_kinds[1:], n.gate_up, n.down_kinds, n.down,
                                       "silu")
    with pytest.raises(RuntimeError, match="act must be 'silu' or 'gelu_tanh'"):
        torch.ops.sglc_cpu.moe_experts(x, ids, w, n.gate_up_kinds, n.gate_up, n.down_kinds, n.down, "relu")
    with pytest.raises(RuntimeError, match="expected \\[2 I, 256\\]"):
        torch.ops.sglc_cpu.moe_experts(x, ids, w, n.gate_up_kinds, n.gate_up, n.gate_up_kinds, n.gate_up, "silu")


def torch_route(logits: torch.Tensor, k: int, renormalize: bool, float_weights: bool):
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return (weights if float_weights else weights.to(logits.dtype)), experts


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("renormalize, float_weights", [(True, False), (False, False), (True, True)])
def test_native_routing_is_torch_s_within_a_few_ulps(dtype, renormalize, float_weights):
    logits = (torch.randn(64, 16, generator=torch.Generator().manual_seed(8)) * 3).to(dtype)
    weights, ids = torch.ops.sglc_cpu.moe_route(logits, 4, renormalize, float_weights)
    want_w, want_ids = torch_route(logits, 4, renormalize, float_weights)
    assert torch.equal(ids, want_ids)
    assert weights.dtype == want_w.dtype
    torch.testing.assert_close(weights.float(), want_w.float(), rtol=4 * 2 ** -23 if weights.dtype == torch.float32 else 2 ** -8,
                               atol=0)
    with pytest.raises(RuntimeError, match="top_k must be in \\[1, 16\\]"):
        torch.ops.sglc_cpu.moe_route(logits, 17, renormalize, float_weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, hidden", [(1, 1024), (5, 100)])
def test_native_routing_computes_the_router_logits(dtype, rows, hidden):
    """With the router's float32 weight, moe_route takes the hidden rows: its logits are the
    float32 linear's (summed in another order: within a few float32 ulps) rounded to the rows' dtype,
    as CastLinear gives them; the routing that follows is the logits' form's."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, hidden, generator=g).to(dtype)
    router = torch.randn(16, hidden, generator=g) * hidden ** -0.5
    want_logits = (x.float() @ router.T).to(dtype)
    weights, ids = torch.ops.sglc_cpu.moe_route(x, 4, True, False, router)
    ref_w, ref_ids = torch.ops.sglc_cpu.moe_route(want_logits, 4, True, False)
    if dtype == torch.float32:
        torch.testing.assert_close(weights, ref_w, rtol=1e-5, atol=1e-6)
    else:  # NOTE: a logit may round to the other bf16 neighbour; the routing then moves by at most that
        torch.testing.assert_close(weights.float(), ref_w.float(), rtol=2 ** -6, atol=2 ** -8)
    assert (ids == ref_ids).float().mean() >= 0.9
    with pytest.raises(RuntimeError, match="router must be a contiguous float32 \\[experts, %d\\]" % hidden):
        torch.ops.sglc_cpu.moe_route(x, 4, True, False, router[:, :-1].contiguous())
    with pytest.raises(RuntimeError, match="router must be a contiguous float32"):
        torch.ops.sglc_cpu.moe_route(x, 4, True, False, router.to(torch.bfloat16))


def test_a_native_moe_block_routes_few_tokens_with_its_router_inside():
    """SparseMoE hands moe_route its router's weight for decode-sized batches and the router's own
    logits from NATIVE_ROUTER_MAX_TOKENS tokens on: both give the Python roads' outputs."""
    from sglc_runtime.model.models.moe import NATIVE_ROUTER_MAX_TOKENS

    block = build_moe(*MIXES["q4_k_m"])
    assert block.router_weight is not None
    for tokens in (1, 3, NATIVE_ROUTER_MAX_TOKENS + 1):
        x = torch.randn(tokens, block.router_weight.shape[1], generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
        got = block(x, torch.ops.sglc_cpu.silu_mul)
        plan, block.native = block.native, None
        try:
            want = block(x, torch.ops.sglc_cpu.silu_mul)
        finally:
            block.native = plan
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6)
