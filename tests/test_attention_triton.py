"""Triton attention kernels and backend, checked against the torch backend and a float64 reference.

Without a GPU they run under Triton's interpreter on CPU tensors (conftest sets
TRITON_INTERPRET=1 before any kernel module is imported); on a GPU the same tests run the
compiled kernels on CUDA tensors. Shapes are small: the interpreter runs every program in Python.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'sglc[triton]')")

from attention_cases import DEVICE, RadixWorld, make_case, reference  # noqa: E402

from sglc_runtime.cache.kv_buffer import KVBuffer  # noqa: E402
from sglc_runtime.model.attention import (  # noqa: E402
    BackendUnavailable,
    available_backends,
    create_backend,
    unavailable_reason,
)
from sglc_runtime.model.attention import triton_backend  # noqa: E402
from sglc_runtime.model.attention.triton_backend import TritonAttentionBackend, TritonTuning  # noqa: E402
from sglc_runtime.model.attention.triton_decode import decode_attention, pick_num_splits  # noqa: E402
from sglc_runtime.model.attention.triton_extend import extend_attention  # noqa: E402
from sglc_runtime.model.forward_batch import ForwardBatch  # noqa: E402

pytestmark = pytest.mark.triton

# fp32 everywhere: the kernels use exact float32 products (IEEE dot) on a float32 pool.
TOL = dict(atol=2e-5, rtol=2e-5)
# Tiny blocks so that short test contexts still cover many blocks, chunks and empty chunks.
SMALL = TritonTuning(decode_block_n=16, decode_min_chunk=8, decode_max_splits=8, decode_target_programs=64,
                     extend_block_m=16, extend_block_n=16)


def _run(backend, case):
    """prepare + forward of one layer on a copy of the case's pool; returns (out, pool after)."""
    kv = KVBuffer(case.kv.num_layers, case.kv.num_slots, case.kv.num_kv_heads, case.kv.head_dim,
                  dtype=case.kv.dtype, device=DEVICE)
    for layer in range(kv.num_layers):
        kv.k[layer].copy_(case.kv.k[layer])
        kv.v[layer].copy_(case.kv.v[layer])
    backend.prepare(case.batch)
    return backend.forward(case.layer, case.q, case.k, case.v, kv), kv


def _check_against_torch_and_reference(case, tuning=SMALL):
    """Triton output == torch backend output == float64 reference; pools written identically."""
    heads, head_dim = case.q.shape[1], case.q.shape[2]
    kv_heads = case.k.shape[1]
    ref = reference(case)
    out_t, kv_t = _run(TritonAttentionBackend(heads, kv_heads, head_dim, tuning=tuning), case)
    out_r, kv_r = _run(create_backend("torch", heads, kv_heads, head_dim), case)
    assert torch.isfinite(out_t).all()
    torch.testing.assert_close(out_t.double().cpu(), ref, **TOL)
    torch.testing.assert_close(out_t, out_r, **TOL)
    layer = case.layer
    assert torch.equal(kv_t.k[layer], kv_r.k[layer]) and torch.equal(kv_t.v[layer], kv_r.v[layer])
    changed = (kv_t.k[layer] != case.kv.k[layer]).any(-1).any(-1).nonzero().flatten()
    assert set(changed.tolist()) <= set(case.batch.out_cache_loc.tolist())


# ------------------------------------------------------------------------------------ decode


@pytest.mark.parametrize("seed", [0, 1])
def test_ragged_decode_over_radix_cache_slots_matches_torch_and_reference(seed):
    """Decode of requests with cached prefixes (none / partial / whole, after evictions) is exact."""
    world = RadixWorld(seed)
    case = make_case(world, [("whole", 1), ("none", 1), ("partial", 1), ("whole", 1)], 4, 2, 16)
    assert case.batch.is_decode and len(set(case.batch.seq_lens)) > 1
    _check_against_torch_and_reference(case)


def test_decode_with_smollm_heads_matches_reference():
    """SmolLM2's head layout (9 query heads over 3 kv heads, head_dim 64) decodes exactly."""
    case = make_case(RadixWorld(2), [("whole", 1), ("partial", 1)], 9, 3, 64)
    _check_against_torch_and_reference(case)


