"""Batches for the attention-backend tests whose slot lists come from a real RadixCache.

A :class:`RadixWorld` fills a radix cache with random sequences, evicts some and inserts more,
so that the free-slot stack (LIFO) hands out scattered, non-monotonic slots and cached prefixes
end mid-edge as well as at leaves. :meth:`RadixWorld.request` then builds one request's
``kv_indices`` exactly as the scheduler would: ``match_prefix`` for the cached part, ``alloc`` for
the new tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sglc_runtime.cache.kv_buffer import KVBuffer
from sglc_runtime.cache.kv_pool import KVSlotPool
from sglc_runtime.cache.radix_cache import RadixCache
from sglc_runtime.model.forward_batch import ForwardBatch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class RadixWorld:
    """A KV slot pool + radix cache after a history of inserts and evictions."""

    def __init__(self, seed: int, num_slots: int = 512, vocab: int = 1000):
        self.gen = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.pool = KVSlotPool(num_slots, debug=True)
        self.cache = RadixCache(self.pool)
        self.cached: list[list[int]] = []
        for _ in range(6):
            self._put(self._tokens(int(torch.randint(8, 40, (1,), generator=self.gen))))
        self.cache.evict(self.cache.evictable_size() // 2)  # frees slots back in LRU-leaf order
        for _ in range(4):
            self._put(self._tokens(int(torch.randint(8, 40, (1,), generator=self.gen))))
        self.cached = [s for s in self.cached if self.cache.match_prefix(s).prefix_len == len(s)]
        self.cache.check_integrity()

    def _tokens(self, n: int) -> list[int]:
        return torch.randint(0, self.vocab, (n,), generator=self.gen).tolist()

    def _put(self, ids: list[int]) -> None:
        slots = self.pool.alloc(len(ids))
        present = self.cache.insert(ids, slots)
        self.pool.free(slots[:present])
        self.cached.append(ids)

    def request(self, prefix: str, extend_len: int) -> tuple[int, torch.Tensor]:
        """``(prefix_len, kv_indices)`` of a request whose cached prefix is ``"none"``, ``"partial"``
        (ends inside an edge: the match splits it) or ``"whole"`` (a whole cached sequence)."""
        if prefix == "none":
            ids = [self.vocab + 1]  # out of the sampled vocabulary: matches nothing
        else:
            base = self.cached[int(torch.randint(0, len(self.cached), (1,), generator=self.gen))]
            ids = base if prefix == "whole" else base[: max(1, len(base) // 2)]
        m = self.cache.match_prefix(ids + [self.vocab + 2])
        self.cache.inc_lock(m.last_node)  # as a running request would: its prefix stays put
        new = self.pool.alloc(extend_len)
        return m.prefix_len, torch.cat([m.slots, new])


@dataclass
class Case:
    """One forward's inputs and the full K/V history per request (for the reference)."""

    batch: ForwardBatch
    q: torch.Tensor  # [T, H, D]
    k: torch.Tensor  # [T, KVH, D] new tokens
    v: torch.Tensor
    kv: KVBuffer  # one layer; prefixes filled, every other slot random too
    layer: int


def make_case(world: RadixWorld, reqs: list[tuple[str, int]], heads: int, kv_heads: int, head_dim: int,
              dtype: torch.dtype = torch.float32, num_layers: int = 2) -> Case:
    """A batch of ``reqs`` = [(prefix kind, extend_len)] at the world's slots, random data everywhere."""
    gen = world.gen
    prefix_lens, kv_indices = [], []
    for kind, e in reqs:
        p, slots = world.request(kind, e)
        prefix_lens.append(p)
        kv_indices.append(slots)
    batch = ForwardBatch.from_requests([[0] * e for _, e in reqs], kv_indices, prefix_lens=prefix_lens,
                                       device=DEVICE)
    kv = KVBuffer(num_layers, world.pool.num_slots, kv_heads, head_dim, dtype=dtype, device=DEVICE)
    for layer in range(num_layers):  # NOTE: never zeros: unwritten or misread slots must show
        kv.k[layer].copy_(torch.randn(kv.k[layer].shape, generator=gen))
        kv.v[layer].copy_(torch.randn(kv.v[layer].shape, generator=gen))
    t = batch.num_tokens

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device=DEVICE, dtype=dtype)

    return Case(batch, rnd(t, heads, head_dim), rnd(t, kv_heads, head_dim), rnd(t, kv_heads, head_dim),
                kv, layer=num_layers - 1)


def reference(case: Case, scale: float | None = None) -> torch.Tensor:
    """float64 dense causal attention per request, from the pool's prefix rows and the new K/V."""
    q, b = case.q.double().cpu(), case.batch
    heads, head_dim = q.shape[1], q.shape[2]
    k_pool = case.kv.k[case.layer].double().cpu()
    v_pool = case.kv.v[case.layer].double().cpu()
    scale = scale if scale is not None else 1 / math.sqrt(head_dim)
    outs, start = [], 0
    for p, e, slots in zip(b.prefix_lens, b.extend_lens, b.kv_indices):
        slots = slots.cpu()
        keys = torch.cat([k_pool[slots[:p]], case.k[start : start + e].double().cpu()])
        vals = torch.cat([v_pool[slots[:p]], case.v[start : start + e].double().cpu()])
        group = heads // keys.shape[1]
        keys, vals = keys.repeat_interleave(group, 1), vals.repeat_interleave(group, 1)
        s = torch.einsum("ehd,lhd->hel", q[start : start + e], keys) * scale
        allowed = torch.arange(p + e)[None, :] <= (p + torch.arange(e))[:, None]
        s = s.masked_fill(~allowed[None], float("-inf"))
        outs.append(torch.einsum("hel,lhd->ehd", s.softmax(-1), vals).reshape(e, heads * head_dim))
        start += e
    return torch.cat(outs)
