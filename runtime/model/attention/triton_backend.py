"""Triton attention backend: paged decode (split-K) and extend-over-prefix kernels.

``prepare`` turns the batch's per-request lists into a handful of int64 device tensors, built on
the host from lengths the scheduler already knows (no device-to-host sync) and sent in one copy:

* the flat slot list of every request (``torch.cat`` of ``batch.kv_indices``, on the device);
* for the decode requests (one new token): their token rows, slot-list starts and lengths, and
  the split count for :func:`~.triton_decode.decode_attention`;
* for the extend requests (several new tokens): their first token row, extend and prefix
  lengths and slot-list starts for :func:`~.triton_extend.extend_attention`.

A batch that mixes both runs both kernels, each writing only its own requests' output rows.

For CUDA graphs (``cuda_graph.py``) the backend also has a static decode mode: the slot lists
and lengths of a padded decode batch are copied into buffers allocated once
(:meth:`TritonAttentionBackend.enable_static_decode`), so a captured forward reads each replay's
batch from the same addresses.

On a CPU tensor the kernels only run under Triton's interpreter (``TRITON_INTERPRET=1`` set
before triton is first imported): slow, but it is how CI checks the kernels without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...cache.kv_buffer import KVBuffer
from ..forward_batch import ForwardBatch
from .base import AttentionBackend
from .triton_decode import decode_attention, pick_num_splits
from .triton_extend import _extend_kernel, extend_attention

try:  # NOTE: jit() returns an InterpretedFunction when TRITON_INTERPRET=1 was set at import
    from triton.runtime.interpreter import InterpretedFunction

    INTERPRETED = isinstance(_extend_kernel, InterpretedFunction)
except ImportError:  # pragma: no cover - older/newer triton layouts
    INTERPRETED = False


@dataclass(slots=True)
class TritonTuning:
    """Block sizes and split policy (tests shrink them to cover many blocks on tiny inputs)."""

    decode_block_n: int = 64
    decode_min_chunk: int = 128  # tokens per split-K chunk, at least
    decode_max_splits: int = 32
    decode_target_programs: int = 264  # ~2 programs per SM of an H100 (132 SMs)
    extend_block_m: int = 64
    extend_block_n: int = 64
    #: force the decode split count (None = pick_num_splits); tests use it
    decode_num_splits: int | None = None


@dataclass(slots=True)
class _DecodePlan:
    rows: torch.Tensor  # [B] token rows of the decode requests
    kv_starts: torch.Tensor  # [B] offsets into the flat slot list
    seq_lens: torch.Tensor  # [B]
    num_splits: int


@dataclass(slots=True)
class StaticDecodeBuffers:
    """Buffers of the static decode mode (their addresses never change)."""

    kv: torch.Tensor  # [kv_capacity] flat slots of the batch's requests, then padding slots
    meta: torch.Tensor  # [2 * max_batch]: kv_starts then seq_lens of the current batch
    rows: torch.Tensor  # arange(max_batch): decode request b is token row b
    partials: torch.Tensor  # split-K scratch for max_batch requests and max_splits chunks
    max_batch: int
    max_splits: int


@dataclass(slots=True)
class _ExtendPlan:
    q_starts: torch.Tensor  # [R] first token row
    extend_lens: torch.Tensor  # [R]
    prefix_lens: torch.Tensor  # [R]
    kv_starts: torch.Tensor  # [R]
    max_extend_len: int


class TritonAttentionBackend(AttentionBackend):
    """Paged attention with Triton kernels; natively on CUDA, interpreted on CPU (tests)."""

    name = "triton"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float | None = None,
                 tuning: TritonTuning | None = None):
        super().__init__(num_heads, num_kv_heads, head_dim, scale)
        if head_dim & (head_dim - 1) or head_dim < 16:
            raise ValueError(f"triton attention needs head_dim a power of two >= 16, got {head_dim}")
        self.tuning = tuning or TritonTuning()
        self._loc: torch.Tensor | None = None
        self._kv: torch.Tensor | None = None
        self._decode: _DecodePlan | None = None
        self._extend: _ExtendPlan | None = None
        self._num_tokens = 0
        self._partials: torch.Tensor | None = None  # split-K scratch of the eager path
        #: the static decode mode's buffers (None = off); see enable_static_decode
        self.static_decode: StaticDecodeBuffers | None = None
        self._static_batch: ForwardBatch | None = None  # prepare() of this batch keeps the plan
        self._static_active = False  # the current plan reads the static buffers

    # ------------------------------------------------------------------ prepare
    def prepare(self, batch: ForwardBatch) -> None:
        """Build the flat slot list and the decode/extend index tensors (one host-to-device copy)."""
        if batch is self._static_batch:  # set up by prepare_static_decode (CUDA graph capture)
            self._static_active = True
            return
        self._static_active = False
        device = batch.input_ids.device
        if device.type == "cpu" and not INTERPRETED:
            raise RuntimeError(
                "the triton attention backend runs on CPU tensors only under Triton's interpreter "
                "(set TRITON_INTERPRET=1 before triton is imported; slow, for tests); "
                "use the torch backend on CPU")
        tune = self.tuning
        self._loc = batch.out_cache_loc
        self._num_tokens = batch.num_tokens
        kv = batch.kv_indices
        self._kv = kv[0] if len(kv) == 1 else torch.cat(kv)
        dec_rows, dec_starts, dec_lens = [], [], []
        ext_q, ext_e, ext_p, ext_starts = [], [], [], []
        row = kv_start = 0
        for e, p in zip(batch.extend_lens, batch.prefix_lens):
            if e == 1:
                dec_rows.append(row)
                dec_starts.append(kv_start)
                dec_lens.append(p + 1)
            else:
                ext_q.append(row)
                ext_e.append(e)
                ext_p.append(p)
                ext_starts.append(kv_start)
            row += e
            kv_start += p + e
        meta = torch.tensor(dec_rows + dec_starts + dec_lens + ext_q + ext_e + ext_p + ext_starts,
                            dtype=torch.long).to(device)
        nd, ne = len(dec_rows), len(ext_q)
        parts = meta.split([nd, nd, nd, ne, ne, ne, ne])
        self._decode = None
        if nd:
            splits = tune.decode_num_splits or pick_num_splits(
                nd, self.num_kv_heads, max(dec_lens), min_chunk=tune.decode_min_chunk,
                target_programs=tune.decode_target_programs, max_splits=tune.decode_max_splits)
            self._decode = _DecodePlan(parts[0], parts[1], parts[2], splits)
        self._extend = _ExtendPlan(parts[3], parts[4], parts[5], parts[6], max(ext_e)) if ne else None
        if nd and self._decode.num_splits > 1:
            need = nd * self.num_heads * self._decode.num_splits * (self.head_dim + 1)
            if self._partials is None or self._partials.numel() < need or self._partials.device != device:
                self._partials = torch.empty(need, dtype=torch.float32, device=device)

    # ------------------------------------------------------------------ static decode (graphs)
    def enable_static_decode(self, max_batch: int, kv_capacity: int, max_splits: int,
                             device: torch.device | str) -> StaticDecodeBuffers:
        """Allocate and install static decode buffers: up to ``max_batch`` requests whose slot
        lists hold ``kv_capacity`` entries together, split into at most ``max_splits`` chunks.

        NOTE: an owner (one ``DecodeGraphs``) keeps the returned buffers and reinstalls them in
        ``static_decode`` before each use: its graphs read them, whoever else shares the model."""
        self.static_decode = StaticDecodeBuffers(
            kv=torch.zeros(kv_capacity, dtype=torch.long, device=device),
            meta=torch.ones(2 * max_batch, dtype=torch.long, device=device),
            rows=torch.arange(max_batch, dtype=torch.long, device=device),
            partials=torch.empty(max_batch * self.num_heads * max_splits * (self.head_dim + 1),
                                 dtype=torch.float32, device=device),
            max_batch=max_batch, max_splits=max_splits)
        self._static_batch = None
        return self.static_decode

    def static_decode_splits(self, max_len: int, batch_size: int) -> int:
        """The split count the static mode uses for this batch (a graph is captured per value)."""
        assert self.static_decode is not None, "enable_static_decode() first"
        tune = self.tuning
        return min(self.static_decode.max_splits, tune.decode_num_splits or pick_num_splits(
            batch_size, self.num_kv_heads, max_len, min_chunk=tune.decode_min_chunk,
            target_programs=tune.decode_target_programs, max_splits=tune.decode_max_splits))

    def prepare_static_decode(self, batch: ForwardBatch, static_batch: ForwardBatch, pad_slot: int,
                              num_splits: int) -> None:
        """Copy decode ``batch``'s slot lists into the static buffers, padded to
        ``static_batch.batch_size`` requests that attend to ``pad_slot`` only, and make
        ``prepare(static_batch)`` use them. ``static_batch`` holds the graph's input tensors."""
        st = self.static_decode
        assert st is not None, "enable_static_decode() first"
        n, bs = batch.batch_size, static_batch.batch_size
        assert batch.is_decode and n <= bs <= st.max_batch and num_splits <= st.max_splits
        lens = [p + 1 for p in batch.prefix_lens] + [1] * (bs - n)
        starts, total = [], 0
        for length in lens:
            starts.append(total)
            total += length
        assert total <= st.kv.numel(), f"static decode: {total} slots exceed the capacity {st.kv.numel()}"
        real = total - (bs - n)
        torch.cat(batch.kv_indices, out=st.kv[:real])
        if bs > n:
            st.kv[real:total].fill_(pad_slot)
        st.meta[: 2 * bs].copy_(torch.tensor(starts + lens, dtype=torch.long))
        self._decode = _DecodePlan(st.rows[:bs], st.meta[:bs], st.meta[bs : 2 * bs], num_splits)
        self._extend = None
        self._kv = st.kv
        self._loc = static_batch.out_cache_loc
        self._num_tokens = bs
        self._static_batch = static_batch
        self._static_active = True

    # ------------------------------------------------------------------ forward
    def forward(self, layer_id: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                kv_buffer: KVBuffer) -> torch.Tensor:
        """Write k/v at ``out_cache_loc``, then attend (see :class:`AttentionBackend`)."""
        if self._loc is None:
            raise RuntimeError("TritonAttentionBackend.forward called before prepare(batch)")
        k_cache, v_cache = kv_buffer.k[layer_id], kv_buffer.v[layer_id]
        k_cache.index_copy_(0, self._loc, k.to(k_cache.dtype))
        v_cache.index_copy_(0, self._loc, v.to(v_cache.dtype))
        out = q.new_empty(self._num_tokens, self.num_heads * self.head_dim)
        tune = self.tuning
        if self._decode is not None:
            d = self._decode
            partials = self.static_decode.partials if self._static_active else self._partials
            decode_attention(q, k_cache, v_cache, out, self._kv, d.kv_starts, d.seq_lens, d.rows,
                             d.num_splits, self.scale, block_n=tune.decode_block_n, partials=partials)
        if self._extend is not None:
            x = self._extend
            # NOTE: phase 2 reads the new tokens' K/V from k/v directly, in the pool's dtype,
            # exactly what the pool now holds at those slots.
            extend_attention(q, k, v, k_cache, v_cache, out, self._kv, x.kv_starts, x.prefix_lens,
                             x.q_starts, x.extend_lens, x.max_extend_len, self.scale,
                             block_m=tune.extend_block_m, block_n=tune.extend_block_n)
        return out