@pytest.mark.parametrize("num_splits", [1, 2, 4, 8])
def test_decode_split_count_does_not_change_the_result(num_splits):
    """Any split count (including chunks past a short request's end) gives the same attention,
    and writes exactly the requests' rows of a poisoned output."""
    world = RadixWorld(3)
    case = make_case(world, [("whole", 1), ("none", 1), ("partial", 1)], 4, 2, 16)
    b = case.batch
    k_cache, v_cache = case.kv.k[case.layer], case.kv.v[case.layer]
    k_cache.index_copy_(0, b.out_cache_loc, case.k)  # the backend's first step: store the new K/V
    v_cache.index_copy_(0, b.out_cache_loc, case.v)
    flat = torch.cat(b.kv_indices)
    lens = torch.tensor(b.seq_lens, device=DEVICE)
    starts = torch.cumsum(lens, 0) - lens
    # NOTE: the query rows are scattered inside a larger output; other rows must stay poisoned.
    rows = torch.tensor([4, 0, 2], device=DEVICE)
    q = torch.randn(6, 4, 16, device=DEVICE)
    q[rows] = case.q
    out = torch.full((6, 64), float("nan"), device=DEVICE)
    decode_attention(q, k_cache, v_cache, out, flat, starts, lens, rows, num_splits, 16**-0.5, block_n=16)
    ref = reference(case)
    torch.testing.assert_close(out[rows].double().cpu(), ref, **TOL)
    others = [1, 3, 5]
    assert torch.isnan(out[others]).all()


def test_pick_num_splits_fills_the_grid_but_keeps_chunks_long():
    """Splits are powers of two, never make chunks shorter than min_chunk, and stop at the cap."""
    assert pick_num_splits(1, 3, 100) == 1  # short context: one chunk
    assert pick_num_splits(1, 3, 2048) == 16  # 2048 / 128
    assert pick_num_splits(64, 3, 2048) == 2  # 192 programs: one more round fills 132 SMs better
    assert pick_num_splits(128, 3, 2048) == 1  # 384 programs already
    assert pick_num_splits(1, 3, 100_000) == 32  # the cap
    for b in (1, 3, 8, 32):
        for n in (1, 50, 129, 1000, 5000):
            s = pick_num_splits(b, 3, n)
            assert s & (s - 1) == 0 and (s == 1 or n / s >= 128)


# ------------------------------------------------------------------------------------ extend


@pytest.mark.parametrize("seed", [0, 1])
def test_extend_over_cached_prefixes_matches_torch_and_reference(seed):
    """Prefill with no / partial / whole cached prefix: new tokens see the prefix and, causally,
    themselves; output equals the torch backend and the float64 reference."""
    world = RadixWorld(10 + seed)
    case = make_case(world, [("none", 7), ("partial", 19), ("whole", 3), ("whole", 33)], 4, 2, 16)
    _check_against_torch_and_reference(case)


def test_extend_with_smollm_heads_matches_reference():
    """9 query heads over 3 kv heads, head_dim 64, with a cached prefix."""
    case = make_case(RadixWorld(12), [("partial", 20), ("none", 5)], 9, 3, 64)
    _check_against_torch_and_reference(case, TritonTuning(extend_block_m=16, extend_block_n=32))


def test_extend_writes_exactly_its_rows_of_a_poisoned_output():
    """The extend kernel writes every row of its requests and no other row."""
    case = make_case(RadixWorld(13), [("partial", 5), ("none", 18)], 4, 2, 16)
    b = case.batch
    k_cache, v_cache = case.kv.k[case.layer], case.kv.v[case.layer]
    flat = torch.cat(b.kv_indices)
    lens = torch.tensor(b.seq_lens, device=DEVICE)
    # NOTE: the two requests' rows sit at 3.. and 10.. of a 30-row batch (gaps stay poisoned).
    q_starts = [3, 10]
    q = torch.randn(30, 4, 16, device=DEVICE)
    k = torch.randn(30, 2, 16, device=DEVICE)
    v = torch.randn(30, 2, 16, device=DEVICE)
    rows = torch.cat([torch.arange(s, s + e) for s, e in zip(q_starts, b.extend_lens)]).to(DEVICE)
    q[rows], k[rows], v[rows] = case.q, case.k, case.v
    out = torch.full((30, 64), float("nan"), device=DEVICE)
    t = lambda xs: torch.tensor(xs, device=DEVICE)  # noqa: E731
    extend_attention(q, k, v, k_cache, v_cache, out, flat, torch.cumsum(lens, 0) - lens, t(b.prefix_lens),
                     t(q_starts), t(b.extend_lens), max(b.extend_lens), 16**-0.5, block_m=16, block_n=16)
    torch.testing.assert_close(out[rows].double().cpu(), reference(case), **TOL)
    others = sorted(set(range(30)) - set(rows.tolist()))
    assert torch.isnan(out[others]).all()


