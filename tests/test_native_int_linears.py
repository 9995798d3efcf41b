"""The native integer linears (``q8_linear``, ``q4_linear``: runtime/model/native/kernels/) and
their tile layouts (``pack_q8_tiles``, ``pack_q4_tiles``), at every instruction-set level this
CPU runs (avx512, avx2, generic on an AVX512 machine: each test runs once per level).

The kernels round each activation to int8 per block of 32 (llama.cpp's Q8_0 / Q4_1 x Q8_1), so
they are held to that rounding's error bound, to exact products where the activations are
int8-representable, and to the documented layouts read back independently of the packers; bad
layouts are refused by name.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from sglc_runtime.model.models.quantized_linear import (Int4Linear, Int8Linear, int4_levels, pack_q4_tiles,
                                                        pack_q8_tiles)
from sglc_runtime.model.native import load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import supported_levels

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")


@pytest.fixture(params=supported_levels())
def level(request) -> str:
    """The kernels built, running at one level this CPU supports for the test's duration."""
    why = load_cpu_ops()
    assert why is None, f"the native kernels did not build on a machine with a compiler: {why}"
    with running_level(request.param):
        yield request.param


@pytest.mark.parametrize("rows, out", [(1, 200 * 16), (3, 200 * 16), (7, 200 * 16), (11, 200 * 16), (2, 1000)])
def test_int8_linear_error_stays_within_its_activation_quantization_bound(level, rows, out):
    """The kernel rounds each activation to int8 in blocks of 32: an output can move by at most
    sum over inputs of |w| * (block max / 254) from the exact product of the int8 weights, plus
    the bf16 rounding of the output. Rows past 8 take a second pass; an output count that is not
    a multiple of 16 pads the last tile (and is cut back)."""
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(out, 576, generator=g) * 0.05
    bias = torch.randn(out, generator=g).bfloat16()
    x = torch.randn(rows, 576, generator=g).bfloat16()
    lin, plain = Int8Linear.quantize(w, bias, native=True), Int8Linear.quantize(w, bias, native=False)
    assert lin.kernel == "native" and plain.kernel == "torch" and lin.weight is None  # one copy of the weights
    w_exact = plain.weight.float() * plain.scales.float()[:, None]
    exact = x.float() @ w_exact.t() + bias.float()
    block_max = x.float().abs().view(rows, -1, 32).amax(-1).repeat_interleave(32, 1)
    bound = (block_max / 254) @ w_exact.abs().t()
    y = lin(x).float()
    assert y.shape == (rows, out)
    slack = exact.abs() * 2 ** -7 + 1e-6  # NOTE: the bf16 rounding of the output and of the bias add
    assert bool(((y - exact).abs() <= bound + slack).all())
    assert float((y - exact).abs().max()) > 0  # the activations were really quantized


