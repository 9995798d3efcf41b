"""DecodeGraphs: the static (graph) decode path gives the eager path's logits, padding included.

Without a GPU the static path runs eagerly (``capture=False``) with the Triton kernels in the
interpreter, on a tiny random model; on a GPU the same checks also capture and replay graphs.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'sglc[triton]')")

from attention_cases import DEVICE  # noqa: E402

from bench.random_model import random_state_dict, tiny_config  # noqa: E402
from sglc_runtime.model.attention.triton_backend import TritonTuning  # noqa: E402
from sglc_runtime.model.cuda_graph import DecodeGraphs  # noqa: E402
from sglc_runtime.model.forward_batch import ForwardBatch  # noqa: E402
from sglc_runtime.model.model_config import ModelConfig  # noqa: E402
from sglc_runtime.model.models.llama import LlamaForCausalLM  # noqa: E402

pytestmark = pytest.mark.triton

NUM_SLOTS = 256
PAD_SLOT = NUM_SLOTS - 1


def _model(attention: str = "triton") -> LlamaForCausalLM:
    config = ModelConfig.from_dict(tiny_config())
    model = LlamaForCausalLM(config, dtype="float32", device=DEVICE, attention=attention, pack_weights=False)
    model.load_state_dict(random_state_dict(config, seed=1))
    if attention == "triton":  # short chunks: the test contexts split into several (split-K path)
        model.attn.tuning = TritonTuning(decode_block_n=16, decode_min_chunk=4, decode_max_splits=8,
                                         extend_block_m=16, extend_block_n=16)
    return model


def _prefilled(model, lengths: list[int], seed: int = 0):
    """Requests with random prompts of ``lengths`` prefilled at scattered slots."""
    gen = torch.Generator().manual_seed(seed)
    kv = model.new_kv_buffer(NUM_SLOTS)
    free = (torch.randperm(NUM_SLOTS - 1, generator=gen)).tolist()  # the last slot is the pad slot
    slots = [[free.pop() for _ in range(n)] for n in lengths]
    prompts = [torch.randint(0, 128, (n,), generator=gen).tolist() for n in lengths]
    model.forward(ForwardBatch.from_requests(prompts, slots, device=DEVICE), kv)
    return kv, slots, free, gen


def _decode_batch(slots, free, gen) -> ForwardBatch:
    for s in slots:
        s.append(free.pop())
    tokens = [[int(torch.randint(0, 128, (1,), generator=gen))] for _ in slots]
    return ForwardBatch.from_requests(tokens, slots, device=DEVICE)


@pytest.mark.parametrize("capture", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_static_decode_path_matches_the_eager_forward(capture):
    """Ragged decode batches padded to a graph size give the eager logits, step after step, and
    write only their own slots and the pad slot."""
    model = _model()
    kv, slots, free, gen = _prefilled(model, [5, 17, 9])
    graphs = DecodeGraphs(model, kv, pad_slot=PAD_SLOT, max_batch=4, max_context=64, capture=capture)
    for _ in range(3):
        batch = _decode_batch(slots, free, gen)
        before = kv.k[0].clone()
        eager = model.forward(batch, kv).clone()
        assert graphs.can_run(batch)
        static = graphs.forward(batch)
        assert static.shape == eager.shape
        torch.testing.assert_close(static, eager, atol=1e-5, rtol=1e-5)
        changed = set((kv.k[0] != before).any(-1).any(-1).nonzero().flatten().tolist())
        assert changed <= set(batch.out_cache_loc.tolist()) | {PAD_SLOT}
    # a batch of 2 after batches of 3: a smaller graph size, same answers
    slots = slots[:2]
    batch = _decode_batch(slots, free, gen)
    eager = model.forward(batch, kv).clone()
    torch.testing.assert_close(graphs.forward(batch), eager, atol=1e-5, rtol=1e-5)
    if capture:
        assert graphs.num_graphs >= 2


def test_graphs_take_only_decode_batches_that_fit():
    """Prefill chunks, too many requests and too long contexts go to the eager forward."""
    model = _model()
    kv = model.new_kv_buffer(NUM_SLOTS)
    graphs = DecodeGraphs(model, kv, pad_slot=PAD_SLOT, max_batch=2, max_context=8, capture=False)
    assert graphs.can_run(ForwardBatch.from_requests([[1], [2]], [[0, 1], [2]], device=DEVICE))
    assert not graphs.can_run(ForwardBatch.from_requests([[1, 2]], [[0, 1]], device=DEVICE))
    assert not graphs.can_run(ForwardBatch.from_requests([[1]] * 3, [[0], [1], [2]], device=DEVICE))
    assert not graphs.can_run(ForwardBatch.from_requests([[1]], [list(range(9))], device=DEVICE))


def test_graphs_need_the_triton_backend():
    """With the torch backend DecodeGraphs refuses, naming the backend."""
    model = _model("torch")
    with pytest.raises(ValueError, match="triton"):
        DecodeGraphs(model, model.new_kv_buffer(8), pad_slot=7, max_batch=2, max_context=8, capture=False)
