"""The torch attention backend with sliding windows and soft-capping against a dense reference.

Batches mix decode requests, prefills and extends over cached prefixes (longer and shorter than
the window, chunks that cross its edge), with each request's slots scattered in the pool; the
backend runs a windowed layer and a global one of the same model (``set_layer_options``), on the
native decode kernel and on the eager path. The reference is float64 attention with
transformers' masks: key a is visible to the query at position q when a <= q and, in a windowed
layer, a > q - window; scores soft-capped as ``cap * tanh(s / cap)`` before the softmax.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglc_runtime.cache.kv_buffer import KVBuffer
from sglc_runtime.model.attention import TorchAttentionBackend, create_backend
from sglc_runtime.model.forward_batch import ForwardBatch

H, KVH, D = 6, 2, 8


def reference(q, k_all, v_all, prefix_len, window, softcap):
    """Dense attention of one request's new tokens over its whole history (float64)."""
    e = q.shape[0]
    k = k_all.repeat_interleave(H // KVH, dim=1).double()
    v = v_all.repeat_interleave(H // KVH, dim=1).double()
    s = torch.einsum("ehd,lhd->hel", q.double(), k) / math.sqrt(D)
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    pos = (prefix_len + torch.arange(e))[:, None]
    key = torch.arange(k.shape[0])[None, :]
    allowed = key <= pos
    if window is not None:
        allowed &= key > pos - window
    s = s.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hel,lhd->ehd", s.softmax(-1), v).reshape(e, H * D)


def check(prefix_lens, extend_lens, window, softcap, native, seed=0):
    gen = torch.Generator().manual_seed(seed)
    num_slots = sum(prefix_lens) + sum(extend_lens) + 16
    kv = KVBuffer(num_layers=2, num_slots=num_slots, num_kv_heads=KVH, head_dim=D)
    perm = torch.randperm(num_slots, generator=gen)
    slots, used, full_k, full_v = [], 0, [], []
    for p, e in zip(prefix_lens, extend_lens):
        slots.append(perm[used: used + p + e])
        used += p + e
        full_k.append(torch.randn(p + e, KVH, D, generator=gen))
        full_v.append(torch.randn(p + e, KVH, D, generator=gen))
        for layer in range(2):  # NOTE: the cached prefix, as earlier forwards left it
            kv.k[layer][slots[-1][:p]] = full_k[-1][:p]
            kv.v[layer][slots[-1][:p]] = full_v[-1][:p]
    batch = ForwardBatch.from_requests([[0] * e for e in extend_lens], slots, prefix_lens=list(prefix_lens))
    q = torch.randn(batch.num_tokens, H, D, generator=gen)
    k_new = torch.cat([fk[p:] for fk, p in zip(full_k, prefix_lens)])
    v_new = torch.cat([fv[p:] for fv, p in zip(full_v, prefix_lens)])
    backend = TorchAttentionBackend(H, KVH, D, native=native)
    backend.set_layer_options([window, None], softcap)
    backend.prepare(batch)
    for layer, layer_window in ((0, window), (1, None)):
        out = backend.forward(layer, q, k_new, v_new, kv)
        start = 0
        for i, (p, e) in enumerate(zip(prefix_lens, extend_lens)):
            want = reference(q[start: start + e], full_k[i], full_v[i], p, layer_window, softcap)
            torch.testing.assert_close(out[start: start + e].double(), want, atol=1e-5, rtol=1e-5,
                                       msg=lambda m: f"layer {layer}, request {i} (prefix {p}, new {e}): {m}")
            start += e
        assert torch.equal(kv.k[layer][batch.out_cache_loc], k_new)


BACKEND_PATHS = pytest.mark.parametrize("native", [None, False], ids=["native", "eager"])


@BACKEND_PATHS
@pytest.mark.parametrize("softcap", [None, 2.0])
def test_mixed_batch_with_a_window_matches_dense_reference(native, softcap):
    """Decodes past the window and inside it, a prefill longer than the window, an extend whose
    cached prefix is longer than the window and one whose chunk crosses its edge."""
    check(prefix_lens=[20, 3, 0, 17, 5], extend_lens=[1, 1, 13, 4, 6], window=7, softcap=softcap, native=native)


@BACKEND_PATHS
@pytest.mark.parametrize("softcap", [None, 2.0])
def test_pure_decode_batch_past_the_window_matches_dense_reference(native, softcap):
    """Every request of a decode batch attends only its last window slots (ragged lengths)."""
    check(prefix_lens=[30, 6, 12, 100], extend_lens=[1, 1, 1, 1], window=8, softcap=softcap, native=native)


@settings(max_examples=30, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(0, 24), st.integers(1, 9)), min_size=1, max_size=5),
       window=st.integers(1, 12), softcap=st.sampled_from([None, 1.5]), seed=st.integers(0, 2**16))
@BACKEND_PATHS
def test_any_batch_with_any_window_matches_dense_reference(native, reqs, window, softcap, seed):
    """For any mix of prefix/extend lengths and any window (1 = only itself), the windowed and the
    global layer equal the dense reference."""
    check([p for p, _ in reqs], [e for _, e in reqs], window, softcap, native, seed=seed)


def test_backends_that_cannot_run_windows_or_softcap_say_so():
    """The base interface refuses both by name (the Triton backend inherits it); plain options pass."""
    pytest.importorskip("triton")
    backend = create_backend("triton", H, KVH, 16)
    backend.set_layer_options([None, None], None)
    with pytest.raises(ValueError, match=r"triton.*sliding-window attention \(window 4 on 1 of 2 layers\)"):
        backend.set_layer_options([4, None], None)
    with pytest.raises(ValueError, match=r"soft-capping \(30.0\).*use attention backend 'torch'"):
        backend.set_layer_options([None, None], 30.0)