def int8_exact_rows(rows: int, k: int, seed: int) -> torch.Tensor:
    """float32 rows the kernels' activation quantization represents exactly: per block of 32,
    integers in -127..127 with 127 present, times a power of two."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.randint(-127, 128, (rows, k // 32, 32), generator=g)
    levels[..., 5] = 127
    scale = 2.0 ** torch.randint(-8, 2, (rows, k // 32, 1), generator=g)
    return (levels * scale).reshape(rows, k).float()


@pytest.mark.parametrize("rows", [1, 4, 9])
def test_linears_are_exact_where_the_activations_are(level, rows):
    """With activations int8 quantization represents exactly, both kernels compute the exact
    product of their weights (float32 in and out: to float accumulation error)."""
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(48, 192, generator=g) * 0.05
    w[:, 32:64] += 0.5  # NOTE: blocks with large offsets exercise Q4_1's m
    x = int8_exact_rows(rows, 192, rows)
    plain = Int8Linear.quantize(w, native=False)
    w8 = plain.weight.double() * plain.scales.double()[:, None]
    y8 = Int8Linear.quantize(w, native=True)(x).double()
    assert torch.allclose(y8, x.double() @ w8.t(), rtol=1e-5, atol=1e-5 * float(y8.abs().max()))
    q, scale, lo = int4_levels(w)
    w4 = (lo.half().double().repeat_interleave(32, 1) + scale.half().double().repeat_interleave(32, 1) * q)
    y4 = Int4Linear.quantize(w, native=True)(x).double()
    assert torch.allclose(y4, x.double() @ w4.t(), rtol=1e-5, atol=1e-5 * float(y4.abs().max()))


def test_q8_tiles_hold_each_channel_s_levels():
    q = torch.randint(-127, 128, (20, 64), dtype=torch.int8)
    tiles = pack_q8_tiles(q)
    assert tiles.shape == (2, 2, 8, 64) and tiles.dtype == torch.int8
    for c, b, i, j in [(0, 0, 0, 0), (5, 1, 3, 2), (17, 1, 7, 3), (19, 0, 4, 1)]:
        assert int(tiles[c // 16, b, i, 4 * (c % 16) + j]) == int(q[c, 32 * b + 4 * i + j])
    assert bool((tiles[1, :, :, 16:] == 0).all())  # channels 20..31 pad with zero weights


def test_int8_linear_refuses_bad_layouts_by_name(level):
    tiles, scales = pack_q8_tiles(torch.ones(32, 64, dtype=torch.int8)), torch.ones(32)
    x = torch.ones(1, 64).bfloat16()
    assert torch.ops.sglc_cpu.q8_linear(x, tiles, scales, None).shape == (1, 32)
    with pytest.raises(RuntimeError, match="q8 tiles"):
        torch.ops.sglc_cpu.q8_linear(x, torch.ones(32, 64, dtype=torch.int8), scales, None)
    with pytest.raises(RuntimeError, match="q8 tiles"):  # the uint8 (+128) layout of earlier versions
        torch.ops.sglc_cpu.q8_linear(x, tiles.view(torch.uint8), scales, None)
    with pytest.raises(RuntimeError, match="input has 96 features, the weight 64"):
        torch.ops.sglc_cpu.q8_linear(torch.ones(1, 96).bfloat16(), tiles, scales, None)
    with pytest.raises(RuntimeError, match="scales must be a contiguous float32"):
        torch.ops.sglc_cpu.q8_linear(x, tiles, torch.ones(31), None)


def unpack_q4_tiles(packed: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The float weight [out, in] that q4 tiles stand for, read back by the documented layout
    (written independently of pack_q4_tiles: channel c of tile t, block b, load i, byte 4c + j:
    input 4i + j in the low nibble, 16 + 4i + j in the high one)."""
    tiles, blocks = packed.shape[:2]
    w = torch.empty(tiles * 16, blocks * 32)
    for t in range(tiles):
        for b in range(blocks):
            for i in range(4):
                for c in range(16):
                    for j in range(4):
                        byte = int(packed[t, b, i, 4 * c + j])
                        for nib, col in ((byte & 15, 4 * i + j), (byte >> 4, 16 + 4 * i + j)):
                            w[16 * t + c, 32 * b + col] = float(d[t, b, c]) * nib + float(m[t, b, c])
    return w


def test_q4_tiles_hold_the_levels_and_float16_scales_of_each_block():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(32, 64, generator=g) * 0.05
    q, scale, lo = int4_levels(w)
    rebuilt = unpack_q4_tiles(*pack_q4_tiles(q, scale, lo))
    expected = lo.half().float().repeat_interleave(32, 1) + scale.half().float().repeat_interleave(32, 1) * q
    assert torch.equal(rebuilt, expected)


@pytest.mark.parametrize("rows, dtype", [(1, torch.bfloat16), (3, torch.bfloat16), (8, torch.bfloat16),
                                         (11, torch.bfloat16), (2, torch.float32), (5, torch.float16)])
