"""DecodeWorkspace: contiguous copies of a running decode batch's K/V, appended to in place.

A paged decode step gathers every request's whole K/V history from the KV buffer, in every
layer, every step. When consecutive steps decode the same requests (same order, each exactly
one token longer, same slots), last step's copies are still valid, so only the new token's row
is written. Any other batch rebuilds the copies from the paged buffer.

NOTE (validity): this relies on the KV pool invariant that a slot listed in a running request's
``kv_indices`` is written only by the forward that creates it (``out_cache_loc``); so copies of
earlier slots cannot go stale while the same requests keep decoding. Every batch that is not a
pure decode batch drops the workspace.
"""
from __future__ import annotations

import torch

from ...cache.kv_buffer import KVBuffer

_HEADROOM = 64  # decode steps a rebuilt workspace can absorb before it must grow


class DecodeWorkspace:
    """Per-layer ``[B, capacity, kv_heads, head_dim]`` K and V copies for the current decode batch."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.num_rebuilds = 0  # for tests and stats
        self.invalidate()

    def invalidate(self) -> None:
        """Forget everything (next decode step rebuilds)."""
        self._k: dict[int, torch.Tensor] = {}
        self._v: dict[int, torch.Tensor] = {}
        self._index: torch.Tensor | None = None  # [B, Lmax] slots of last step (padded)
        self._lens: torch.Tensor | None = None  # [B] sequence lengths of last step
        self._buffer: KVBuffer | None = None
        self._capacity = 0
        self._rebuild = True
        self._pending: tuple[torch.Tensor, torch.Tensor, int] | None = None

    def stage(self, index: torch.Tensor, lens: torch.Tensor, max_len: int) -> None:
        """Record this step's padded slot matrix ``[B, max_len]`` and lengths ``[B]``."""
        self._pending = (index, lens, max_len)

    def begin(self, kv_buffer: KVBuffer) -> bool:
        """Decide reuse vs rebuild for the staged step; False = too big, use plain gathers."""
        assert self._pending is not None, "stage() must precede begin()"
        index, lens, max_len = self._pending
        self._pending = None
        bsz = index.shape[0]
        reuse = (
            self._index is not None
            and kv_buffer is self._buffer
            and self._index.shape[0] == bsz
            and max_len <= self._capacity
            and torch.equal(lens, self._lens + 1)
            and self._same_prefix(index)
        )
        if not reuse:
            capacity = max_len + _HEADROOM
            per_slot = KVBuffer.bytes_per_slot(
                kv_buffer.num_layers, kv_buffer.num_kv_heads, kv_buffer.head_dim, kv_buffer.dtype
            )
            if bsz * capacity * per_slot > self.max_bytes:
                self.invalidate()
                return False
            self._k, self._v = {}, {}
            self._capacity, self._buffer = capacity, kv_buffer
            self.num_rebuilds += 1
        self._rebuild = not reuse
        self._index, self._lens, self._max_len = index, lens, max_len
        self._rows = torch.arange(bsz, device=index.device)
        self._pos = lens - 1
        return True

    def _same_prefix(self, index: torch.Tensor) -> bool:
        """Each request's previous slots are the first slots of its new row."""
        prev, prev_len = self._index, self._index.shape[1]
        valid = torch.arange(prev_len, device=prev.device)[None, :] < self._lens[:, None]
        return bool(((index[:, :prev_len] == prev) | ~valid).all())

    def keys_values(
        self,
        layer_id: int,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        k_new: torch.Tensor,
        v_new: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's ``[B, kv_heads, max_len, head_dim]`` K and V views for SDPA.

        ``k_cache``/``v_cache`` must already hold the new tokens (written at out_cache_loc).
        """
        bsz, n = self._index.shape[0], self._max_len
        if self._rebuild or layer_id not in self._k:
            flat = self._index.reshape(-1)
            for store, cache in ((self._k, k_cache), (self._v, v_cache)):
                # NOTE: zeros, not empty: masked positions still meet SDPA's value matmul, and
                # 0 * NaN garbage would poison the output.
                ws = cache.new_zeros(bsz, self._capacity, cache.shape[1], cache.shape[2])
                ws[:, :n] = cache.index_select(0, flat).view(bsz, n, cache.shape[1], cache.shape[2])
                store[layer_id] = ws
        else:
            self._k[layer_id].index_put_((self._rows, self._pos), k_new.to(k_cache.dtype))
            self._v[layer_id].index_put_((self._rows, self._pos), v_new.to(v_cache.dtype))
        return self._k[layer_id][:, :n].transpose(1, 2), self._v[layer_id][:, :n].transpose(1, 2)
