"""Torch attention backend, ForwardBatch and KVBuffer: checked against a dense reference."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglc_runtime.cache.kv_buffer import KVBuffer
from sglc_runtime.model.attention import AttentionBackend, TorchAttentionBackend, available_backends, create_backend
from sglc_runtime.model.forward_batch import ForwardBatch

H, KVH, D = 6, 2, 8


def _reference(q, k_all, v_all, prefix_len):
    """Dense causal attention of one request, kv heads repeated (HF repeat_kv layout)."""
    e = q.shape[0]
    group = H // KVH
    k = k_all.repeat_interleave(group, dim=1)  # [L, H, D]
    v = v_all.repeat_interleave(group, dim=1)
    scores = torch.einsum("ehd,lhd->hel", q.double(), k.double()) / math.sqrt(D)
    allowed = torch.arange(k.shape[0])[None, :] <= (prefix_len + torch.arange(e))[:, None]
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    out = torch.einsum("hel,lhd->ehd", scores.softmax(-1), v.double())
    return out.reshape(e, H * D)


def _run_case(prefix_lens, extend_lens, num_slots=200, seed=0, native=None):
    """Fill prefixes at random slots, run one forward, compare with the reference per request."""
    gen = torch.Generator().manual_seed(seed)
    kv = KVBuffer(num_layers=2, num_slots=num_slots, num_kv_heads=KVH, head_dim=D)
    perm = torch.randperm(num_slots, generator=gen)
    slots, used = [], 0
    full_k, full_v = [], []
    for p, e in zip(prefix_lens, extend_lens):
        s = perm[used : used + p + e]
        used += p + e
        slots.append(s)
        full_k.append(torch.randn(p + e, KVH, D, generator=gen))
        full_v.append(torch.randn(p + e, KVH, D, generator=gen))
        # the prefix is already cached (layer 1), as an earlier forward would have left it
        kv.k[1][s[:p]] = full_k[-1][:p]
        kv.v[1][s[:p]] = full_v[-1][:p]
    batch = ForwardBatch.from_requests(
        [[0] * e for e in extend_lens], slots, prefix_lens=list(prefix_lens)
    )
    q = torch.randn(batch.num_tokens, H, D, generator=gen)
    k_new = torch.cat([fk[p:] for fk, p in zip(full_k, prefix_lens)])
    v_new = torch.cat([fv[p:] for fv, p in zip(full_v, prefix_lens)])
    before_k = kv.k[1].clone()
    backend = TorchAttentionBackend(H, KVH, D, native=native)
    backend.prepare(batch)
    out = backend.forward(1, q, k_new, v_new, kv)
    return batch, q, out, full_k, full_v, kv, before_k, slots


#: None: decode rows on the native CPU kernel (the default where it builds); False: eager SDPA
BACKEND_PATHS = pytest.mark.parametrize("native", [None, False], ids=["native", "eager"])


def _check(prefix_lens, extend_lens, seed=0, native=None):
    batch, q, out, full_k, full_v, kv, before_k, slots = _run_case(prefix_lens, extend_lens, seed=seed,
                                                                   native=native)
    assert out.shape == (batch.num_tokens, H * D)
    start = 0
    for i, (p, e) in enumerate(zip(prefix_lens, extend_lens)):
        ref = _reference(q[start : start + e], full_k[i], full_v[i], p)
        torch.testing.assert_close(out[start : start + e].double(), ref, atol=1e-5, rtol=1e-5)
        start += e
    # only the new tokens' slots changed, and they hold the new keys
    changed = (kv.k[1] != before_k).any(-1).any(-1).nonzero().flatten()
    assert set(changed.tolist()) <= set(batch.out_cache_loc.tolist())
    torch.testing.assert_close(kv.k[1][batch.out_cache_loc], torch.cat([fk[p:] for fk, p in zip(full_k, prefix_lens)]))


@BACKEND_PATHS
def test_mixed_batch_matches_dense_reference(native):
    """Decode, prefill and prefix-extend requests in one batch each match dense causal attention."""
    _check(prefix_lens=[5, 0, 17, 3, 0], extend_lens=[1, 7, 4, 1, 1], native=native)


@BACKEND_PATHS
def test_pure_decode_batch_with_equal_lengths_matches_reference(native):
    """The unpadded fast path (all requests the same length) matches the reference."""
    _check(prefix_lens=[9, 9, 9], extend_lens=[1, 1, 1], native=native)


@BACKEND_PATHS
def test_pure_decode_batch_with_ragged_lengths_matches_reference(native):
    """The padded decode path masks each request's padding."""
    _check(prefix_lens=[0, 1, 30, 12], extend_lens=[1, 1, 1, 1], native=native)


