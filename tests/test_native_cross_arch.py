"""The kernel variants this machine cannot load into torch, held to the same references.

- aarch64 (``neon_dotprod`` and the portable ``generic`` build): cross-compiled with Debian's
  ``aarch64-linux-gnu-g++`` into a static driver (tests/native/kernel_driver.cpp) and run under
  ``qemu-aarch64``: the integer linears must equal this machine's portable reference bit for bit
  (the integer sums are exact and every variant scales in the same fused order), their activation
  quantization must equal round-half-even of x * 127 / amax, and attention and the small ops must
  match torch within the tolerances test_native_ops.py uses.
- x86 levels this CPU cannot run (AVX512 on an AVX2 machine): compiled, not run.

Skips, naming what is missing, where the cross compiler or qemu is not installed (`.ci/run`
installs both where it can: apt-get install g++-aarch64-linux-gnu qemu-user).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sglc_runtime.model.attention.torch_backend import attend_explicit
from sglc_runtime.model.models.layer_ops import EagerLayerOps
from sglc_runtime.model.models.quantized_linear import Int8Linear, int4_levels, pack_q4_tiles, pack_q8_tiles
from sglc_runtime.model.models.rope import RotaryEmbedding
from sglc_runtime.model.native import build, load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import machine, supported_levels

DRIVER = Path(__file__).parent / "native" / "kernel_driver.cpp"
CROSS_CXX = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"
ARM_LEVELS = ("neon_dotprod", "generic")
SLOT = {torch.float32: 0, torch.bfloat16: 1}

needs_arm_tools = pytest.mark.skipif(
    machine() != "x86_64" or shutil.which(CROSS_CXX) is None or shutil.which(QEMU) is None,
    reason=f"needs {CROSS_CXX} and {QEMU} on an x86_64 host (apt-get install g++-aarch64-linux-gnu qemu-user)")


@pytest.fixture(scope="module")
def arm_drivers(tmp_path_factory) -> dict[str, Path]:
    """The driver built for each aarch64 level (static, so qemu needs no aarch64 libraries)."""
    folder = tmp_path_factory.mktemp("arm")
    drivers = {}
    for level in ARM_LEVELS:
        out = folder / f"driver_{level}"
        cmd = build.variant_command(level, out, cxx=CROSS_CXX, program=DRIVER)
        if level == "generic":
            cmd.insert(1, "-march=armv8-a")  # NOTE: the baseline: no dot-product instructions
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        drivers[level] = out
    return drivers


def run_driver(driver: Path, op: str, arrays: list[np.ndarray], tmp_path: Path) -> bytes:
    src, dst = tmp_path / f"{op}.in", tmp_path / f"{op}.out"
    src.write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays))
    done = subprocess.run([QEMU, "-cpu", "max", str(driver), op, str(src), str(dst)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return dst.read_bytes()


def raw(t: torch.Tensor) -> np.ndarray:
    """A tensor's bytes as numpy (bf16 as its uint16 bits)."""
    t = t.contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


