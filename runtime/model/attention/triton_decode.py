"""Triton paged decode attention: one new token per request, split-K over the KV history.

Flash-decoding in two kernels:

1. ``_decode_split_kernel``, grid ``(batch, num_kv_heads, num_splits)``. A program takes one
   request, one kv head and one contiguous chunk of that request's history. It loads the
   ``G = num_heads / num_kv_heads`` query heads that share the kv head as the rows of one
   ``[BLOCK_G, D]`` tile (GQA: each key/value block is read once for all G heads, not G times),
   walks its chunk in ``BLOCK_N`` blocks, reads the blocks' slot ids from the request's
   ``kv_indices`` (the radix cache's slots: scattered, not contiguous) and gathers those K/V rows
   from the pool, with an online softmax. It writes the chunk's normalized output and its
   log-sum-exp (base 2).
2. ``_decode_reduce_kernel``, grid ``(batch, num_heads)``, merges the chunks by their
   log-sum-exps. With one split, kernel 1 writes the final output itself and 2 is not launched.

Each request's history is cut into ``num_splits`` chunks of equal length (rounded up to
``BLOCK_N``), so short and long requests of a ragged batch keep every program busy for about the
same time relative to their length; chunks past a short request's end are empty and report
``lse = -inf`` (weight 0 in the merge).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

# NOTE: 1/ln(2): scores are kept in base 2 so the kernels use exp2/log2 (one multiply fewer).
_LOG2E = 1.4426950408889634
# tl.dot needs at least 16 rows on NVIDIA GPUs; the G heads of a group are padded up to this.
_MIN_DOT_ROWS = 16


@triton.jit
def _decode_split_kernel(
    Q, K, V, Out, PartOut, PartLse,
    kv_indices, kv_starts, seq_lens, q_rows,
    qk_scale, num_splits,
    stride_qt, stride_qh,
    stride_ks, stride_kh,
    stride_vs, stride_vh,
    stride_ot,
    stride_pb, stride_ph, stride_ps,
    stride_lb, stride_lh,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    DIRECT: tl.constexpr, IEEE: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    kv_start = tl.load(kv_starts + b)
    seq_len = tl.load(seq_lens + b)
    # NOTE: chunks are BLOCK_N-aligned so only a chunk's last block is partial. (Plain integer
    # ceil-divisions rather than tl.cdiv: each jit helper call costs ~2 ms in the interpreter.)
    per_split = (seq_len + num_splits - 1) // num_splits
    chunk = (per_split + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    offs_g = tl.arange(0, BLOCK_G)
    g_mask = offs_g < GROUP
    heads = kvh * GROUP + offs_g  # head h = kv_head * G + g (HF repeat_kv layout)
    offs_d = tl.arange(0, HEAD_DIM)
    row = tl.load(q_rows + b)
    q = tl.load(Q + row * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                mask=g_mask[:, None], other=0.0)
    q = q.to(K.dtype.element_ty)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi
        slots = tl.load(kv_indices + kv_start + offs_n, mask=n_mask, other=0).to(tl.int64)
        k = tl.load(K + slots[:, None] * stride_ks + kvh * stride_kh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        if IEEE:  # float32 pool: exact float32 products (the default would round to tf32)
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale  # NOTE: scaled after the product: no extra rounding of q in bf16
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)  # first block: exp2(-inf) = 0 drops the empty state
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

    # NOTE: an empty chunk (past a short request's end) has l_i == 0: output 0, lse -inf.
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    if DIRECT:
        tl.store(Out + row * stride_ot + heads[:, None] * HEAD_DIM + offs_d[None, :],
                 out.to(Out.dtype.element_ty), mask=g_mask[:, None])
    else:
        lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
        base = b * stride_pb + heads * stride_ph + split * stride_ps
        tl.store(PartOut + base[:, None] + offs_d[None, :], out, mask=g_mask[:, None])
        tl.store(PartLse + b * stride_lb + heads * stride_lh + split, lse, mask=g_mask)


@triton.jit
def _decode_reduce_kernel(
    Out, PartOut, PartLse, q_rows, num_splits,
    stride_ot, stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
    HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    s_mask = offs_s < num_splits
    offs_d = tl.arange(0, HEAD_DIM)
    lse = tl.load(PartLse + b * stride_lb + h * stride_lh + offs_s,
                  mask=s_mask, other=float("-inf"))
    # NOTE: chunk 0 always holds >= 1 token, so the max is finite and empty chunks weigh 0.
    w = tl.exp2(lse - tl.max(lse, 0))
    part = tl.load(PartOut + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                   mask=s_mask[:, None], other=0.0)
    out = tl.sum(w[:, None] * part, 0) / tl.sum(w, 0)
    row = tl.load(q_rows + b)
    tl.store(Out + row * stride_ot + h * HEAD_DIM + offs_d, out.to(Out.dtype.element_ty))


def pick_num_splits(batch_size: int, num_kv_heads: int, max_len: int, *, min_chunk: int = 128,
                    target_programs: int = 264, max_splits: int = 32) -> int:
    """Chunks per request: enough programs to fill the GPU (``target_programs``, ~2 per SM on an
    H100), never chunks shorter than ``min_chunk`` tokens; a power of two (few kernel variants)."""
    by_len = max(1, max_len // min_chunk)
    by_grid = max(1, triton.cdiv(target_programs, batch_size * num_kv_heads))
    n = min(by_len, by_grid, max_splits)
    return 1 << (n.bit_length() - 1)  # round down to a power of two


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_starts: torch.Tensor,
    seq_lens: torch.Tensor,
    q_rows: torch.Tensor,
    num_splits: int,
    scale: float,
    *,
    block_n: int = 64,
    partials: torch.Tensor | None = None,
) -> None:
    """Attend one query token per request over its paged history; writes ``out`` rows in place.

    Args:
        q: ``[T, num_heads, head_dim]``; request ``b``'s query is row ``q_rows[b]``.
        k_cache, v_cache: ``[num_slots, num_kv_heads, head_dim]`` (one layer of the pool).
        out: ``[T, num_heads * head_dim]``; rows ``q_rows`` are written, no other.
        kv_indices: flat slots; request ``b``'s are
            ``kv_indices[kv_starts[b] : kv_starts[b] + seq_lens[b]]`` (its new token's slot last).
        seq_lens: ``>= 1`` each.
        num_splits: chunks per request (see :func:`pick_num_splits`).
        partials: optional float32 scratch of at least ``batch * num_heads * num_splits *
            (head_dim + 1)`` elements for the per-chunk outputs and log-sum-exps (a caller that
            keeps one avoids an allocation per layer, and inside a CUDA graph it stays put).
    """
    batch = q_rows.numel()
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    assert k_cache.stride(2) == 1 and v_cache.stride(2) == 1 and q.stride(2) == 1, "head_dim must be contiguous"
    assert out.is_contiguous() and head_dim & (head_dim - 1) == 0, "out contiguous, head_dim a power of two"
    block_g = max(_MIN_DOT_ROWS, triton.next_power_of_2(group))
    ieee = k_cache.dtype == torch.float32
    direct = num_splits == 1
    if direct:
        part_out = part_lse = out  # unused by the kernel when DIRECT
        pb = ph = ps = lb = lh = 0
    else:
        n_out, n_lse = batch * num_heads * num_splits * head_dim, batch * num_heads * num_splits
        if partials is None:
            partials = torch.empty(n_out + n_lse, dtype=torch.float32, device=q.device)
        assert partials.dtype == torch.float32 and partials.numel() >= n_out + n_lse, "partials too small"
        part_out = partials[:n_out].view(batch, num_heads, num_splits, head_dim)
        part_lse = partials[n_out : n_out + n_lse].view(batch, num_heads, num_splits)
        pb, ph, ps, _ = part_out.stride()
        lb, lh, _ = part_lse.stride()
    _decode_split_kernel[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, out, part_out, part_lse,
        kv_indices, kv_starts, seq_lens, q_rows,
        scale * _LOG2E, num_splits,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1),
        out.stride(0),
        pb, ph, ps,
        lb, lh,
        GROUP=group, BLOCK_G=block_g, HEAD_DIM=head_dim, BLOCK_N=block_n,
        DIRECT=direct, IEEE=ieee,
    )
    if not direct:
        _decode_reduce_kernel[(batch, num_heads)](
            out, part_out, part_lse, q_rows, num_splits,
            out.stride(0), pb, ph, ps, lb, lh,
            HEAD_DIM=head_dim, BLOCK_S=triton.next_power_of_2(num_splits),
        )