@settings(max_examples=25, deadline=None)
@given(
    reqs=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 6)), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
@BACKEND_PATHS
def test_any_batch_shape_matches_dense_reference(native, reqs, seed):
    """For any mix of prefix/extend lengths, paged attention equals dense causal attention."""
    _check([p for p, _ in reqs], [e for _, e in reqs], seed=seed, native=native)


def test_forward_before_prepare_raises():
    """Calling forward without prepare is a clear error, not stale state."""
    backend = create_backend("torch", H, KVH, D)
    kv = KVBuffer(1, 4, KVH, D)
    with pytest.raises(RuntimeError, match="prepare"):
        backend.forward(0, torch.zeros(1, H, D), torch.zeros(1, KVH, D), torch.zeros(1, KVH, D), kv)


def test_registry_knows_torch_and_rejects_unknown_names():
    """The registry builds 'torch' and names the available backends for an unknown one."""
    assert "torch" in available_backends()
    assert isinstance(create_backend("torch", H, KVH, D), AttentionBackend)
    with pytest.raises(ValueError, match="torch"):
        create_backend("nope", H, KVH, D)


def test_heads_must_be_a_multiple_of_kv_heads():
    """GQA needs num_heads divisible by num_kv_heads."""
    with pytest.raises(ValueError, match="multiple"):
        create_backend("torch", 5, 2, D)


# ---------------------------------------------------------------- ForwardBatch / KVBuffer


def test_from_requests_derives_positions_and_out_cache_loc():
    """Positions continue after the prefix; out_cache_loc is the tail of each kv_indices."""
    b = ForwardBatch.from_requests([[7, 8], [9]], [[10, 11, 12, 13], [40, 41]])
    assert b.positions.tolist() == [2, 3, 1]
    assert b.out_cache_loc.tolist() == [12, 13, 41]
    assert b.prefix_lens == [2, 1] and b.extend_lens == [2, 1]
    assert b.logits_start == [1, 0] and b.num_logits == 2
    assert not b.is_decode
    assert ForwardBatch.from_requests([[1], [2]], [[0], [5, 6]]).is_decode


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(new_token_ids=[[1, 2]], kv_indices=[[0, 1]], prefix_lens=[1]), "slots"),
        (dict(new_token_ids=[[1, 2]], kv_indices=[[0, 1]], logits_start=[2]), "logits_start"),
        (dict(new_token_ids=[[]], kv_indices=[[]]), "extend_len"),
    ],
)
def test_inconsistent_batches_are_rejected(kwargs, match):
    """A batch whose per-request lists disagree raises ValueError naming the field."""
    with pytest.raises(ValueError, match=match):
        ForwardBatch.from_requests(**kwargs)


def test_kv_buffer_sizes_and_budget():
    """Byte accounting: per-slot size, total size and slots that fit a budget agree."""
    per_slot = KVBuffer.bytes_per_slot(30, 3, 64, torch.float32)
    assert per_slot == 2 * 30 * 3 * 64 * 4
    assert KVBuffer.slots_for_budget(10 * per_slot + 5, 30, 3, 64, torch.float32) == 10
    assert KVBuffer.slots_for_budget(-1, 30, 3, 64, torch.float32) == 0
    buf = KVBuffer(2, 16, 3, 8, dtype=torch.bfloat16)
    assert buf.nbytes == 16 * KVBuffer.bytes_per_slot(2, 3, 8, torch.bfloat16)
    assert buf.k[1].shape == (16, 3, 8) and buf.v[0].dtype == torch.bfloat16
    with pytest.raises(ValueError):
        KVBuffer(0, 16, 3, 8)