class Outputs:
    """Reads consecutive arrays back from a driver's output."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, dtype: torch.dtype, *shape: int) -> torch.Tensor:
        itemsize = torch.empty(0, dtype=dtype).element_size()
        n = int(np.prod(shape)) * itemsize
        chunk = self.data[self.at:self.at + n]
        self.at += n
        if dtype == torch.bfloat16:
            return torch.from_numpy(np.frombuffer(chunk, np.int16).copy()).view(torch.bfloat16).view(*shape)
        np_dtype = {torch.float32: np.float32, torch.int8: np.int8, torch.int32: np.int32}[dtype]
        return torch.from_numpy(np.frombuffer(chunk, np_dtype).copy()).view(*shape)


@needs_arm_tools
@pytest.mark.parametrize("level", ARM_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arm_integer_linears_equal_the_reference_bit_for_bit(arm_drivers, tmp_path, level, dtype):
    assert load_cpu_ops() is None
    g = torch.Generator().manual_seed(5)
    rows, k, n = 6, 192, 48
    w = torch.randn(n, k, generator=g) * 0.05
    w[:, 64:96] += 0.4
    x = (torch.randn(rows, k, generator=g) * torch.linspace(0.3, 2, k)).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    q4, d, m = pack_q4_tiles(*int4_levels(w))
    plain = Int8Linear.quantize(w, native=False)
    q8, scales = pack_q8_tiles(plain.weight), plain.scales.float()
    header = np.array([rows, k, n // 16, SLOT[dtype]], np.int64)
    out = Outputs(run_driver(arm_drivers[level], "int_linear",
                             [header, raw(x), q4.numpy(), raw(d.view(torch.bfloat16)), raw(m.view(torch.bfloat16)),
                              q8.numpy(), scales.numpy(), raw(bias)], tmp_path))
    y4, y8 = out.take(dtype, rows, n), out.take(dtype, rows, n)
    q, dx = out.take(torch.int8, rows, k), out.take(torch.float32, rows, k // 32)
    with running_level("generic"):
        ref4 = torch.ops.sglc_cpu.q4_linear(x, q4, d, m, bias)
        ref8 = torch.ops.sglc_cpu.q8_linear(x, q8, scales, bias)
    assert torch.equal(y4, ref4) and torch.equal(y8, ref8)
    blocks = x.float().view(rows, -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    expected_q = torch.round(blocks * (127 / amax)).to(torch.int8).view(rows, k)
    assert torch.equal(q, expected_q) and torch.equal(dx, (amax / 127).view(rows, -1))


@needs_arm_tools
@pytest.mark.parametrize("level", ARM_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arm_gguf_linears_equal_the_reference_bit_for_bit(arm_drivers, tmp_path, level, dtype):
    """GGUF's Q4_K (q4k tiles), Q8_0 (block-scaled q8 tiles) and Q6_K on aarch64 equal this
    machine's portable reference exactly, as the x86 levels do."""
    from gguf_blocks import gguf_tensor

    from sglc_runtime.model.gguf import GGUFWeight
    from sglc_runtime.model.models.gguf_linear import GGUFQ4KLinear, GGUFQ6KLinear, GGUFQ8Linear

    assert load_cpu_ops() is None
    rows, k, n = 5, 512, 32
    q4k = GGUFQ4KLinear(GGUFWeight("q4k", "Q4_K", n, k, gguf_tensor("Q4_K", n, k, seed=3)), None)
    q8 = GGUFQ8Linear(GGUFWeight("q8", "Q8_0", n, k, gguf_tensor("Q8_0", n, k, seed=4)), None)
    q6 = GGUFQ6KLinear(GGUFWeight("q6", "Q6_K", n, k, gguf_tensor("Q6_K", n, k, seed=5)), None)
    x = (torch.randn(rows, k, generator=torch.Generator().manual_seed(2)) * torch.linspace(0.3, 2, k)).to(dtype)
    bias = torch.randn(n).to(dtype)
    levels, d, dmin, sc, mn = q4k._args
    header = np.array([rows, k, n // 16, SLOT[dtype]], np.int64)
    out = Outputs(run_driver(arm_drivers[level], "gguf_linear",
                             [header, raw(x), levels.numpy(), raw(d.view(torch.bfloat16)), raw(dmin.view(torch.bfloat16)),
                              sc.numpy(), mn.numpy(), q8._tiles.numpy(), raw(q8._d.view(torch.bfloat16)),
                              q6._args[0].numpy(), raw(q6._args[1].view(torch.bfloat16)), q6._args[2].numpy(),
                              raw(bias)],
                             tmp_path))
    y4, y8, y6 = out.take(dtype, rows, n), out.take(dtype, rows, n), out.take(dtype, rows, n)
    with running_level("generic"):
        ref4 = torch.ops.sglc_cpu.q4k_linear(x, levels, d, dmin, sc, mn, bias)
        ref8 = torch.ops.sglc_cpu.q8b_linear(x, q8._tiles, q8._d, bias)
        ref6 = torch.ops.sglc_cpu.q6k_linear(x, *q6._args, bias)
    assert torch.equal(y4, ref4) and torch.equal(y8, ref8) and torch.equal(y6, ref6)


@needs_arm_tools
@pytest.mark.parametrize("level", ARM_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arm_half_linears_equal_the_reference_bit_for_bit(arm_drivers, tmp_path, level, dtype):
    """bf16 and float16 weights on half tiles (a decode pass of few rows and a prefill pass of many)
    on aarch64 equal this machine's portable reference exactly."""
    from sglc_runtime.model.models.half_linear import HalfTiledLinear

    assert load_cpu_ops() is None
    rows, k, n = 70, 96, 48
    g = torch.Generator().manual_seed(8)
    wb = HalfTiledLinear((torch.randn(n, k, generator=g) * 0.05).bfloat16(), None).tiled()[1][0]
    wh = HalfTiledLinear((torch.randn(n, k, generator=g) * 0.05).half(), None).tiled()[1][0]
    x = torch.randn(rows, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    header = np.array([rows, k, n // 16, SLOT[dtype]], np.int64)
    out = Outputs(run_driver(arm_drivers[level], "half_linear",
                             [header, raw(x), raw(wb), raw(wh.view(torch.bfloat16)), raw(bias)], tmp_path))
    yb, yh = out.take(dtype, rows, n), out.take(dtype, rows, n)
    with running_level("generic"):
        assert torch.equal(yb, torch.ops.sglc_cpu.half_linear(x, wb, bias))
        assert torch.equal(yh, torch.ops.sglc_cpu.half_linear(x, wh, bias))


@needs_arm_tools
@pytest.mark.parametrize("level", ARM_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arm_q5_linears_equal_the_reference_bit_for_bit(arm_drivers, tmp_path, level, dtype):
    """GGUF's Q5_0, Q5_1 and Q5_K (q5 tiles: nibbles plus a fifth-bit load) on aarch64 equal this
    machine's portable reference exactly."""
    from gguf_blocks import gguf_tensor

    from sglc_runtime.model.gguf import GGUFWeight
    from sglc_runtime.model.models.gguf_linear import GGUFQ5KLinear, GGUFQ5Linear

    assert load_cpu_ops() is None
    rows, k, n = 5, 512, 32
    q50 = GGUFQ5Linear(GGUFWeight("q50", "Q5_0", n, k, gguf_tensor("Q5_0", n, k, seed=6)), None)
    q51 = GGUFQ5Linear(GGUFWeight("q51", "Q5_1", n, k, gguf_tensor("Q5_1", n, k, seed=6)), None)
    q5k = GGUFQ5KLinear(GGUFWeight("q5k", "Q5_K", n, k, gguf_tensor("Q5_K", n, k, seed=7)), None)
    # NOTE: one set of levels and d for Q5_0 and Q5_1 (the driver runs them with m NULL, then m)
    levels, d, m = q51._args
    x = (torch.randn(rows, k, generator=torch.Generator().manual_seed(2)) * torch.linspace(0.3, 2, k)).to(dtype)
    bias = torch.randn(n).to(dtype)
    kl, kd, kdmin, ksc, kmn = q5k._args
    header = np.array([rows, k, n // 16, SLOT[dtype]], np.int64)
    out = Outputs(run_driver(arm_drivers[level], "q5_linear",
                             [header, raw(x), levels.numpy(), raw(d.view(torch.bfloat16)), raw(m.view(torch.bfloat16)),
                              kl.numpy(), raw(kd.view(torch.bfloat16)), raw(kdmin.view(torch.bfloat16)), ksc.numpy(),
                              kmn.numpy(), raw(bias)],
                             tmp_path))
    y0, y1, yk = out.take(dtype, rows, n), out.take(dtype, rows, n), out.take(dtype, rows, n)
    with running_level("generic"):
        ref0 = torch.ops.sglc_cpu.q5_linear(x, levels, d, None, bias)
        ref1 = torch.ops.sglc_cpu.q5_linear(x, levels, d, m, bias)
        refk = torch.ops.sglc_cpu.q5k_linear(x, *q5k._args, bias)
    assert q50._args[2] is None and q50._args[0].shape == levels.shape
    assert torch.equal(y0, ref0) and torch.equal(y1, ref1) and torch.equal(yk, refk)


@needs_arm_tools
@pytest.mark.parametrize("level", ARM_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads, kv_heads, head_dim, softcap",
                         [(9, 3, 64, 0.0), (8, 2, 64, 0.0), (4, 4, 64, 0.0), (6, 3, 32, 0.0), (8, 2, 64, 1.5),
                          (6, 3, 32, 1.5)])
def test_arm_attention_matches_sdpa(arm_drivers, tmp_path, level, dtype, heads, kv_heads, head_dim, softcap):
    g = torch.Generator().manual_seed(heads)
    num_slots, length = 400, 150
    q = torch.randn(heads, head_dim, generator=g).to(dtype)
    k = torch.randn(num_slots, kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_slots, kv_heads, head_dim, generator=g).to(dtype)
    slots = torch.randperm(num_slots, generator=g)[:length]
    header = np.array([heads, kv_heads, head_dim, length, num_slots, SLOT[dtype]], np.int64)
    out = Outputs(run_driver(arm_drivers[level], "attention",
                             [header, raw(q), raw(k), raw(v), slots.numpy(), np.array([0.125, softcap], np.float32)],
                             tmp_path))
    out.take(torch.float32, heads)
    out.take(torch.float32, heads)
    o = out.take(dtype, heads, head_dim)
    kk, vv = k[slots].float().transpose(0, 1), v[slots].float().transpose(0, 1)
    qq = q.float().view(kv_heads, heads // kv_heads, head_dim)
    if softcap:  # NOTE: scores capped at 1.5: the cap visibly changes the softmax
        ref = attend_explicit(qq[None], kk[None], vv[None], None, 0.125, softcap)[0]
    else:
        ref = F.scaled_dot_product_attention(qq, kk, vv, scale=0.125)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 1.6e-2}
    torch.testing.assert_close(o.float(), ref.reshape(heads, head_dim), **tol)


@needs_arm_tools
@pytest.mark.parametrize("level", ARM_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arm_small_ops_match_eager(arm_drivers, tmp_path, level, dtype):
    g = torch.Generator().manual_seed(3)
    rows, d, max_pos = 5, 192, 1024
    x = (torch.randn(rows, d, generator=g) * 3).to(dtype)
    delta = torch.randn(rows, d, generator=g).to(dtype)
    w = torch.randn(d, generator=g).to(dtype)
    gate_up = (torch.randn(rows, 2 * d, generator=g) * 4).to(dtype)
    positions = torch.tensor([0, 3, 17, 900, 1023])
    rope = RotaryEmbedding(64, 10000.0, None, max_pos)
    cos, sin = rope.tables(max_pos - 1)
    header = np.array([rows, d, max_pos, SLOT[dtype]], np.int64)
    out = Outputs(run_driver(arm_drivers[level], "small_ops",
                             [header, raw(x), raw(delta), raw(w), raw(gate_up), positions.numpy(),
                              cos[:max_pos].contiguous().numpy(), sin[:max_pos].contiguous().numpy()], tmp_path))
    norm, h_sum, h_norm = out.take(dtype, rows, d), out.take(dtype, rows, d), out.take(dtype, rows, d)
    roped, silu, gelu = out.take(dtype, rows, d), out.take(dtype, rows, d), out.take(dtype, rows, d)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 1.6e-2}
    torch.testing.assert_close(norm, EagerLayerOps.rms_norm(x, w, 1e-5), **tol)
    h_eager, x_eager = EagerLayerOps.add_rms_norm(x, delta, w, 1e-5)
    assert torch.equal(h_sum, h_eager)
    torch.testing.assert_close(h_norm, x_eager, **tol)
    eager_rope = EagerLayerOps.rope(x, EagerLayerOps.rope_inputs(rope, positions, dtype, max_pos - 1), d // 64, 64)
    torch.testing.assert_close(roped, eager_rope.reshape(rows, d), **tol)
    torch.testing.assert_close(silu, EagerLayerOps.silu_mul(gate_up), **tol)
    torch.testing.assert_close(gelu, EagerLayerOps.gelu_tanh_mul(gate_up.float()).to(dtype), **tol)


@pytest.mark.parametrize("level", ["avx512", "avx2", "generic"])
def test_x86_variants_compile_whatever_this_cpu_runs(tmp_path, level):
    """Every x86 level's sources compile here (an AVX2 machine checks the AVX512 kernels, and the
    reverse); the levels this CPU runs are also built and run by the other native tests."""
    if machine() != "x86_64":
        pytest.skip("an x86_64 compiler builds the x86 variants")
    if level in supported_levels():
        pytest.skip(f"{level} runs on this CPU: built and run by test_native_ops.py")
    build.compile_variant(level, tmp_path / f"{level}.o", compile_only=True)


@pytest.mark.skipif(machine() != "x86_64" or shutil.which(CROSS_CXX) is None,
                    reason=f"needs {CROSS_CXX} on an x86_64 host (apt-get install g++-aarch64-linux-gnu)")
def test_the_binding_compiles_for_aarch64(tmp_path):
    """The binding (cpu_ops.cpp and its headers) is compiled for the machine it runs on, so an
    x86-only construct in it (an AVX2 function clone, an intrinsic) would break every ARM install:
    compiled here with the cross compiler against torch's headers (an object file, not linked;
    -O0: target attributes are checked in code generation, which -fsyntax-only skips)."""
    from torch.utils.cpp_extension import include_paths

    cmd = [CROSS_CXX, "-std=c++17", "-c", "-w", *build.BINDING_CFLAGS, "-O0", *(f"-I{p}" for p in include_paths()),
           str(build.BINDING), "-o", str(tmp_path / "cpu_ops.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
