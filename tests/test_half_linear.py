"""bf16 / float16 weights kept as shipped on half tiles (``half_linear``:
runtime/model/native/kernels/common/half_linear.h, models/half_linear.py), at every
instruction-set level this CPU runs.

The kernels widen each weight exactly and multiply in float32 with one fused multiply-add per input
in input order, so every level gives the same bits as the scalar reference (the generic level),
and the product is the float32 product of the widened weights to float32 accumulation error. A
float32 model of a bf16 / float16 folder runs its linears (and a tied head) on them: one copy the
file's size where a float32 linear held two float32 copies.
"""
from __future__ import annotations

import shutil

import pytest
import torch
import transformers

from sglc_runtime.model.models import load_model
from sglc_runtime.model.models.half_linear import HalfTiledLinear, half_tiles
from sglc_runtime.model.native import load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import supported_levels

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

HALF = [torch.bfloat16, torch.float16]


@pytest.fixture(params=supported_levels())
def level(request) -> str:
    why = load_cpu_ops()
    assert why is None, f"the native kernels did not build on a machine with a compiler: {why}"
    with running_level(request.param):
        yield request.param


@pytest.fixture(params=[lv for lv in supported_levels() if lv != "generic"] or ["none"])
def simd_level(request) -> str:
    """A SIMD level this CPU runs (the ones where models take half tiles)."""
    if request.param == "none":
        pytest.skip("this CPU runs no SIMD level of the native kernels")
    assert load_cpu_ops() is None
    with running_level(request.param):
        yield request.param


def test_half_tiles_hold_each_channel_s_inputs_in_order():
    w = torch.arange(40 * 64, dtype=torch.float32).reshape(40, 64).bfloat16()
    tiles = half_tiles(w)
    assert tiles.shape == (3, 64, 16) and tiles.dtype == torch.bfloat16
    for t, i, c in [(0, 0, 0), (0, 5, 3), (1, 63, 15), (2, 7, 7)]:
        assert torch.equal(tiles[t, i, c], w[16 * t + c, i])
    assert not tiles[2, :, 8:].any(), "the last tile's missing channels must be zero"


@pytest.mark.parametrize("wdtype", HALF, ids=["bf16", "f16"])
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 70, 130])
def test_half_linear_is_the_float32_product_of_the_widened_weights(level, wdtype, rows):
    """float32 rows: within float32 accumulation error of the float64 product; rows past a pass
    (4 or 8 on the SIMD levels, 64 a call) and a padded last tile are covered."""
    g = torch.Generator().manual_seed(rows)
    w = (torch.randn(200, 320, generator=g) * 0.05).to(wdtype)
    bias = torch.randn(200, generator=g)
    x = torch.randn(rows, 320, generator=g)
    lin = HalfTiledLinear(w, bias)
    y = lin(x)
    want = x.double() @ w.double().t() + bias.double()
    assert y.shape == (rows, 200) and y.dtype == torch.float32
    torch.testing.assert_close(y.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("wdtype", HALF, ids=["bf16", "f16"])
def test_every_level_computes_the_reference_bit_for_bit(wdtype, xdtype):
    """The generic level is the scalar reference; every SIMD level must give its bits exactly."""
    assert load_cpu_ops() is None
    g = torch.Generator().manual_seed(7)
    w = (torch.randn(96, 256, generator=g) * 0.05).to(wdtype)
    bias = torch.randn(96, generator=g).to(xdtype)
    outs = {}
    for lv in supported_levels():
        with running_level(lv):
            lin = HalfTiledLinear(w, bias)
            outs[lv] = [lin(torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows)).to(xdtype))
                        for rows in (1, 2, 5, 8, 13, 64, 100)]
    ref = outs["generic"]
    for lv, got in outs.items():
        for a, b in zip(got, ref):
            assert torch.equal(a, b), f"level {lv} differs from the reference"


