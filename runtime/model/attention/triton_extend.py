"""Triton extend attention: new tokens over a cached prefix (prefill, chunked prefill, scoring).

``_extend_kernel``, grid ``(num_requests, num_kv_heads, cdiv(max_extend_len, TOKENS))``: a
program takes ``TOKENS = BLOCK_M // G`` new tokens of one request and all ``G = num_heads /
num_kv_heads`` query heads that share one kv head, as the ``BLOCK_M`` rows of one tile (row
``r`` is token ``r // G``, head ``r % G``; at most ``G - 1`` rows are padding). So each K/V block
is loaded once for the whole group (GQA), and the programs are G times fewer. It runs an online
softmax in two phases:

1. the request's cached prefix, read through its slot ids (``kv_indices[kv_start : kv_start +
   prefix_len]``, the radix cache's scattered slots) — every new token sees all of it, no mask;
2. the request's new tokens, read from the contiguous ``k``/``v`` of this forward (no gather),
   with the causal mask ``key <= query``; the loop stops at the program's last token, so the
   blocks above the diagonal are never loaded.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634  # scores in base 2: exp2/log2 in the kernel


@triton.jit
def _extend_kernel(
    Q, K_new, V_new, K, V, Out,
    kv_indices, kv_start_ptr, prefix_len_ptr, q_start_ptr, extend_len_ptr,
    qk_scale,
    stride_qt, stride_qh,
    stride_knt, stride_knh,
    stride_vnt, stride_vnh,
    stride_ks, stride_kh,
    stride_vs, stride_vh,
    stride_ot,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
):
    r = tl.program_id(0)
    kvh = tl.program_id(1)
    mb = tl.program_id(2)
    TOKENS = BLOCK_M // GROUP  # constexpr arithmetic: a compile-time constant
    extend_len = tl.load(extend_len_ptr + r)
    if mb * TOKENS >= extend_len:  # the grid is sized for the longest request
        return
    q_start = tl.load(q_start_ptr + r)
    prefix_len = tl.load(prefix_len_ptr + r)
    kv_start = tl.load(kv_start_ptr + r)

    rows = tl.arange(0, BLOCK_M)
    tok = mb * TOKENS + rows // GROUP  # the row's new token (0-based within the request)
    head = kvh * GROUP + rows % GROUP  # and its query head
    m_mask = (rows < TOKENS * GROUP) & (tok < extend_len)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n0 = tl.arange(0, BLOCK_N)
    q = tl.load(Q + (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=m_mask[:, None], other=0.0)
    q = q.to(K.dtype.element_ty)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    # Phase 1: the cached prefix, through the slot ids.
    for n0 in range(0, prefix_len, BLOCK_N):
        offs_n = n0 + offs_n0
        n_mask = offs_n < prefix_len
        slots = tl.load(kv_indices + kv_start + offs_n, mask=n_mask, other=0).to(tl.int64)
        k = tl.load(K + slots[:, None] * stride_ks + kvh * stride_kh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale  # NOTE: scaled after the product: no extra rounding of q in bf16
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + slots[:, None] * stride_vs + kvh * stride_vh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        if IEEE:
            pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    # Phase 2: the new tokens themselves, causal. NOTE: key 0 is visible to every row (also the
    # padding rows), so no row is ever all -inf after the first block.
    hi = tl.minimum((mb + 1) * TOKENS, extend_len)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + offs_n0
        n_mask = offs_n < hi
        k = tl.load(K_new + (q_start + offs_n)[:, None] * stride_knt + kvh * stride_knh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0).to(K.dtype.element_ty)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale  # NOTE: scaled after the product: no extra rounding of q in bf16
        s = tl.where(n_mask[None, :] & (offs_n[None, :] <= tok[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V_new + (q_start + offs_n)[:, None] * stride_vnt + kvh * stride_vnh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0).to(V.dtype.element_ty)
        if IEEE:
            pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(Out + (q_start + tok)[:, None] * stride_ot + head[:, None] * HEAD_DIM + offs_d[None, :],
             out.to(Out.dtype.element_ty), mask=m_mask[:, None])


def extend_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_start: torch.Tensor,
    prefix_lens: torch.Tensor,
    q_starts: torch.Tensor,
    extend_lens: torch.Tensor,
    max_extend_len: int,
    scale: float,
    *,
    block_m: int = 64,
    block_n: int = 64,
) -> None:
    """Causal attention of each request's new tokens over its cached prefix and themselves.

    Args:
        q: ``[T, num_heads, head_dim]``; request ``r``'s new tokens are rows
            ``q_starts[r] .. q_starts[r] + extend_lens[r] - 1`` (also of ``k_new``/``v_new``).
        k_new, v_new: ``[T, num_kv_heads, head_dim]`` of the new tokens.
        k_cache, v_cache: ``[num_slots, num_kv_heads, head_dim]``: one layer of the pool.
        out: ``[T, num_heads * head_dim]``; only the requests' rows are written.
        kv_indices: flat slots; request ``r``'s prefix slots start at ``kv_start[r]``.
        max_extend_len: the largest ``extend_lens`` entry (sizes the grid; host-side int).
    """
    num_requests = q_starts.numel()
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    assert block_m >= group, f"block_m={block_m} must hold one token's {group} query heads"
    assert k_cache.stride(2) == 1 and v_cache.stride(2) == 1 and q.stride(2) == 1, "head_dim must be contiguous"
    assert k_new.stride(2) == 1 and v_new.stride(2) == 1 and out.is_contiguous(), "contiguous rows"
    assert head_dim & (head_dim - 1) == 0, "head_dim must be a power of two"
    grid = (num_requests, num_kv_heads, triton.cdiv(max_extend_len, block_m // group))
    _extend_kernel[grid](
        q, k_new, v_new, k_cache, v_cache, out,
        kv_indices, kv_start, prefix_lens, q_starts, extend_lens,
        scale * _LOG2E,
        q.stride(0), q.stride(1),
        k_new.stride(0), k_new.stride(1),
        v_new.stride(0), v_new.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1),
        out.stride(0),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
        IEEE=k_cache.dtype == torch.float32,
    )