# ------------------------------------------------------------------------------------ mixed


def test_mixed_decode_and_extend_batch_matches_torch_and_reference():
    """One forward with decode and extend requests interleaved runs both kernels correctly."""
    world = RadixWorld(20)
    case = make_case(world, [("whole", 1), ("partial", 9), ("none", 1), ("none", 4), ("partial", 1)], 4, 2, 16)
    _check_against_torch_and_reference(case)


def test_backend_serves_every_layer_of_a_forward():
    """Layer after layer the backend writes that layer's pool and reads only it."""
    world = RadixWorld(21)
    case = make_case(world, [("partial", 1), ("whole", 6)], 4, 2, 16, num_layers=3)
    backend = TritonAttentionBackend(4, 2, 16, tuning=SMALL)
    torch_backend = create_backend("torch", 4, 2, 16)
    kv_a, kv_b = case.kv, KVBuffer(3, case.kv.num_slots, 2, 16, device=DEVICE)
    for layer in range(3):
        kv_b.k[layer].copy_(kv_a.k[layer])
        kv_b.v[layer].copy_(kv_a.v[layer])
    backend.prepare(case.batch)
    torch_backend.prepare(case.batch)
    for layer in range(3):
        q = torch.randn_like(case.q)
        torch.testing.assert_close(backend.forward(layer, q, case.k, case.v, kv_a),
                                   torch_backend.forward(layer, q, case.k, case.v, kv_b), **TOL)
        assert torch.equal(kv_a.k[layer], kv_b.k[layer])


# ------------------------------------------------------------------------------------ registry


def test_registry_lists_triton_and_flashinfer_with_reasons():
    """triton is available here; flashinfer is listed but says why it cannot be created."""
    assert {"torch", "triton", "flashinfer"} <= set(available_backends())
    assert unavailable_reason("triton") is None
    assert isinstance(create_backend("triton", 4, 2, 16), TritonAttentionBackend)
    reason = unavailable_reason("flashinfer")
    assert reason is not None and "flashinfer" in reason
    with pytest.raises(BackendUnavailable, match="flashinfer"):
        create_backend("flashinfer", 4, 2, 16)


def test_forward_before_prepare_raises():
    """forward without prepare is a clear error, not stale state."""
    kv = KVBuffer(1, 4, 2, 16, device=DEVICE)
    z = torch.zeros(1, 2, 16, device=DEVICE)
    with pytest.raises(RuntimeError, match="prepare"):
        TritonAttentionBackend(4, 2, 16).forward(0, torch.zeros(1, 4, 16, device=DEVICE), z, z, kv)


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    """On CPU tensors outside the interpreter the backend says to use torch (no cryptic failure)."""
    monkeypatch.setattr(triton_backend, "INTERPRETED", False)
    batch = ForwardBatch.from_requests([[1]], [[0]], device="cpu")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        TritonAttentionBackend(4, 2, 16).prepare(batch)


def test_head_dim_must_be_a_power_of_two():
    """Odd head sizes are rejected at construction with the reason."""
    with pytest.raises(ValueError, match="power of two"):
        TritonAttentionBackend(4, 2, 24)


# ------------------------------------------------------------------------------------ compiler


def test_kernels_compile_for_an_h100_without_spills():
    """Every kernel variant compiles for sm_90 (ptxas, no GPU needed) with no local memory, and
    the bf16 kernels use tensor-core mma; run outside the interpreter, in a subprocess."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # NOTE: triton 3.9 warns when unset; 1 is its default
    proc = subprocess.run([sys.executable, str(root / "bench" / "triton_kernel_report.py"), "--check"],
                          capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("COMPILE FAILED") == 0 and "_extend_kernel" in proc.stdout
