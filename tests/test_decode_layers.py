"""Decoder layers of decode batches as one native call each (models/decode_layers.py,
native/binding/decode_layer.h): the same logits as the decoder's Python loop, bit for bit, on the
GGUF fixtures of every architecture whose layers have a native form (dense, qkv bias, per-head q/k
norms, sandwich norms, soft-capping, sliding windows and two RoPE tables, routed experts), over
requests of different lengths past the windows, with a shared prefix; the layers that have none
keep the loop; bad use is refused by name."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sglc_runtime.model.default_model import gguf_source, resolve_model_path
from sglc_runtime.model.forward_batch import ForwardBatch
from sglc_runtime.model.models import load_model
from sglc_runtime.model.models.decode_layers import build_decode_layers
from sglc_runtime.model.models.tiled_linear import native_tile_kernels

DATA = Path(__file__).parent / "data" / "gguf"
#: fixtures whose every layer runs as one native call (tiled GGUF types and q4 tiles, a float16 file's
#: half tiles, native norms and experts; Phi-3: partial rotary and a window)
FUSED = ["gemma2-Q5_1", "gemma3-Q8_0", "llama-F16", "llama_wide-Q4_K_M", "llama_wide-Q6_K", "mistral-Q4_1",
         "mixtral-Q8_0", "phi3-Q4_0", "qwen2-Q5_0", "qwen3_wide-Q5_K_M", "qwen3moe-Q4_0"]
#: fixtures with a layer that has no native form: OLMoE's full-width q/k norms
LOOP = ["olmoe-Q4_1"]

pytestmark = pytest.mark.skipif(not native_tile_kernels(), reason="no native GGUF kernels on this machine")


def load(fixture: str):
    path = DATA / f"{fixture}.gguf"
    return load_model(resolve_model_path(path), gguf=gguf_source(path), quantization="int4")


def decode_logits(model, fused: bool, steps: int = 12) -> tuple[torch.Tensor, int]:
    """Logits of `steps` greedy decode steps of four requests (lengths 3, 9, 14 and 14, the last two
    sharing their first 10 slots), and how many steps ran the decode layers."""
    saved = model.decode_layers
    model.decode_layers = saved if fused else None
    calls = []
    run = model._decode_layers
    model._decode_layers = lambda *args: calls.append(1) or run(*args)
    try:
        prompts = [[5, 17, 30], [7 + i for i in range(9)], [40 + i for i in range(14)],
                   [40 + i for i in range(10)] + [90, 91, 92, 93]]
        room = 14 + steps + 1
        kv = model.new_kv_buffer(4 * room)
        slots = [list(range(r * room, r * room + len(p))) for r, p in enumerate(prompts)]
        slots[3][:10] = slots[2][:10]  # NOTE: a shared prefix: the cascade's case
        first = model.forward(ForwardBatch.from_requests(prompts[:3], slots[:3]), kv)
        last = model.forward(ForwardBatch.from_requests([prompts[3][10:]], [slots[3]], prefix_lens=[10]), kv)
        nxt = torch.cat([first, last]).argmax(-1).tolist()
        out = []
        for _ in range(steps):
            for r in range(4):
                slots[r].append(r * room + len(slots[r]) if r != 3 else 3 * room + len(slots[r]))
            logits = model.forward(ForwardBatch.from_requests([[t] for t in nxt], slots), kv)
            nxt = logits.argmax(-1).tolist()
            out.append(logits)
        return torch.stack(out), len(calls)
    finally:
        model.decode_layers = saved
        del model._decode_layers


@pytest.mark.parametrize("fixture", FUSED)
def test_decode_layers_give_the_loops_logits_bit_for_bit(fixture):
    model = load(fixture)
    assert model.decode_layers is not None, model.describe_kernels()
    assert "decode layers: one native call each" in model.describe_kernels()
    fused, ran = decode_logits(model, True)
    loop, ran_off = decode_logits(model, False)
    assert ran == 12 and ran_off == 0
    assert torch.equal(fused, loop), (fused - loop).abs().max()


def test_a_soft_cap_that_bites_is_the_loops_too():
    """Gemma 2's cap of 8 hardly moves the tiny fixture's scores; a cap of 0.5 changes every one."""
    model = load("gemma2-Q5_1")
    c = model.config
    model.attn.set_layer_options([c.layer_window(i) for i in range(c.num_hidden_layers)], 0.5)
    model.decode_layers = build_decode_layers(model)
    fused, ran = decode_logits(model, True, steps=4)
    loop, _ = decode_logits(model, False, steps=4)
    assert ran == 4 and torch.equal(fused, loop), (fused - loop).abs().max()


@pytest.mark.parametrize("fixture", LOOP)
def test_layers_without_a_native_form_keep_the_loop(fixture):
    assert load(fixture).decode_layers is None


def test_eager_ops_keep_the_loop_and_prefill_batches_never_take_the_decode_layers():
    path = DATA / "qwen2-Q5_0.gguf"
    assert load_model(resolve_model_path(path), gguf=gguf_source(path), quantization="int4",
                      native_ops=False).decode_layers is None
    model = load("qwen2-Q5_0")
    calls = []
    run = model._decode_layers
    model._decode_layers = lambda *args: calls.append(1) or run(*args)
    kv = model.new_kv_buffer(64)
    model.forward(ForwardBatch.from_requests([[5, 6, 7]], [[0, 1, 2]]), kv)  # prefill
    model.forward(ForwardBatch.from_requests([[8], [9, 10]], [[0, 1, 2, 3], [8, 9]]), kv)  # decode + prefill
    assert calls == []
    model.forward(ForwardBatch.from_requests([[11]], [[0, 1, 2, 3, 4]]), kv)  # decode
    assert calls == [1]


def test_bad_use_is_refused_by_name():
    model = load("qwen2-Q5_0")
    layer = torch.classes.sglc_cpu.DecodeLayer()
    with pytest.raises(RuntimeError, match="unknown projection 'qkvo'"):
        layer.set_projection("qkvo", ["q5_0"], [], None)
    with pytest.raises(RuntimeError, match="too few tensors for a q5_0 weight"):
        layer.set_projection("qkv", ["q5_0"], [], None)
    with pytest.raises(RuntimeError, match="act must be 'silu' or 'gelu_tanh'"):
        layer.set_mlp(model.layers[0].mlp_norm, None, "relu", 1e-6)
    with pytest.raises(RuntimeError, match="q_norm and k_norm come together"):
        layer.set_attention(4, 2, 16, model.layers[0].mlp_norm, None, None, 0.25, 0.0)
    x = torch.zeros(1, model.config.hidden_size, dtype=model.dtype)
    empty = torch.zeros(0)
    with pytest.raises(RuntimeError, match="set its projections, attention and MLP before forward"):
        layer.forward(x, x, empty, empty, empty, empty, empty, empty, empty, empty, None, None, None)