# ---------------------------------------------------------------- decode workspace


class _Sim:
    """Requests with random K/V histories living at random slots of one KVBuffer."""

    def __init__(self, seed: int, num_slots: int = 400):
        self.gen = torch.Generator().manual_seed(seed)
        self.kv = KVBuffer(num_layers=2, num_slots=num_slots, num_kv_heads=KVH, head_dim=D)
        self.free = torch.randperm(num_slots, generator=self.gen).tolist()
        self.slots: dict[str, list[int]] = {}
        self.keys: dict[str, list[torch.Tensor]] = {}
        self.values: dict[str, list[torch.Tensor]] = {}

    def add(self, name: str, prefix_len: int) -> None:
        """A request whose first prefix_len tokens are already cached (both layers)."""
        self.slots[name] = [self.free.pop() for _ in range(prefix_len)]
        self.keys[name] = [torch.randn(KVH, D, generator=self.gen) for _ in range(prefix_len)]
        self.values[name] = [torch.randn(KVH, D, generator=self.gen) for _ in range(prefix_len)]
        for layer in range(2):
            for s, k, v in zip(self.slots[name], self.keys[name], self.values[name]):
                self.kv.k[layer][s], self.kv.v[layer][s] = k, v

    def step(self, backend, names: list[str], extend: dict[str, int] | None = None) -> None:
        """One forward (both layers) adding tokens to ``names``; checks against the reference."""
        extend = extend or {}
        lens = [extend.get(n, 1) for n in names]
        prefix = [len(self.slots[n]) for n in names]
        for n, e in zip(names, lens):
            self.slots[n] += [self.free.pop() for _ in range(e)]
            self.keys[n] += [torch.randn(KVH, D, generator=self.gen) for _ in range(e)]
            self.values[n] += [torch.randn(KVH, D, generator=self.gen) for _ in range(e)]
        batch = ForwardBatch.from_requests([[0] * e for e in lens], [self.slots[n] for n in names], prefix)
        q = torch.randn(batch.num_tokens, H, D, generator=self.gen)
        k_new = torch.stack([k for n, e in zip(names, lens) for k in self.keys[n][-e:]])
        v_new = torch.stack([v for n, e in zip(names, lens) for v in self.values[n][-e:]])
        backend.prepare(batch)
        for layer in range(2):
            out = backend.forward(layer, q, k_new, v_new, self.kv)
            start = 0
            for n, p, e in zip(names, prefix, lens):
                ref = _reference(q[start : start + e], torch.stack(self.keys[n]), torch.stack(self.values[n]), p)
                torch.testing.assert_close(out[start : start + e].double(), ref, atol=1e-5, rtol=1e-5)
                start += e


def test_decode_workspace_survives_joins_leaves_reorders_and_prefills():
    """After its first gather the workspace is never rebuilt from scratch: the same requests add
    their new token in place, and a changed batch carries each continuing request's row over."""
    sim = _Sim(seed=7)
    backend = TorchAttentionBackend(H, KVH, D, native=False)  # NOTE: the native kernel needs no workspace
    ws = backend.workspace
    for name, p in (("a", 5), ("b", 17), ("c", 0)):
        sim.add(name, p)
    sim.step(backend, ["a", "b", "c"])
    assert (ws.num_rebuilds, ws.num_carries) == (1, 0)
    for _ in range(4):
        sim.step(backend, ["a", "b", "c"])
    assert (ws.num_rebuilds, ws.num_carries) == (1, 0)  # in place: only the new rows were written
    sim.step(backend, ["a", "c"])  # b leaves
    sim.step(backend, ["c", "a"])  # reorder
    sim.add("d", 9)
    sim.step(backend, ["c", "a", "d"])  # d joins
    assert (ws.num_rebuilds, ws.num_carries) == (1, 3)
    sim.step(backend, ["c", "a", "d"], extend={"a": 3})  # a mixed batch goes around the workspace
    sim.step(backend, ["c", "a", "d"])  # ... its tokens are gathered into the same rows, in place
    sim.step(backend, ["c", "a", "d"])
    assert (ws.num_rebuilds, ws.num_carries) == (1, 3)


