"""Weight-only quantized linears: levels, kernels against a float reference, clear errors, and the
model option that uses them (greedy agreement with the float model on a fixed prompt set)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sglc_runtime.model.models.linear import Linear
from sglc_runtime.model.models.quantized_linear import (
    INT4_GROUP, LARGE_BATCH_ROWS, NATIVE_INT4_LARGE_BATCH_ROWS, NATIVE_HEAD_LARGE_BATCH_ROWS, CastLinear, Int4Linear,
    Int8Linear, QuantizationError, RowDispatchLinear, int4_levels, large_batch_dtype, large_batch_rows, quantized_linear)


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    y = x.float() @ w.float().t()
    return y if b is None else y + b.float()


def test_int4_levels_reconstruct_a_q4_1_block_exactly():
    """A block written the way llama.cpp's Q4_1 quantizer writes it (min and max at levels 0 and
    15) comes back with the same levels, scale and min."""
    g = torch.Generator().manual_seed(0)
    lo = torch.randn(16, 4, 1, generator=g) * 0.1
    d = torch.rand(16, 4, 1, generator=g) * 0.01 + 1e-3
    q = torch.randint(0, 16, (16, 4, INT4_GROUP), generator=g)
    q[..., 0], q[..., 1] = 0, 15  # NOTE: Q4_1 maps each block's min and max to 0 and 15
    w = (lo + d * q).reshape(16, 4 * INT4_GROUP)
    levels, scale, low = int4_levels(w)
    assert torch.equal(levels, q.reshape(16, -1).to(torch.int32))
    assert torch.allclose(scale, d.squeeze(-1), rtol=1e-5) and torch.allclose(low, lo.squeeze(-1))


def test_int4_levels_of_the_shipped_q4_1_tensors_are_integral():
    """The default model's dequantized Q4_1 weights sit exactly on Q4_1 levels again."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from sglc_runtime.model.default_model import find_default_gguf

    reader = GGUFReader(str(find_default_gguf()))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert tensor.tensor_type.name == "Q4_1"
    shape = [int(n) for n in reversed(tensor.shape)]
    w = torch.from_numpy(np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape))
    levels, scale, lo = int4_levels(w)
    rebuilt = lo.repeat_interleave(INT4_GROUP, 1) + scale.repeat_interleave(INT4_GROUP, 1) * levels
    assert torch.allclose(rebuilt, w, atol=1e-6)


def dequantized(kind: str, w: torch.Tensor) -> torch.Tensor:
    """The float weight a quantized linear stands for, computed without its kernel."""
    if kind == "int4":
        q, scale, lo = int4_levels(w)
        return lo.repeat_interleave(INT4_GROUP, 1) + scale.repeat_interleave(INT4_GROUP, 1) * q
    scale = w.abs().amax(1, keepdim=True) / 127
    return torch.round(w / scale).clamp(-127, 127) * scale


@pytest.mark.parametrize("kind, cls", [("int4", Int4Linear), ("int8", Int8Linear)])
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_quantized_kernel_computes_the_product_of_its_dequantized_weight(kind, cls, rows):
    """The packed kernel (any row count) equals x @ dequantized(W).T + b up to bf16 rounding, and
    the quantization error itself is what 4 or 8 bits give."""
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(96, 128, generator=g) * 0.05
    b = torch.randn(96, generator=g) * 0.1
    x = torch.randn(rows, 128, generator=g).bfloat16()
    lin = quantized_linear(kind, w, b)
    assert isinstance(lin, cls)
    y = lin(x)
    assert y.shape == (rows, 96) and y.dtype == torch.bfloat16
    exact = reference(x, dequantized(kind, w), b)
    assert float((y.float() - exact).abs().max() / exact.abs().max()) < 0.02  # bf16 scales and output
    error = float((exact - reference(x, w, b)).abs().max() / exact.abs().max())
    assert error < (0.25 if kind == "int4" else 0.02)  # NOTE: 16 levels per group of Gaussian weights


@pytest.mark.parametrize("native", [True, False])
def test_row_dispatch_uses_the_integer_kernel_for_small_batches_only(native):
    """The switch to the bf16 copy comes at the row count measured for the kernel that runs."""
    from sglc_runtime.model.models.linear import Linear

    w = torch.randn(64, 96) * 0.05
    small, large = Int4Linear.quantize(w, native=native), Linear.build(w.bfloat16())
    both = RowDispatchLinear(small, large)
    threshold = NATIVE_INT4_LARGE_BATCH_ROWS if small.kernel == "native" else LARGE_BATCH_ROWS
    assert both.min_rows == threshold == large_batch_rows(small)
    for rows in (1, threshold - 1, threshold, 3 * threshold):
        x = torch.randn(rows, 96).bfloat16()
        expected = (small if rows < threshold else large)(x)
        assert torch.equal(both(x), expected), rows
    int8 = Int8Linear.quantize(w, native=native)
    assert large_batch_rows(int8) == LARGE_BATCH_ROWS
    assert large_batch_rows(int8, head=True) == (NATIVE_HEAD_LARGE_BATCH_ROWS if int8.kernel == "native" else LARGE_BATCH_ROWS)


