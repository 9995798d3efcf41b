"""The native CPU kernels (runtime/model/native/: binding/cpu_ops.cpp over the kernels/ variant
of each instruction-set level this CPU runs) against their eager definitions.

Each kernel replaces a run of torch ops; here it must compute the same thing (float32: to float
rounding; bf16: to about one bf16 ulp, since the kernels round once where eager rounds after
every op), on shapes that take both the inline and the thread-pool paths, and refuse bad input
with an error naming it before writing anything. (The integer linears, whose contract is an
error bound rather than eager equality, are in test_native_int_linears.py.)
"""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from sglc_runtime.model.attention.shared_prefix import shared_prefix_groups
from sglc_runtime.model.attention.torch_backend import attend_explicit
from sglc_runtime.model.models.layer_ops import EagerLayerOps, NativeLayerOps, layer_ops_for
from sglc_runtime.model.models.rope import RotaryEmbedding
from sglc_runtime.model.native import active_level, load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import supported_levels

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

DTYPES = [torch.float32, torch.bfloat16]


def tol(dtype: torch.dtype) -> dict:
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 1.6e-2}


@pytest.fixture(scope="module")
def native() -> NativeLayerOps:
    why = load_cpu_ops()
    assert why is None, f"the native kernels did not build on a machine with a compiler: {why}"
    return NativeLayerOps()


@pytest.fixture(params=supported_levels())
def at_level(request, native) -> NativeLayerOps:
    """The native ops running at one level this CPU supports (each kernel test runs per level)."""
    with running_level(request.param):
        yield native


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    """A builder killed mid-build leaves torch's lock file, on which the next start would wait
    forever; one older than any build is removed, a live one is left to its builder."""
    import os
    import time

    from sglc_runtime.model.native.build import STALE_LOCK_SECONDS, clear_stale_lock

    lock = tmp_path / "lock"
    assert not clear_stale_lock(tmp_path)
    lock.write_text("")
    assert not clear_stale_lock(tmp_path) and lock.exists()
    old = time.time() - STALE_LOCK_SECONDS - 60
    os.utime(lock, (old, old))
    assert clear_stale_lock(tmp_path) and not lock.exists()


def test_a_built_binding_loads_directly_unless_locked_or_broken(tmp_path):
    """The fast start path: no library, or one a build still holds the lock on, is not loaded
    (the builder runs); one that does not load is removed so that the builder links it again."""
    from sglc_runtime.model.native.build import load_built_binding

    assert not load_built_binding(tmp_path)
    library = tmp_path / "sglc_cpu_ops.so"
    library.write_bytes(b"not an ELF file: a link cut short")
    (tmp_path / "lock").write_text("")
    assert not load_built_binding(tmp_path) and library.exists()
    (tmp_path / "lock").unlink()
    assert not load_built_binding(tmp_path) and not library.exists()


def test_the_model_picks_native_ops_on_cpu_and_eager_elsewhere(native):
    assert isinstance(layer_ops_for(torch.device("cpu"), torch.bfloat16), NativeLayerOps)
    assert isinstance(layer_ops_for(torch.device("cpu"), torch.bfloat16, native=False), EagerLayerOps)
    assert isinstance(layer_ops_for(torch.device("cuda"), torch.bfloat16), EagerLayerOps)
    with pytest.raises(ValueError, match="CPU only"):
        layer_ops_for(torch.device("cuda"), torch.float32, native=True)
    with pytest.raises(ValueError, match="not built for torch.float64"):
        layer_ops_for(torch.device("cpu"), torch.float64, native=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 7, 100])  # NOTE: 100 rows spread over the thread pool
def test_norms_and_silu_match_eager(at_level, dtype, rows):
    g = torch.Generator().manual_seed(rows)
    h = (torch.randn(rows, 576, generator=g) * 3).to(dtype)
    delta = torch.randn(rows, 576, generator=g).to(dtype)
    w = torch.randn(576, generator=g).to(dtype)
    torch.testing.assert_close(at_level.rms_norm(h, w, 1e-5), EagerLayerOps.rms_norm(h, w, 1e-5), **tol(dtype))

    h_eager, x_eager = EagerLayerOps.add_rms_norm(h, delta, w, 1e-5)
    h_native = h.clone()
    same, x_native = at_level.add_rms_norm(h_native, delta, w, 1e-5)
    assert same is h_native  # in place
    assert torch.equal(h_native, h_eager)  # one rounding of h + delta either way
    torch.testing.assert_close(x_native, x_eager, **tol(dtype))

    gu = (torch.randn(rows, 2 * 1536, generator=g) * 4).to(dtype)
    torch.testing.assert_close(at_level.silu_mul(gu), EagerLayerOps.silu_mul(gu), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 7, 100])