def test_decode_workspace_does_not_carry_slots_rewritten_since():
    """A finished request's slots, handed again to a new request and prefilled with other K/V,
    look like a continuation of its old row: the written slots rule it out."""
    sim = _Sim(seed=11)
    backend = TorchAttentionBackend(H, KVH, D, native=False)
    sim.add("a", 6)
    sim.add("b", 8)
    sim.step(backend, ["a", "b"])
    sim.step(backend, ["a", "b"])
    sim.free += list(reversed(sim.slots.pop("b")))  # b finishes; its 10 slots are free again
    sim.slots["e"], sim.keys["e"], sim.values["e"] = [], [], []
    sim.step(backend, ["e"], extend={"e": 10})  # e's prefill takes b's slots, in b's order
    sim.step(backend, ["a", "e"])  # the reference check fails if e got b's stale copy
    assert backend.workspace.num_carries == 1  # a was carried, e gathered


def test_decode_workspace_outgrows_its_headroom_and_respects_its_memory_cap():
    """Past its capacity the workspace rebuilds bigger; over the byte cap it is not used at all."""
    sim = _Sim(seed=8, num_slots=600)
    backend = TorchAttentionBackend(H, KVH, D, native=False)
    sim.add("a", 3)
    for _ in range(70):  # headroom is 64 steps
        sim.step(backend, ["a"])
    assert (backend.workspace.num_rebuilds, backend.workspace.num_carries) == (1, 1)  # grown, row carried
    tiny = TorchAttentionBackend(H, KVH, D, decode_workspace_bytes=1, native=False)
    sim.step(tiny, ["a"])
    sim.step(tiny, ["a"])
    assert tiny.workspace.num_rebuilds == 0
    off = TorchAttentionBackend(H, KVH, D, decode_workspace_bytes=0)
    sim.step(off, ["a"])
    assert off.workspace is None


def test_native_decode_reads_the_paged_buffer_in_place_through_joins_leaves_and_prefills():
    """The native kernel keeps no copies: the same churn as above matches the reference at every
    step and never builds a workspace."""
    sim = _Sim(seed=9)
    backend = TorchAttentionBackend(H, KVH, D)
    for name, p in (("a", 5), ("b", 17), ("c", 0)):
        sim.add(name, p)
    for names in (["a", "b", "c"], ["a", "b", "c"], ["a", "c"], ["c", "a"]):
        sim.step(backend, names)
    sim.add("d", 9)
    sim.step(backend, ["c", "a", "d"], extend={"a": 3})
    sim.step(backend, ["c", "a", "d"])
    assert backend.native is None or backend.native  # it was not switched off by a failed build
    assert backend.workspace.num_rebuilds == 0


@BACKEND_PATHS
@pytest.mark.parametrize("extend", [None, 4], ids=["pure-decode", "with-a-prefill"])
def test_decode_requests_sharing_prefix_slots_match_reference(native, extend):
    """Requests whose first 40 slots are the same slots (as the radix cache hands out) attend
    like the reference; the native path attends them as one group (cascade)."""
    gen = torch.Generator().manual_seed(3)
    kv = KVBuffer(num_layers=2, num_slots=300, num_kv_heads=KVH, head_dim=D)
    perm = torch.randperm(300, generator=gen)
    shared, used = perm[:40], 40
    kv.k[1][shared] = torch.randn(40, KVH, D, generator=gen)
    kv.v[1][shared] = torch.randn(40, KVH, D, generator=gen)
    own_lens = [0, 5, 2, 31]
    slots, prefix_lens, extend_lens = [], [], []
    for n in own_lens:
        own = perm[used: used + n + 1]
        used += n + 1
        kv.k[1][own[:n]] = torch.randn(n, KVH, D, generator=gen)
        kv.v[1][own[:n]] = torch.randn(n, KVH, D, generator=gen)
        slots.append(torch.cat([shared, own]))
        prefix_lens.append(40 + n)
        extend_lens.append(1)
    if extend:  # a prefill of its own in the same batch: the decode rows take the mixed path
        slots.append(perm[used: used + extend])
        prefix_lens.append(0)
        extend_lens.append(extend)
    batch = ForwardBatch.from_requests([[0] * e for e in extend_lens], slots, prefix_lens=prefix_lens)
    q = torch.randn(batch.num_tokens, H, D, generator=gen)
    k_new = torch.randn(batch.num_tokens, KVH, D, generator=gen)
    v_new = torch.randn(batch.num_tokens, KVH, D, generator=gen)
    backend = TorchAttentionBackend(H, KVH, D, native=native)
    backend.prepare(batch)
    out = backend.forward(1, q, k_new, v_new, kv)
    if backend.native is not False:
        group_of, shared_lens = backend._decode.shared
        assert group_of.tolist() == [0, 0, 0, 0] and shared_lens.tolist() == [40]
    start = 0
    for i, (p, e) in enumerate(zip(prefix_lens, extend_lens)):
        ref = _reference(q[start: start + e], kv.k[1][slots[i]], kv.v[1][slots[i]], p)
        torch.testing.assert_close(out[start: start + e].double(), ref, atol=1e-5, rtol=1e-5)
        start += e


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), moves=st.lists(st.sampled_from(["same", "leave", "join", "shuffle", "extend"]),
                                                  min_size=3, max_size=10))