@pytest.mark.parametrize("native", [True, False])
def test_many_rows_go_to_a_float_copy_only_where_it_is_faster(native):
    """With native bf16 matmuls prefill runs on a bf16 copy; without them (AVX2 CPUs) the native
    integer kernel runs every row count and no copy is kept, and torch's integer kernel hands
    many rows to an fp32 copy (never to a bf16 GEMM the CPU cannot do natively)."""
    w = torch.randn(64, 96) * 0.05
    small = Int4Linear.quantize(w, native=native)
    assert large_batch_dtype(small, bf16_native=True) == torch.bfloat16
    assert large_batch_dtype(small, bf16_native=False) == (None if native else torch.float32)
    cast = CastLinear(Linear.build(w))
    x = torch.randn(3, 96).bfloat16()
    assert cast(x).dtype == torch.bfloat16
    assert torch.equal(cast(x), (x.float() @ w.t()).bfloat16())


def test_bad_shapes_and_kinds_are_named():
    with pytest.raises(QuantizationError, match="multiple of 32"):
        Int4Linear.quantize(torch.randn(16, 40))
    with pytest.raises(QuantizationError, match="out_features of 16"):
        Int4Linear.quantize(torch.randn(8, 64))
    with pytest.raises(QuantizationError, match="2-D"):
        Int8Linear.quantize(torch.randn(4, 4, 4))
    with pytest.raises(QuantizationError, match="unknown weight quantization 'int3'"):
        quantized_linear("int3", torch.randn(8, 32))


def test_an_all_zero_group_quantizes_to_zero():
    """A group of zeros (scale 0) gives no NaN and contributes nothing."""
    w = torch.zeros(16, 64)
    w[0, 40] = 1.0
    y = Int4Linear.quantize(w)(torch.ones(1, 64, dtype=torch.bfloat16)).float()
    assert torch.isfinite(y).all()
    assert torch.allclose(y, reference(torch.ones(1, 64), w), atol=0.05)


def test_model_rejects_a_float32_dtype_with_quantization():
    from sglc_runtime.engine.engine_config import EngineConfig
    from sglc_runtime.model.model_config import ModelConfig
    from sglc_runtime.model.models.llama import LlamaForCausalLM

    config = ModelConfig.from_dict({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                                    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
                                    "vocab_size": 64})
    with pytest.raises(QuantizationError, match="computes in bfloat16"):
        LlamaForCausalLM(config, dtype="float32", quantization="int4")
    with pytest.raises(QuantizationError, match="unknown weight quantization"):
        LlamaForCausalLM(config, quantization="q4")
    assert LlamaForCausalLM(config, quantization="int8").dtype == torch.bfloat16
    assert EngineConfig(quantization="int4").dtype == "bfloat16"
    assert EngineConfig().dtype == "float32"
    with pytest.raises(ValueError, match="EngineConfig.quantization"):
        EngineConfig(quantization="fp8")
    with pytest.raises(ValueError, match="computes in bfloat16"):
        EngineConfig(quantization="int8", dtype="float32")


@pytest.mark.model
def test_int4_model_agrees_with_the_dequantized_float_model():
    """Teacher-forced over a fixed prompt set (the float model's own greedy continuation): the
    int4 model's top-1 token agrees at >= 90% of positions (measured: see bench/bench_quantization.py)."""
    from bench.bench_quantization import PROMPTS, agreement, float_continuations
    from sglc_runtime.model.default_model import find_default_gguf, resolve_model_path
    from sglc_runtime.model.models import load_model

    path, gguf = resolve_model_path(None), find_default_gguf()
    ref = load_model(path, dtype="float32", gguf=gguf)
    sequences = float_continuations(ref, PROMPTS[:4], new_tokens=16)
    stats = agreement(ref, load_model(path, quantization="int4", gguf=gguf, decode_gguf=True), sequences)
    assert stats["top1_agreement"] >= 0.9, stats


def test_float_logits_feed_a_native_head_float32_and_others_their_dtype():
    """The lm_head's logits come out float32 either way; a native head is given the float32 rows
    (it quantizes them itself), so no bf16 round trip of the vocabulary-wide output."""
    from sglc_runtime.model.models.linear import Linear
    from sglc_runtime.model.models.decoder import _float_logits

    w = torch.randn(64, 96) * 0.05
    small = Int8Linear.quantize(w)
    head = RowDispatchLinear(small, Linear.build(w.bfloat16()))
    for rows in (1, head.min_rows):
        h = torch.randn(rows, 96).bfloat16()
        logits = _float_logits(head, h)
        assert logits.dtype == torch.float32 and logits.shape == (rows, 64)
        if rows < head.min_rows and small.kernel == "native":
            assert torch.equal(logits, small(h.float()))
        else:
            assert torch.equal(logits, head(h).float())


@pytest.mark.model
def test_the_lm_head_keeps_its_int8_kernel_up_to_more_rows_than_int8_layers():
    """The model's lm_head (the default GGUF's Q8_0 head) switches to its float copy at the head's
    own row count; layer linears keep theirs."""
    from sglc_runtime.model.default_model import find_default_gguf, resolve_model_path
    from sglc_runtime.model.models import load_model

    model = load_model(resolve_model_path(None), quantization="int4", gguf=find_default_gguf())
    head = model.lm_head
    if not isinstance(head, RowDispatchLinear):
        pytest.skip("no float copy on this CPU (bf16 not native): the integer kernel serves every row count")
    want = NATIVE_HEAD_LARGE_BATCH_ROWS if head.small.kernel == "native" else LARGE_BATCH_ROWS
    assert head.min_rows == want
    qkv = model.layers[0].attn.qkv
    assert not isinstance(qkv, RowDispatchLinear) or qkv.min_rows != want