def test_half_tiles_run_inside_stacked_linear_beside_gguf_kinds(level):
    """A fused projection of half parts (and the one-call road's row blocks) gives each part's own
    op's columns bit for bit."""
    g = torch.Generator().manual_seed(3)
    a = HalfTiledLinear((torch.randn(32, 128, generator=g) * 0.1).bfloat16(), None)
    b = HalfTiledLinear((torch.randn(48, 128, generator=g) * 0.1).half(), None)
    kinds = [a.tiled()[0], b.tiled()[0]]
    tensors = [*a.tiled()[1], *b.tiled()[1]]
    for rows in (1, 6, 100):
        x = torch.randn(rows, 128, generator=g)
        y = torch.ops.sglc_cpu.stacked_linear(x, kinds, tensors)
        assert torch.equal(y, torch.cat([a(x), b(x)], dim=1))


def test_half_linear_refuses_bad_layouts_by_name(level):
    w = torch.zeros(2, 64, 16, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="half tiles"):
        torch.ops.sglc_cpu.half_linear(torch.zeros(1, 64), w.float(), None)
    with pytest.raises(RuntimeError, match="half tiles"):
        torch.ops.sglc_cpu.half_linear(torch.zeros(1, 64), torch.zeros(2, 64, 8, dtype=torch.bfloat16), None)
    with pytest.raises(RuntimeError, match="features"):
        torch.ops.sglc_cpu.half_linear(torch.zeros(1, 32), w, None)
    with pytest.raises(RuntimeError, match="f16 weight must be f16"):
        torch.ops.sglc_cpu.stacked_linear(torch.zeros(1, 64), ["f16"], [w])
    with pytest.raises(ValueError, match="multiple of 32"):
        HalfTiledLinear(torch.zeros(16, 48, dtype=torch.bfloat16), None)


@pytest.mark.parametrize("stored", HALF, ids=["bf16", "f16"])
def test_a_float32_model_of_a_half_folder_keeps_its_weights_as_stored(tmp_path, stored, simd_level):
    """Every linear and the tied head on half tiles of the stored dtype (no float32 weight), the
    embedding looked up in place, the decode layers on one native call each; logits equal
    transformers' float32 model of the same (widened) weights, and greedy tokens agree."""
    from test_model_parity import _three_ways

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).to(stored).eval()
    hf.save_pretrained(tmp_path)
    hf = hf.float()
    model = load_model(tmp_path, dtype="float32")
    layer = model.layers[0]
    for linear in (layer.attn.qkv, layer.attn.o, layer.mlp.gate_up, layer.mlp.down, model.lm_head):
        assert isinstance(linear, HalfTiledLinear) and linear.tiled()[1][0].dtype == stored
    assert model.embed.dtype == stored and model.decode_layers is not None
    assert "on native tiles" in model.describe_kernels()
    ids = [3, 17, 5, 99, 42, 7, 64, 1, 200, 13]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0]
    for got in _three_ways(model, [ids]):
        torch.testing.assert_close(got[0], want, atol=1e-4, rtol=1e-4)


def test_a_half_folder_served_in_its_own_dtype_or_on_the_generic_level_keeps_torch_linears(tmp_path):
    """Half tiles are for float32 compute on a SIMD level: a bf16 model keeps oneDNN's packed
    bf16 linears, and at the generic level (no SIMD) a float32 model gets torch's float32 ones,
    its tied head a float32 copy beside the bf16 table looked up in place."""
    from test_model_parity import _three_ways

    from sglc_runtime.model.models.linear import Linear

    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    hf.save_pretrained(tmp_path)
    assert load_cpu_ops() is None
    assert isinstance(load_model(tmp_path, dtype="bfloat16").layers[0].attn.qkv, Linear)
    ids = [3, 17, 5, 99, 42]
    with torch.no_grad():
        want = hf.float()(torch.tensor([ids])).logits[0]
    with running_level("generic"):
        model = load_model(tmp_path, dtype="float32")
        assert isinstance(model.layers[0].attn.qkv, Linear) and isinstance(model.lm_head, Linear)
        assert model.embed.dtype == torch.bfloat16 and model.lm_head.weight.dtype == torch.float32
        for got in _three_ways(model, [ids]):
            torch.testing.assert_close(got[0], want, atol=1e-4, rtol=1e-4)
