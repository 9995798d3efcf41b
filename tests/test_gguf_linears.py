"""Linears over GGUF tensors as shipped (runtime/model/models/gguf_linear.py), at every CPU level
this machine runs: Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K and Q8_0 on their native kernels compute the product of the
file's own dequantized weights to within the int8 activation rounding (exactly where the
activations are int8-representable), every level equal to the portable reference bit for bit;
the float types run dequantized; embeddings decode only the looked-up rows."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gguf_blocks import gguf_tensor
from sglc_runtime.model.gguf import GGUFWeight
from sglc_runtime.model.models.gguf_linear import GGUFEmbedding, gguf_linear
from sglc_runtime.model.models.linear import Linear
from sglc_runtime.model.native import load_cpu_ops, running_level
from sglc_runtime.model.native.capabilities import supported_levels

NATIVE = ("Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0")


@pytest.fixture(scope="module", autouse=True)
def kernels():
    why = load_cpu_ops()
    assert why is None, f"the native kernels did not build: {why}"


def weight(name: str, rows: int, cols: int, seed: int = 0) -> GGUFWeight:
    return GGUFWeight(f"test.{name}", name, rows, cols, gguf_tensor(name, rows, cols, seed))


def int8_exact_rows(rows: int, k: int, seed: int) -> torch.Tensor:
    """float32 rows the activation quantization represents exactly (per block of 32: integers
    in -127..127 with 127 present, times a power of two)."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.randint(-127, 128, (rows, k // 32, 32), generator=g)
    levels[..., 3] = 127
    return (levels * 2.0 ** torch.randint(-6, 2, (rows, k // 32, 1), generator=g)).reshape(rows, k).float()


@pytest.mark.parametrize("level", supported_levels())
@pytest.mark.parametrize("name", NATIVE)
def test_native_gguf_linears_compute_the_file_s_own_weights(level, name):
    rows, k = 40, 512  # NOTE: 40 output channels: the last tile of 16 is padded
    w = weight(name, rows, k, seed=7)
    exact_w = torch.from_numpy(w.dequantize()).double()
    bias = torch.randn(rows).float()
    with running_level(level):
        if name in ("Q4_0", "Q4_1"):
            w = weight(name, 48, k, seed=7)  # NOTE: the int4 linear's tiles take whole tiles only
            exact_w = torch.from_numpy(w.dequantize()).double()
            bias = torch.randn(48).float()
        lin = gguf_linear(w, bias, torch.float32, pack=False, native=True)
        assert lin.kernel == "native"
        x = int8_exact_rows(9, k, seed=3)  # 9 rows: several passes at every level
        y = lin(x).double()
        ref = x.double() @ exact_w.t() + bias.double()
        assert torch.allclose(y, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max())), float((y - ref).abs().max())
        xr = torch.randn(3, k).bfloat16()
        yr = lin(xr).float()
        block_max = xr.float().abs().view(3, -1, 32).amax(-1).repeat_interleave(32, 1).double()
        bound = (block_max / 254) @ exact_w.abs().t()
        ref_r = xr.double() @ exact_w.t() + bias.double()
        assert bool(((yr.double() - ref_r).abs() <= bound + ref_r.abs() * 2 ** -7 + 1e-3).all())


@pytest.mark.parametrize("name", NATIVE)
def test_every_level_equals_the_reference_bit_for_bit(name):
    rows, k = 48, 512
    w = weight(name, rows, k, seed=11)
    x = (torch.randn(6, k) * torch.linspace(0.2, 2, k)).bfloat16()
    outs = {}
    for level in supported_levels():
        with running_level(level):
            outs[level] = gguf_linear(w, None, torch.bfloat16, pack=False, native=True)(x)
    for level, y in outs.items():
        assert torch.equal(y, outs["generic"]), level


@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_float16_types_keep_their_values_on_half_tiles_or_run_dequantized(name):
    """With the native kernels at a SIMD level, F16 / BF16 stay 2 bytes a weight on half tiles
    (multiplied in float32); told not to use the kernels, they are decoded into a float linear."""
    from sglc_runtime.model.models.half_linear import HalfTiledLinear
    from sglc_runtime.model.models.tiled_linear import native_tile_kernels

    w = weight(name, 40, 256, seed=5)
    x = torch.randn(3, 256)
    want = x.double() @ torch.from_numpy(w.dequantize()).double().t()
    lin = gguf_linear(w, None, torch.float32, pack=False)
    if native_tile_kernels():
        assert isinstance(lin, HalfTiledLinear) and lin.tiled()[1][0].dtype == {"F16": torch.float16,
                                                                                "BF16": torch.bfloat16}[name]
    torch.testing.assert_close(lin(x).double(), want, atol=1e-5, rtol=1e-5)
    plain = gguf_linear(w, None, torch.float32, pack=False, native=False)
    assert isinstance(plain, Linear)
    torch.testing.assert_close(plain(x).double(), want, atol=1e-5, rtol=1e-5)


def test_native_types_dequantize_where_told_not_to_use_the_kernels():
    w = weight("Q4_K", 32, 256, seed=6)
    assert isinstance(gguf_linear(w, None, torch.float32, pack=False, native=False), Linear)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q6_K"])
def test_embedding_rows_are_decoded_from_the_blocks(name):
    w = weight(name, 100, 256, seed=9)
    embed = GGUFEmbedding(w, torch.bfloat16)
    ids = torch.tensor([5, 0, 99, 5])
    assert torch.equal(embed(ids), torch.from_numpy(w.dequantize()[ids.numpy()]).bfloat16())
    with pytest.raises(IndexError, match="outside the vocabulary of 100"):
        embed(torch.tensor([100]))


@pytest.mark.parametrize("level", supported_levels())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 70])
def test_stacked_parts_in_one_call_equal_each_part_s_own_op(level, dtype, rows):
    """A fused q/k/v of different GGUF types (Q4_K_M's Q6_K v beside Q4_K q and k; Q5_0 and Q8_0
    parts) runs as one stacked_linear call whose columns are each part's own op's, bit for bit,
    biases included; a part the call cannot take (a padded last tile) sends it to the parts."""
    from sglc_runtime.model.models.weight_loader import StackedLinear

    k = 256
    x = (torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 2).to(dtype)
    with running_level(level):
        for kinds in (("Q4_K", "Q4_K", "Q6_K"), ("Q5_0", "Q8_0", "Q5_K")):
            parts = [gguf_linear(weight(kind, n, k, seed=i), None, dtype, pack=False, native=True)
                     for i, (kind, n) in enumerate(zip(kinds, (64, 32, 32)))]
            parts[1].bias = torch.randn(32).to(dtype)
            stacked = StackedLinear(parts)
            assert stacked._kinds is not None
            want = torch.cat([p(x) for p in parts], dim=1)
            got = stacked(x)
            assert got.dtype == dtype and torch.equal(got, want), kinds
        padded = StackedLinear([gguf_linear(weight("Q4_K", 40, k), None, dtype, pack=False, native=True),
                                gguf_linear(weight("Q6_K", 32, k, seed=1), None, dtype, pack=False, native=True)])
        assert padded._kinds is None and padded(x).shape == (rows, 72)
    with pytest.raises(RuntimeError, match="part 1 takes 512 inputs, part 0 256"):
        torch.ops.sglc_cpu.stacked_linear(x, ["q4k", "q6k"], [*parts_tensors("Q4_K", 256), *parts_tensors("Q6_K", 512)])


def parts_tensors(kind: str, k: int) -> tuple[torch.Tensor, ...]:
    return gguf_linear(weight(kind, 16, k), None, torch.float32, pack=False, native=True).tiled()[1]