def test_int4_linear_error_stays_within_its_activation_quantization_bound(level, rows, dtype):
    """q4_linear rounds each activation to int8 in blocks of 32 (llama.cpp's Q4_1 x Q8_1): an
    output can move by at most sum over inputs of |w| * (block max / 254) from the exact product
    of the 4-bit weights, plus the rounding of the output. Rows past 8 take a second pass."""
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(10 * 16, 576, generator=g) * 0.05
    w[:, 64:96] += torch.linspace(-1, 1, 160)[:, None]  # NOTE: blocks with large offsets exercise m
    bias = torch.randn(10 * 16, generator=g).to(dtype)
    x = (torch.randn(rows, 576, generator=g) * torch.linspace(0.1, 3, 576)).to(dtype)
    lin = Int4Linear.quantize(w, bias, native=True)
    assert lin.kernel == "native" and Int4Linear.quantize(w, native=False).kernel == "torch"
    q, scale, lo = int4_levels(w)
    w_exact = unpack_q4_tiles(*pack_q4_tiles(q, scale, lo)) if rows == 1 else (
        lo.half().float().repeat_interleave(32, 1) + scale.half().float().repeat_interleave(32, 1) * q)
    exact = x.float() @ w_exact.t() + bias.float()
    block_max = x.float().abs().view(rows, -1, 32).amax(-1).repeat_interleave(32, 1)
    bound = (block_max / 254) @ w_exact.abs().t()
    y = lin(x)
    assert y.dtype == dtype and y.shape == (rows, 160)
    slack = exact.abs() * (2 ** -8 if dtype == torch.bfloat16 else 2 ** -10) + 1e-4
    assert bool(((y.float() - exact).abs() <= bound + slack).all())
    assert float((y.float() - exact).abs().max()) > 0  # the activations were really quantized


def test_int4_linear_refuses_bad_layouts_by_name(level):
    packed, d, m = pack_q4_tiles(*int4_levels(torch.randn(32, 64)))
    x = torch.ones(1, 64).bfloat16()
    assert torch.ops.sglc_cpu.q4_linear(torch.ones(0, 64).bfloat16(), packed, d, m, None).shape == (0, 32)
    with pytest.raises(RuntimeError, match="q4 tiles"):
        torch.ops.sglc_cpu.q4_linear(x, packed.view(2, 2, 256), d, m, None)
    with pytest.raises(RuntimeError, match="input has 96 features, the weight 64"):
        torch.ops.sglc_cpu.q4_linear(torch.ones(1, 96).bfloat16(), packed, d, m, None)
    with pytest.raises(RuntimeError, match="block scales and mins must be contiguous float16"):
        torch.ops.sglc_cpu.q4_linear(x, packed, d.float(), m, None)
    with pytest.raises(RuntimeError, match="bias must be"):
        torch.ops.sglc_cpu.q4_linear(x, packed, d, m, torch.ones(31).bfloat16())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_level_computes_the_reference_bit_for_bit(dtype):
    """The integer sums are exact and every variant scales per block in the same order with
    fused multiply-adds, so each level this CPU runs equals the portable reference (the generic
    level) exactly, for both linears, at row counts that take one and several passes."""
    assert load_cpu_ops() is None
    g = torch.Generator().manual_seed(11)
    w = torch.randn(5 * 16, 256, generator=g) * 0.05
    w[:, 32:64] += 0.3
    bias = torch.randn(5 * 16, generator=g).to(dtype)
    x = (torch.randn(13, 256, generator=g) * torch.linspace(0.2, 2, 256)).to(dtype)
    q4 = pack_q4_tiles(*int4_levels(w))
    w8, scales = Int8Linear.quantize(w, native=False).weight, Int8Linear.quantize(w, native=False).scales.float()
    q8 = pack_q8_tiles(w8)
    outputs = {}
    for level in supported_levels():
        with running_level(level):
            outputs[level] = (torch.ops.sglc_cpu.q4_linear(x, *q4, bias), torch.ops.sglc_cpu.q8_linear(x, q8, scales, bias))
    for level, (y4, y8) in outputs.items():
        assert torch.equal(y4, outputs["generic"][0]), level
        assert torch.equal(y8, outputs["generic"][1]), level


@pytest.mark.parametrize("rows", [68, 130])
def test_a_call_of_many_rows_equals_its_rows_one_at_a_time(level, rows):
    """A prefill call is split into row blocks of nearly equal size for the thread pool (68 rows:
    34 + 34, not 64 + 4); each row's result is the one it gets alone, whatever its block."""
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(3 * 16, 256, generator=g) * 0.05
    q4 = pack_q4_tiles(*int4_levels(w))
    x = torch.randn(rows, 256, generator=g)
    whole = torch.ops.sglc_cpu.q4_linear(x, *q4, None)
    alone = torch.cat([torch.ops.sglc_cpu.q4_linear(x[r:r + 1], *q4, None) for r in range(rows)])
    assert torch.equal(whole, alone)