def test_decode_workspace_matches_reference_through_any_churn(seed, moves):
    """Any sequence of decode steps with requests leaving, joining, moving and prefilling chunks:
    every step's attention equals the dense reference (the Sim checks each one)."""
    import random

    rng = random.Random(seed)
    sim = _Sim(seed=seed, num_slots=600)
    backend = TorchAttentionBackend(H, KVH, D, native=False)
    running = []
    for i in range(3):
        running.append(f"r{i}")
        sim.add(running[-1], rng.randint(0, 20))
    joined = 3
    for move in moves:
        extend = {}
        if move == "leave" and len(running) > 1:
            running.pop(rng.randrange(len(running)))
        elif move == "join":
            running.insert(rng.randrange(len(running) + 1), f"r{joined}")
            sim.add(f"r{joined}", rng.randint(0, 20))
            joined += 1
        elif move == "shuffle":
            rng.shuffle(running)
        elif move == "extend":
            extend = {rng.choice(running): rng.randint(2, 5)}
        sim.step(backend, running, extend=extend)


@pytest.mark.parametrize("bf16_native", [True, False])
def test_bf16_prefill_attends_in_float32_where_bf16_is_not_native(monkeypatch, bf16_native):
    """On a CPU without native bf16 (AVX2), a bf16 prefill goes through SDPA in float32 (faster
    there) and comes back in bf16; with native bf16 it stays bf16. Either way it is the same
    attention as the dense reference, to bf16 rounding."""
    import torch.nn.functional as F

    import sglc_runtime.model.attention.torch_backend as torch_backend

    seen = []
    real_sdpa = F.scaled_dot_product_attention

    def spy(q, *args, **kwargs):
        seen.append(q.dtype)
        return real_sdpa(q, *args, **kwargs)

    monkeypatch.setattr(torch_backend, "bf16_is_native", lambda: bf16_native)
    monkeypatch.setattr(torch_backend.F, "scaled_dot_product_attention", spy)
    gen = torch.Generator().manual_seed(3)
    e = 12
    kv = KVBuffer(num_layers=1, num_slots=32, num_kv_heads=KVH, head_dim=D, dtype=torch.bfloat16)
    batch = ForwardBatch.from_requests([[0] * e], [torch.arange(e)], prefix_lens=[0])
    q = torch.randn(e, H, D, generator=gen).bfloat16()
    k, v = torch.randn(e, KVH, D, generator=gen).bfloat16(), torch.randn(e, KVH, D, generator=gen).bfloat16()
    backend = TorchAttentionBackend(H, KVH, D)
    backend.prepare(batch)
    out = backend.forward(0, q, k, v, kv)
    assert seen == [torch.bfloat16 if bf16_native else torch.float32] and out.dtype == torch.bfloat16
    ref = _reference(q.float(), k.float(), v.float(), 0)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
