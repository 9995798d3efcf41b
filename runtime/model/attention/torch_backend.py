"""Torch attention backend: paged attention with ``scaled_dot_product_attention`` (CPU or CUDA).

Decode requests (one new token each) are served together: one ``index_select`` gathers every
request's keys/values through a padded slot matrix, and one SDPA call with a padding mask
attends for all of them. Grouped-query attention is done without copying K/V per query head:
the ``G = num_heads / num_kv_heads`` queries sharing a kv head are laid out as G "query
positions" of that kv head (they share the same keys and, at decode, the same mask).
Extend requests (prefill, chunked prefill, select scoring) run one SDPA each with a causal mask
offset by the request's prefix.

On CPU, decode requests go to the native kernel ``sglc_cpu.decode_attention_`` (``native/``)
when it builds: it writes the new K/V and attends reading each request's slots in place, with
no gather and no SDPA call (~10 us at one query row over 150 keys); a prefix of slots that
several decode requests share (``shared_prefix.py``) is attended once for all of them (cascade)
where that pays: when the kernel runs its generic per-request loop (see
:func:`cascade_pays`). Otherwise a :class:`DecodeWorkspace` keeps contiguous K/V copies of the
running requests from one pure-decode step to the next (through joins, leaves and mixed batches)
and adds only the new tokens instead of re-gathering whole histories.

Sliding windows and soft-capping (``set_layer_options``; Mistral, Phi-3, Gemma 2/3): a windowed
layer's decode requests attend their last ``window`` slots only (a second slot matrix, built once
per forward for each window size the model has; the native kernel is simply given those
slots), and its extends attend the prefix keys still inside the window of their first new token
plus the new tokens, under a band mask (the query at position p sees p - window + 1 .. p), built
once per forward. A shared prefix longer than the window and chunks that cross the window's
edge are thereby exact. Soft-capping changes the scores before the softmax, which SDPA cannot
do: extends and eager decode then run the attention as explicit matmuls (transformers' eager
attention), the native decode kernel caps its scores itself. The decode workspace is not used
for such models (it carries whole histories).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...cache.kv_buffer import KVBuffer
from ..forward_batch import ForwardBatch
from ..native import bf16_is_native, kernel_info, load_cpu_ops
from .base import AttentionBackend
from .decode_workspace import DecodeWorkspace
from .shared_prefix import shared_prefix_groups


def cascade_pays(head_dim: int, group: int) -> bool:
    """Whether the native kernel should attend shared prefixes once per group (cascade) for this
    head layout. Not where its per-request loop holds a kv head's queries and accumulators in
    registers (head_dim 64, <= 4 query heads per kv head, AVX512): measured there (SmolLM2, bf16,
    2 threads), reading a 100-1000-key prefix per request from cache beat the cascade for groups
    of 2 to 32 requests (e.g. 8 x 1000 keys 210 against 242 us a layer; 32 prompts over a
    ~1k-token document, 8 at a time: 2.95-3.05 s against 3.11-3.20 s in the engine)."""
    return not torch.ops.sglc_cpu.has_register_attention(head_dim, group)


@dataclass(slots=True)
class _DecodeGroup:
    """The decode requests of a batch, gathered as one padded matrix."""

    rows: torch.Tensor | None  # token rows of these requests in the batch; None = all rows, in order
    index: torch.Tensor  # LongTensor[B, Lmax], slots, padded with a valid slot
    lens: torch.Tensor  # LongTensor[B], sequence lengths
    len_list: list[int]  # the same, as ints
    mask: torch.Tensor | None  # BoolTensor[B, 1, 1, Lmax], True = attend; None = no padding
    batch_size: int
    max_len: int
    shared: tuple[torch.Tensor, torch.Tensor] | None = None  # native kernel: (prefix_group, prefix_lens)


@dataclass(slots=True)
class _Extend:
    """One request with more than one new token."""

    start: int  # first token row in the batch
    length: int  # extend_len
    prefix_len: int
    kv_index: torch.Tensor  # LongTensor[prefix_len + extend_len]
    mask: torch.Tensor | None  # BoolTensor[1, 1, extend_len, prefix_len + extend_len]; None = causal


@dataclass(slots=True)
class _MaskedExtend:
    """An extend's keys and mask for a windowed or soft-capped layer: keys are the prefix slots
    from ``key_start`` on, then the new tokens."""

    key_start: int  # first prefix position a new token of this layer can see
    mask: torch.Tensor  # BoolTensor[1, 1, extend_len, prefix_len - key_start + extend_len], True = attend


def band_mask(prefix_len: int, extend_len: int, key_start: int, window: int | None,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """``[1, 1, E, P - key_start + E]``: new token j (position P + j) sees key positions a with
    a <= P + j and, under a window, a > P + j - window (transformers' sliding-window mask)."""
    q = torch.arange(prefix_len, prefix_len + extend_len, device=device)[:, None]
    a = torch.cat([torch.arange(key_start, prefix_len, device=device),
                   torch.arange(prefix_len, prefix_len + extend_len, device=device)])[None, :]
    mask = a <= q
    if window is not None:
        mask &= a > q - window
    return mask[None, None]


def attend_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
                    softcap: float | None) -> torch.Tensor:
    """Attention as transformers' eager path computes it: ``q [B, H, Lq, D]`` over ``k, v [B, KV,
    Lk, D]`` (query head h reads kv head h // (H / KV)), scores scaled, soft-capped, masked (True
    = attend), softmax in float32."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v)


class TorchAttentionBackend(AttentionBackend):
    """Reference paged attention on torch SDPA; fast enough to serve the default model on CPU."""

    name = "torch"

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float | None = None,
        decode_workspace_bytes: int = 1 << 30,
        native: bool | None = None,
    ):
        """``decode_workspace_bytes``: memory cap of the decode workspace (0 disables it).
        ``native``: decode attention on the native CPU kernel; None = on CPU when it builds,
        True = required (ValueError at the first CPU batch if it cannot build), False = never."""
        super().__init__(num_heads, num_kv_heads, head_dim, scale)
        self.workspace = DecodeWorkspace(decode_workspace_bytes) if decode_workspace_bytes > 0 else None
        self.native = native
        self._native_kernel = None  # torch.ops.sglc_cpu.decode_attention_ once resolved
        self._cascade = False  # attend shared prefixes once per group (decided with the kernel)
        self._bf16_native: bool | None = None  # decided at the first bf16 extend on CPU
        self._native_step = False  # this batch's decode requests use it
        self._use_workspace: bool | None = None  # decided at the first layer of a decode step
        self._loc: torch.Tensor | None = None
        self._decode: _DecodeGroup | None = None
        self._extends: list[_Extend] = []
        self._num_tokens = 0
        self.windows: list[int | None] = []  # per layer (set_layer_options); empty = no windows
        self.softcap: float | None = None
        self._softcap_arg: dict[str, float] = {}  # the native kernel's keyword, where capped
        self._kernel_softcap = False  # the native kernel caps scores (decided with the kernel)
        self._window_sizes: list[int] = []
        self._decode_window: dict[int, _DecodeGroup] = {}  # window -> its decode requests' last slots
        self._masked: dict[tuple[int, int | None], _MaskedExtend | None] = {}  # (extend, window) -> keys/mask

    def set_layer_options(self, windows, softcap: float | None = None) -> None:
        """Sliding windows per layer and attention soft-capping: both run here (module docstring)."""
        self.windows = list(windows) if any(w is not None for w in windows) else []
        self._window_sizes = sorted({w for w in self.windows if w is not None})
        self.softcap = softcap
        self._softcap_arg = {} if softcap is None else {"softcap": float(softcap)}
        if self.windows or softcap is not None:
            self.workspace = None  # NOTE: it carries whole histories and plain SDPA

    # ------------------------------------------------------------------ prepare
    def prepare(self, batch: ForwardBatch) -> None:
        """Build the decode gather matrix/mask and the per-extend masks for this batch."""
        self._loc = batch.out_cache_loc
        self._num_tokens = batch.num_tokens
        device = batch.input_ids.device
        decode_reqs: list[int] = []
        decode_rows: list[int] = []
        self._extends = []
        start = 0
        for i, (e, p) in enumerate(zip(batch.extend_lens, batch.prefix_lens)):
            if e == 1:
                decode_reqs.append(i)
                decode_rows.append(start)
            else:
                mask = None
                if p > 0 and device.type != "cpu":  # NOTE: CPU attends prefix and new tokens apart
                    # NOTE: new token j (position p + j) sees keys 0..p + j.
                    mask = torch.ones(e, p + e, dtype=torch.bool, device=device).tril(p)[None, None]
                self._extends.append(_Extend(start, e, p, batch.kv_indices[i], mask))
            start += e
        self._decode = None
        self._use_workspace = False
        self._native_step = (bool(decode_reqs) and device.type == "cpu" and self._resolve_native()
                             and (self.softcap is None or self._kernel_softcap))
        if decode_reqs:
            all_rows = len(decode_reqs) == batch.batch_size
            self._decode = self._build_decode(
                [batch.kv_indices[i] for i in decode_reqs],
                None if all_rows else torch.tensor(decode_rows, dtype=torch.long, device=device),
                device,
            )
            if self._native_step and self._cascade:
                self._decode.shared = shared_prefix_groups(self._decode.index, self._decode.len_list)
            if all_rows and self.workspace is not None and not self._native_step:
                self.workspace.stage(self._decode.index, self._decode.lens, self._decode.max_len)
                self._use_workspace = None
        self._decode_window = {}
        if decode_reqs and self._window_sizes:
            for w in self._window_sizes:
                self._decode_window[w] = self._windowed_decode(w, [batch.kv_indices[i] for i in decode_reqs])
        self._masked = {}
        if self._window_sizes or self.softcap is not None:
            for n, ext in enumerate(self._extends):
                for w in (self._window_sizes if self.windows else []) + ([None] if self._has_global() else []):
                    self._masked[(n, w)] = self._masked_extend(ext, w, device)
        if self._use_workspace is False and self.workspace is not None:
            self.workspace.note_writes(batch.out_cache_loc)

    def _has_global(self) -> bool:
        """Whether some layer attends without a window."""
        return not self.windows or any(w is None for w in self.windows)

    def _windowed_decode(self, window: int, kv: list[torch.Tensor]) -> _DecodeGroup:
        """The decode group of a windowed layer: each request's last ``window`` slots (the full
        group itself where no request is longer than the window)."""
        full = self._decode
        if full.max_len <= window:
            return full
        group = self._build_decode([k[-window:] for k in kv], full.rows, full.index.device)
        if self._native_step and self._cascade:
            group.shared = shared_prefix_groups(group.index, group.len_list)
        return group

    def _masked_extend(self, ext: _Extend, window: int | None, device) -> _MaskedExtend | None:
        """Keys and mask of one extend for a layer with this window (None: global), or None where
        the plain causal path is exact (no soft-cap and the window never bites)."""
        p, e = ext.prefix_len, ext.length
        bites = window is not None and p + e > window
        if not bites and self.softcap is None:
            return None
        start = max(0, p - window + 1) if bites else 0
        return _MaskedExtend(start, band_mask(p, e, start, window if bites else None, device))

    def describe_decode(self) -> str:
        """'native avx2 registers', 'native generic loop (cascade on shared prefixes)' or 'torch SDPA'."""
        if self.native is False or load_cpu_ops() is not None:
            return "torch SDPA" + (" + decode workspace" if self.workspace is not None else "")
        group = self.num_heads // self.num_kv_heads
        if torch.ops.sglc_cpu.has_register_attention(self.head_dim, group):
            return f"native {kernel_info().attention} (head_dim {self.head_dim}, {group} heads per kv head)"
        return f"native generic loop, cascade on shared prefixes (head_dim {self.head_dim}, {group} per kv head)"

    def _resolve_native(self) -> bool:
        """Whether the native decode kernel is loaded (building it the first time)."""
        if self.native is False:
            return False
        if self._native_kernel is None:
            why = load_cpu_ops()
            if why is not None:
                if self.native:
                    raise ValueError(f"native decode attention requested but unavailable: {why}")
                self.native = False
                return False
            self._native_kernel = torch.ops.sglc_cpu.decode_attention_
            self._cascade = cascade_pays(self.head_dim, self.num_heads // self.num_kv_heads)
            self._kernel_softcap = any(a.name == "softcap" for a in self._native_kernel.default._schema.arguments)
        return True

    @staticmethod
    def _build_decode(kv: list[torch.Tensor], rows: torch.Tensor | None, device) -> _DecodeGroup:
        lens = [int(k.numel()) for k in kv]
        bsz, max_len = len(kv), max(lens)
        lens_t = torch.tensor(lens, device=device)
        if min(lens) == max_len:
            index = torch.stack(kv)
            mask = None
        else:
            # NOTE: padding entries point at a real slot (the request's own first one) so the
            # gather stays in bounds; the mask hides them.
            padded = [
                k if n == max_len else torch.cat([k, k[:1].expand(max_len - n)])
                for k, n in zip(kv, lens)
            ]
            index = torch.stack(padded)
            mask = (torch.arange(max_len, device=device)[None, :] < lens_t[:, None]).view(
                bsz, 1, 1, max_len
            )
        return _DecodeGroup(rows, index, lens_t, lens, mask, bsz, max_len)

    def native_decode_inputs(self, layer_id: int) -> tuple | None:
        """What this step's native decode kernel takes for ``layer_id`` after the caches and the
        new q/k/v (loc, index, lens, prefix_group, prefix_lens; None where the step attends
        without a shared-prefix cascade), or None where this step does not run that kernel alone
        (not a pure decode batch on the CPU kernel): what ``forward`` passes it, for callers that
        run the kernel themselves (``sglc_cpu.DecodeLayer``)."""
        if not self._native_step or self._decode is None or self._decode.rows is not None:
            return None
        window = self.windows[layer_id] if self.windows else None
        dec = self._decode if window is None else self._decode_window[window]
        prefix_group, prefix_lens = dec.shared or (None, None)
        return self._loc, dec.index, dec.lens, prefix_group, prefix_lens

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        layer_id: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_buffer: KVBuffer,
    ) -> torch.Tensor:
        """Write k/v at ``out_cache_loc``, then attend (see :class:`AttentionBackend`)."""
        if self._loc is None:
            raise RuntimeError("TorchAttentionBackend.forward called before prepare(batch)")
        k_cache = kv_buffer.k[layer_id]
        v_cache = kv_buffer.v[layer_id]
        window = self.windows[layer_id] if self.windows else None
        dec = self._decode if window is None or self._decode is None else self._decode_window[window]
        native = self._native_step and q.dtype == k.dtype == k_cache.dtype
        if native and dec.rows is None:  # pure decode batch on CPU: one kernel writes and attends
            return self._native_kernel(k_cache, v_cache, self._loc, k, v, q, dec.index, dec.lens, self.scale,
                                       *(dec.shared or ()), **self._softcap_arg)
        k_cache.index_copy_(0, self._loc, k.to(k_cache.dtype))
        v_cache.index_copy_(0, self._loc, v.to(v_cache.dtype))

        if dec is not None and dec.rows is None:  # pure decode batch: the fast path
            if self._use_workspace is None:
                self._use_workspace = self.workspace.begin(kv_buffer)
            if self._use_workspace:
                kk, vv = self.workspace.keys_values(layer_id, k_cache, v_cache, k, v)
                return self._sdpa_decode(dec, q, kk, vv)
            return self._decode_attend(dec, q, k_cache, v_cache)

        out = q.new_empty(self._num_tokens, self.num_heads * self.head_dim)
        if dec is not None and native:  # NOTE: rewrites the decode rows' K/V just written: same values
            r = dec.rows
            out.index_copy_(0, r, self._native_kernel(
                k_cache, v_cache, self._loc.index_select(0, r), k.index_select(0, r), v.index_select(0, r),
                q.index_select(0, r), dec.index, dec.lens, self.scale, *(dec.shared or ()),
                **self._softcap_arg))
        elif dec is not None:
            out.index_copy_(0, dec.rows, self._decode_attend(dec, q.index_select(0, dec.rows), k_cache, v_cache))
        for n, ext in enumerate(self._extends):
            s, e = ext.start, ext.start + ext.length
            dtype = self._extend_dtype(q)
            # NOTE: 4-D inputs ([1, heads, len, D]); 3-D ones miss the fused CPU flash kernel.
            qq = q[s:e].transpose(0, 1)[None].to(dtype)  # [1, H, E, D]
            masked = self._masked.get((n, window)) if self._masked else None
            if masked is not None:
                o = self._attend_masked(qq, ext, masked, k[s:e], v[s:e], k_cache, v_cache, dtype)
                out[s:e] = o[0].transpose(0, 1).reshape(ext.length, -1)
                continue
            if ext.prefix_len > 0 and q.device.type == "cpu":
                o = self._attend_prefix_then_new(qq, ext, k[s:e], v[s:e], k_cache, v_cache, dtype)
                out[s:e] = o[0].transpose(0, 1).reshape(ext.length, -1)
                continue
            if ext.prefix_len == 0:
                # NOTE: with no prefix, the request's keys are exactly its new tokens.
                kk, vv = k[s:e], v[s:e]
            else:
                kk = k_cache.index_select(0, ext.kv_index)  # [L, KV, D]
                vv = v_cache.index_select(0, ext.kv_index)
            kk = kk.transpose(0, 1)[None].to(dtype)  # [1, KV, L, D]
            vv = vv.transpose(0, 1)[None].to(dtype)
            o = F.scaled_dot_product_attention(
                qq,
                kk,
                vv,
                attn_mask=ext.mask,
                is_causal=ext.mask is None,
                scale=self.scale,
                enable_gqa=self.num_heads != self.num_kv_heads,
            )
            out[s:e] = o[0].transpose(0, 1).reshape(ext.length, -1)  # NOTE: copies back to out's dtype
        return out

    def _attend_prefix_then_new(self, qq: torch.Tensor, ext: _Extend, k_new: torch.Tensor, v_new: torch.Tensor,
                                k_cache: torch.Tensor, v_cache: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A chunk's new tokens over a cached prefix (CPU), as two flash-attention calls merged by
        log-sum-exp: over the prefix every new token sees every key (no mask), over the new tokens
        it is causal (square: SDPA's own causal kernel). One SDPA over prefix + new needs an
        E x (P + E) mask and runs torch's masked path, which made a chunked 4k-token prefill ~30%
        slower than an unchunked one. Returns [1, H, E, D] (float32 where merged)."""
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        prefix = ext.kv_index[: ext.prefix_len]
        kp = k_cache.index_select(0, prefix).transpose(0, 1)[None].to(dtype)  # [1, KV, P, D]
        vp = v_cache.index_select(0, prefix).transpose(0, 1)[None].to(dtype)
        kn = k_new.transpose(0, 1)[None].to(dtype)
        vn = v_new.transpose(0, 1)[None].to(dtype)
        o1, lse1 = flash(qq, kp, vp, 0.0, False, scale=self.scale)
        o2, lse2 = flash(qq, kn, vn, 0.0, True, scale=self.scale)
        lse = torch.logaddexp(lse1, lse2)
        return o1 * (lse1 - lse).exp()[..., None] + o2 * (lse2 - lse).exp()[..., None]

    def _attend_masked(self, qq: torch.Tensor, ext: _Extend, masked: _MaskedExtend, k_new: torch.Tensor,
                       v_new: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       dtype: torch.dtype) -> torch.Tensor:
        """An extend of a windowed or soft-capped layer: the prefix keys from ``key_start`` (those
        still inside the first new token's window) and the new tokens, under the band mask; SDPA
        with the mask, or the explicit attention where scores are soft-capped. [1, H, E, D]."""
        prefix = ext.kv_index[masked.key_start: ext.prefix_len]
        kk = torch.cat([k_cache.index_select(0, prefix), k_new.to(k_cache.dtype)]).transpose(0, 1)[None].to(dtype)
        vv = torch.cat([v_cache.index_select(0, prefix), v_new.to(v_cache.dtype)]).transpose(0, 1)[None].to(dtype)
        if self.softcap is not None:
            return attend_explicit(qq, kk, vv, masked.mask, self.scale, self.softcap)
        return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=masked.mask, scale=self.scale,
                                              enable_gqa=self.num_heads != self.num_kv_heads)

    def _extend_dtype(self, q: torch.Tensor) -> torch.dtype:
        """The dtype prefill attention runs in: bf16 activations go through SDPA in float32 on a CPU
        without native bf16 (torch's flash kernel converts element by element there: 512 / 1024
        causal tokens, 9 heads over 3, one thread, ATen held to AVX2: 8.3 / 24.2 ms in bf16,
        6.9 / 19.5 ms in float32)."""
        if q.dtype != torch.bfloat16 or q.device.type != "cpu":
            return q.dtype
        if self._bf16_native is None:
            self._bf16_native = bf16_is_native()
        return q.dtype if self._bf16_native else torch.float32

    def _decode_attend(
        self, dec: _DecodeGroup, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        bsz, n, kvh, d = dec.batch_size, dec.max_len, self.num_kv_heads, self.head_dim
        flat = dec.index.reshape(-1)
        kk = k_cache.index_select(0, flat).view(bsz, n, kvh, d).transpose(1, 2)
        vv = v_cache.index_select(0, flat).view(bsz, n, kvh, d).transpose(1, 2)
        return self._sdpa_decode(dec, q, kk, vv)

    def _sdpa_decode(
        self, dec: _DecodeGroup, q: torch.Tensor, kk: torch.Tensor, vv: torch.Tensor
    ) -> torch.Tensor:
        """One SDPA for all decode requests; ``kk``/``vv``: ``[B, KV, Lmax, D]``."""
        bsz, kvh, d = dec.batch_size, self.num_kv_heads, self.head_dim
        # [B, H, D] -> [B, KV, G, D]: head h = kv * G + g, the layout of HF's repeat_kv.
        qq = q.reshape(bsz, kvh, self.num_heads // kvh, d)
        if self.softcap is not None:  # NOTE: [B, KV, G, D] over [B, KV, L, D]: the G rows share the keys
            o = attend_explicit(qq, kk.to(q.dtype), vv.to(q.dtype), dec.mask, self.scale, self.softcap)
        else:
            o = F.scaled_dot_product_attention(
                qq, kk.to(q.dtype), vv.to(q.dtype), attn_mask=dec.mask, scale=self.scale
            )
        return o.reshape(bsz, self.num_heads * d)