def test_gelu_tanh_mul_matches_eager(at_level, dtype, rows):
    """GeGLU (Gemma's MLP) equals F.gelu(approximate="tanh") * up, far into both tails."""
    g = torch.Generator().manual_seed(rows)
    gu = (torch.randn(rows, 2 * 1000, generator=g) * 4).to(dtype)
    gu[0, :6] = torch.tensor([-200.0, -12.0, -0.0, 1e-6, 12.0, 200.0]).to(dtype)
    torch.testing.assert_close(at_level.gelu_tanh_mul(gu), EagerLayerOps.gelu_tanh_mul(gu.float()).to(dtype),
                               **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_rotates_in_place_like_eager(at_level, dtype):
    rope = RotaryEmbedding(64, 10000.0, None, 2048)
    qkv = torch.randn(5, (9 + 3 + 3) * 64).to(dtype)
    positions = torch.tensor([0, 3, 17, 900, 2047])
    eager = EagerLayerOps.rope(qkv, EagerLayerOps.rope_inputs(rope, positions, dtype, 2047), 12, 64)
    before_v = qkv[:, 12 * 64:].clone()
    out = at_level.rope(qkv, at_level.rope_inputs(rope, positions, dtype, 2047), 12, 64)
    assert out.data_ptr() == qkv.data_ptr()
    torch.testing.assert_close(out, eager, **tol(dtype))
    assert torch.equal(qkv[:, 12 * 64:], before_v)  # v untouched
    with pytest.raises(RuntimeError, match="position 5000 outside the table"):
        at_level.rope(qkv, (torch.tensor([0, 1, 2, 3, 5000]), *rope.tables(2047)), 12, 64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_partial_rope_rotates_each_heads_leading_features(at_level, dtype):
    """Partial rotary (tables of 48 of 64 features: Phi-4-mini's 0.75) rotates each head's first
    48 features as eager does and leaves the other 16 and v untouched."""
    rope = RotaryEmbedding(64, 10000.0, None, 2048, rotary_dim=48)
    qkv = torch.randn(5, (8 + 2 + 2) * 64).to(dtype)
    positions = torch.tensor([0, 3, 17, 900, 2047])
    eager = EagerLayerOps.rope(qkv, EagerLayerOps.rope_inputs(rope, positions, dtype, 2047), 10, 64)
    before = qkv.clone()
    out = at_level.rope(qkv, at_level.rope_inputs(rope, positions, dtype, 2047), 10, 64)
    assert out.data_ptr() == qkv.data_ptr()
    torch.testing.assert_close(out, eager, **tol(dtype))
    heads = qkv[:, :640].view(5, 10, 64)
    assert torch.equal(heads[..., 48:], before[:, :640].view(5, 10, 64)[..., 48:])
    assert torch.equal(qkv[:, 640:], before[:, 640:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, rotary_dim", [(5, 64), (1, 64), (100, 64), (5, 48)])
def test_head_norm_rope_is_the_norms_then_the_rotation_in_place(at_level, dtype, rows, rotary_dim):
    """head_norm_rope_ (Qwen3 / Gemma 3: each q and k head RMS-normalized with its own weight, then
    RoPE) equals the native norms + rope it replaces bit for bit, and eager within rounding; v is
    left alone; a bad norm weight is refused before anything is written."""
    rope = RotaryEmbedding(64, 10000.0, None, 2048, rotary_dim=rotary_dim)
    g = torch.Generator().manual_seed(rows)
    qkv = torch.randn(rows, (8 + 2 + 2) * 64, generator=g).to(dtype) * 3
    q_norm, k_norm = (1 + 0.1 * torch.randn(64, generator=g)).to(dtype), (1 + 0.1 * torch.randn(64, generator=g)).to(dtype)
    positions = torch.randint(0, 2048, (rows,), generator=g)
    eager = EagerLayerOps.head_norm_rope(qkv.clone(), EagerLayerOps.rope_inputs(rope, positions, dtype, 2047), 8, 2, 64,
                                         q_norm, k_norm, 1e-6)
    stepwise = qkv.clone()
    q, k = stepwise[:, :512], stepwise[:, 512:640]
    q.copy_(at_level.rms_norm(q.reshape(rows * 8, 64), q_norm, 1e-6).view(rows, 512))
    k.copy_(at_level.rms_norm(k.reshape(rows * 2, 64), k_norm, 1e-6).view(rows, 128))
    normed_only = qkv.clone()  # NOTE: the norms alone (the clip_qkv road, which clamps before rotating)
    at_level.head_norm(normed_only, 8, 2, 64, q_norm, k_norm, 1e-6)
    assert torch.equal(normed_only, stepwise)
    stepwise = at_level.rope(stepwise, at_level.rope_inputs(rope, positions, dtype, 2047), 10, 64)
    before = qkv.clone()
    out = at_level.head_norm_rope(qkv, at_level.rope_inputs(rope, positions, dtype, 2047), 8, 2, 64, q_norm, k_norm, 1e-6)
    assert out.data_ptr() == qkv.data_ptr() and out.shape == (rows, 10, 64)
    assert torch.equal(out, stepwise)
    torch.testing.assert_close(out, eager, **tol(dtype))
    assert torch.equal(qkv[:, 640:], before[:, 640:])  # v untouched
    kept = qkv.clone()
    with pytest.raises(RuntimeError, match="q_norm and k_norm must be contiguous"):
        at_level.head_norm_rope(qkv, at_level.rope_inputs(rope, positions, dtype, 2047), 8, 2, 64, q_norm[:32], k_norm,
                                1e-6)
    with pytest.raises(RuntimeError, match="outside the table"):
        at_level.head_norm_rope(qkv, (positions + 5000, *rope.tables(2047)), 8, 2, 64, q_norm, k_norm, 1e-6)
    assert torch.equal(qkv, kept)


def reference_decode(k_cache, v_cache, q, index, lens, scale, softcap=None):
    """Per request: SDPA over its slots, the query heads grouped as Hugging Face's repeat_kv
    (with a soft-cap: transformers' eager attention)."""
    h, kvh, d = q.shape[1], k_cache.shape[1], q.shape[2]
    out = []
    for r in range(q.shape[0]):
        slots = index[r, : int(lens[r])]
        kk = k_cache[slots].float().transpose(0, 1)
        vv = v_cache[slots].float().transpose(0, 1)
        qq = q[r].float().view(kvh, h // kvh, d)
        if softcap:
            o = attend_explicit(qq[None], kk[None], vv[None], None, scale, softcap)[0]
        else:
            o = F.scaled_dot_product_attention(qq, kk, vv, scale=scale)
        out.append(o.reshape(-1))
    return torch.stack(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lens", [[1], [37], [5, 300, 64], [700] * 4])  # 4 x 700: the thread pool
def test_decode_attention_writes_then_attends_over_scattered_slots(at_level, dtype, lens):
    check_decode_attention(dtype, lens, heads=9, kv_heads=3, head_dim=64)


@pytest.mark.parametrize("dtype", DTYPES + [torch.float16, torch.float64])  # float64: the generic loop
@pytest.mark.parametrize("heads, kv_heads, head_dim", [
    (4, 4, 64), (8, 4, 64), (8, 2, 64),  # 1, 2, 4 query heads per kv head: the register kernel
    (10, 2, 64), (6, 3, 32), (4, 2, 128),  # 5 per kv head, other head sizes: the generic loop
])
def test_decode_attention_matches_sdpa_for_each_head_layout(at_level, dtype, heads, kv_heads, head_dim):
    check_decode_attention(dtype, [3, 260, 41], heads=heads, kv_heads=kv_heads, head_dim=head_dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads, kv_heads, head_dim, lens", [
    (8, 2, 64, [3, 260, 41]),  # the register kernel
    (6, 3, 32, [3, 260, 41]),  # the generic loop
    (8, 2, 64, [2000]),  # one long request: split-K pieces, merged
])
def test_decode_attention_soft_caps_scores(at_level, two_threads, dtype, heads, kv_heads, head_dim, lens):
    """softcap > 0 caps every score to softcap * tanh(score / softcap) before the softmax, as
    transformers' eager attention does (Gemma 2), on every path of the kernel."""
    check_decode_attention(dtype, lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim, softcap=0.7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_prefix_cascade_soft_caps_scores(at_level, dtype):
    """The cascade over a shared prefix caps its scores as the per-request keys are capped."""
    k_cache, v_cache, loc, k_new, v_new, q, index, lens, group_of, prefix_lens = shared_prefix_batch(
        [(300, [1, 5, 9]), (64, [2, 2])], [50], dtype, seed=11)
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    k_expected[loc], v_expected[loc] = k_new, v_new
    out = torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens, 0.125,
                                               group_of, prefix_lens, softcap=0.7)
    torch.testing.assert_close(out.float(), reference_decode(k_expected, v_expected, q, index, lens, 0.125, 0.7),
                               **tol(dtype))


def check_decode_attention(dtype, lens, heads, kv_heads, head_dim, softcap=None):
    """decode_attention_ over scattered slots: writes the new K/V, and attends as SDPA does."""
    g = torch.Generator().manual_seed(sum(lens) + heads * 100 + head_dim)
    slots, kvh, h, d = 4096, kv_heads, heads, head_dim
    k_cache = torch.randn(slots, kvh, d, generator=g).to(dtype)
    v_cache = torch.randn(slots, kvh, d, generator=g).to(dtype)
    perm = torch.randperm(slots, generator=g)
    max_len, taken, rows = max(lens), 0, []
    for n in lens:  # NOTE: each request's slots are scattered, padded with its first slot
        own = perm[taken: taken + n]
        taken += n
        rows.append(torch.cat([own, own[:1].expand(max_len - n)]))
    index = torch.stack(rows)
    lens_t = torch.tensor(lens)
    loc = index[torch.arange(len(lens)), lens_t - 1]
    q = torch.randn(len(lens), h, d, generator=g).to(dtype)
    k_new = torch.randn(len(lens), kvh, d, generator=g).to(dtype)
    v_new = torch.randn(len(lens), kvh, d, generator=g).to(dtype)
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    k_expected[loc], v_expected[loc] = k_new, v_new

    scale = d ** -0.5
    capped = {"softcap": softcap} if softcap else {}
    out = torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens_t, scale, **capped)
    assert torch.equal(k_cache, k_expected) and torch.equal(v_cache, v_expected)
    expected = reference_decode(k_expected, v_expected, q, index, lens_t, scale, softcap)
    assert out.dtype == dtype and out.shape == (len(lens), h * d)
    torch.testing.assert_close(out.float(), expected, **tol(dtype))


def shared_prefix_batch(groups, loose, dtype, seed):
    """Requests whose index rows start with their group's shared slots, then their own scattered
    ones; ``groups``: (prefix length, [own lengths]) each; ``loose``: own lengths of requests in no
    group. Returns the caches, the decode inputs and prefix_group / prefix_lens."""
    g = torch.Generator().manual_seed(seed)
    slots, kvh, h, d = 8192, 3, 9, 64
    k_cache = torch.randn(slots, kvh, d, generator=g).to(dtype)
    v_cache = torch.randn(slots, kvh, d, generator=g).to(dtype)
    perm, taken = torch.randperm(slots, generator=g), 0

    def take(n):
        nonlocal taken
        taken += n
        return perm[taken - n: taken]

    rows, group_of, prefix_lens = [], [], []
    for gi, (prefix, owns) in enumerate(groups):
        shared = take(prefix)
        prefix_lens.append(prefix)
        for n in owns:
            rows.append(torch.cat([shared, take(n)]))
            group_of.append(gi)
    for n in loose:
        rows.append(take(n))
        group_of.append(-1)
    lens = torch.tensor([len(r) for r in rows])
    max_len = int(lens.max())
    index = torch.stack([torch.cat([r, r[:1].expand(max_len - len(r))]) for r in rows])
    b = len(rows)
    loc = index[torch.arange(b), lens - 1]
    q = torch.randn(b, h, d, generator=g).to(dtype)
    k_new = torch.randn(b, kvh, d, generator=g).to(dtype)
    v_new = torch.randn(b, kvh, d, generator=g).to(dtype)
    return (k_cache, v_cache, loc, k_new, v_new, q, index, lens,
            torch.tensor(group_of), torch.tensor(prefix_lens, dtype=torch.long))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups,loose", [
    ([(40, [1, 5])], []),                     # one chunk, inline
    ([(700, [1, 3, 9, 2, 1, 1, 4, 30])], []),  # 3 chunks of prefix keys, the thread pool
    ([(300, [1 + i % 4 for i in range(25)])], []),  # 75 query rows per kv head: two blocks
    ([(64, [2, 2]), (513, [1, 7, 3])], [50, 1]),  # two groups and requests in none
])
def test_decode_attention_reads_a_shared_prefix_once_for_its_group(at_level, dtype, groups, loose):
    k_cache, v_cache, loc, k_new, v_new, q, index, lens, group_of, prefix_lens = shared_prefix_batch(
        groups, loose, dtype, seed=len(groups) * 100 + len(loose))
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    k_expected[loc], v_expected[loc] = k_new, v_new

    out = torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens, 0.125,
                                               group_of, prefix_lens)
    assert torch.equal(k_cache, k_expected) and torch.equal(v_cache, v_expected)
    torch.testing.assert_close(out.float(), reference_decode(k_expected, v_expected, q, index, lens, 0.125),
                               **tol(dtype))


@pytest.fixture
def two_threads():
    """The intra-op pool at two threads (the split-K path needs more than one), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups,loose", [
    ([], [2000]),                  # one long conversation: its keys in pieces, one per task
    ([], [129, 700, 1]),           # pieces of 128+ keys, a one-key request
    ([(300, [700])], []),          # a one-member shared prefix, then its own keys in pieces
    ([(256, [1, 400])], [900]),    # a group's states merged with split own keys
])
def test_decode_attention_splits_few_long_requests_across_threads(at_level, two_threads, dtype, groups, loose):
    k_cache, v_cache, loc, k_new, v_new, q, index, lens, group_of, prefix_lens = shared_prefix_batch(
        groups, loose, dtype, seed=7 + len(loose))
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    k_expected[loc], v_expected[loc] = k_new, v_new
    shared = (group_of, prefix_lens) if groups else ()

    out = torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens, 0.125, *shared)
    assert torch.equal(k_cache, k_expected) and torch.equal(v_cache, v_expected)
    torch.testing.assert_close(out.float(), reference_decode(k_expected, v_expected, q, index, lens, 0.125),
                               **tol(dtype))


def test_cascade_is_kept_for_the_layouts_the_register_kernel_does_not_cover(at_level):
    from sglc_runtime.model.attention.torch_backend import cascade_pays

    assert cascade_pays(128, 4) and cascade_pays(64, 5) and cascade_pays(32, 1)
    # SmolLM2: 9 heads over 3 kv heads of 64: in registers at every level but the generic one
    assert cascade_pays(64, 3) is (active_level() == "generic")


def test_decode_attention_refuses_a_false_shared_prefix_before_writing(native):
    k_cache, v_cache, loc, k_new, v_new, q, index, lens, group_of, prefix_lens = shared_prefix_batch(
        [(20, [1, 2])], [], torch.float32, seed=7)
    before = k_cache.clone()
    wrong = index.clone()
    wrong[1, 5] = wrong[1, 21]  # the second request's 6th slot is its own, not the group's
    with pytest.raises(RuntimeError, match="request 1 does not share the first 20 slots of group 0"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, wrong, lens, 1.0,
                                             group_of, prefix_lens)
    with pytest.raises(RuntimeError, match="shared prefix of 21 slots for request 0 of length 21"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens, 1.0,
                                             group_of, torch.tensor([21]))
    with pytest.raises(RuntimeError, match="prefix_group 1 outside"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens, 1.0,
                                             torch.tensor([0, 1]), prefix_lens)
    with pytest.raises(RuntimeError, match="go together"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, loc, k_new, v_new, q, index, lens, 1.0,
                                             group_of, None)
    assert torch.equal(k_cache, before)  # nothing written


def test_decode_attention_refuses_bad_slots_before_writing(native):
    k_cache, v_cache = torch.zeros(16, 1, 8), torch.zeros(16, 1, 8)
    q, k_new, v_new = torch.ones(1, 2, 8), torch.ones(1, 1, 8), torch.ones(1, 1, 8)
    index, lens = torch.tensor([[0, 1, 99]]), torch.tensor([3])
    with pytest.raises(RuntimeError, match="slot 99 outside 16 slots"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, torch.tensor([2]), k_new, v_new, q, index, lens, 1.0)
    with pytest.raises(RuntimeError, match="length 4 outside"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, torch.tensor([2]), k_new, v_new, q, index,
                                             torch.tensor([4]), 1.0)
    with pytest.raises(RuntimeError, match="share one dtype"):
        torch.ops.sglc_cpu.decode_attention_(k_cache, v_cache, torch.tensor([2]), k_new, v_new, q.double(),
                                             index, lens, 1.0)
    assert not k_cache.any() and not v_cache.any()  # nothing written


@pytest.mark.model
def test_native_and_eager_models_agree_on_the_real_model(native):
    """SmolLM2 int4, one prompt and 24 decode steps: the native path's logits stay close to the
    eager path's, and its greedy tokens agree at nearly every teacher-forced position."""
    from bench.bench_quantization import PROMPTS, agreement, float_continuations
    from sglc_runtime.model.default_model import find_default_gguf, resolve_model_path
    from sglc_runtime.model.models import load_model

    path, gguf = resolve_model_path(None), find_default_gguf()
    eager = load_model(path, quantization="int4", native_ops=False, gguf=gguf, decode_gguf=True)
    fast = load_model(path, quantization="int4", gguf=gguf, decode_gguf=True)
    assert isinstance(fast.ops, NativeLayerOps) and isinstance(eager.ops, EagerLayerOps)
    sequences = float_continuations(eager, PROMPTS[:3], new_tokens=24)
    stats = agreement(eager, fast, sequences)
    assert stats["top1_agreement"] >= 0.9, stats


@pytest.mark.model
def test_requests_decoding_under_one_prefix_answer_as_they_do_alone(native, monkeypatch):
    """The real engine (float32): three requests under one ~70-token prompt decode together, their
    shared slots attended once (cascade, forced on: the default model's layout runs without it),
    and answer token for token as each does alone."""
    import sglc_runtime.model.attention.torch_backend as torch_backend
    from sglc_runtime.engine import Engine

    seen = []
    monkeypatch.setattr(torch_backend, "cascade_pays", lambda head_dim, group: True)

    def spy(index, lens):
        found = shared_prefix_groups(index, lens)
        seen.append(found is not None and int(found[1].min()) >= 60)
        return found

    monkeypatch.setattr(torch_backend, "shared_prefix_groups", spy)
    prefix = "Here is a list of facts about the planets of the solar system, one per line. " * 5
    prompts = [prefix + f"Question {i}: which planet is the largest?" for i in range(3)]
    params = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    engine = Engine(threads=2)
    try:
        alone = [engine.generate([p], params)[0].token_ids for p in prompts]
        seen.clear()
        together = [o.token_ids for o in engine.generate(prompts, params)]
    finally:
        engine.shutdown()
    assert sum(seen) >= 10, "the concurrent decode steps did not find the shared prefix"
    assert together == alone


@pytest.mark.model
def test_sglc_serve_by_default_runs_the_shipped_int4_weights_on_the_native_kernels():
    """`sglc serve` with no precision flag: bfloat16 compute over int4 weights (ModelInfo says
    bfloat16), and greedy answers that match an in-process engine built the same way."""
    import grpc
    from grpc_helpers import ServeProcess

    from sglc.wire.proto import runtime_pb2 as pb
    from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
    from sglc_runtime.engine import Engine

    prompts = ["The capital of France is", "def add(a, b):"]
    engine = Engine(quantization="int4", threads=2)
    try:
        expected = [o.token_ids for o in engine.generate(prompts, {"temperature": 0, "max_new_tokens": 12})]
    finally:
        engine.shutdown()
    with ServeProcess("--quantization", "auto", "--threads", "2") as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.RuntimeStub(channel)
            assert stub.ModelInfo(pb.ModelInfoRequest(), timeout=60).dtype == "bfloat16"
            for prompt, want in zip(prompts, expected):
                req = pb.GenerateRequest(prompt=pb.Prompt(text=prompt),
                                         sampling=pb.SamplingParams(max_new_tokens=12, temperature=0.0))
                done = list(stub.Generate(req, timeout=120))[-1].complete
                assert list(done.output_ids) == list(want)
