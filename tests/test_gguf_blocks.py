"""GGUF block formats decoded by sglc (runtime/model/gguf/blocks.py): bit-equal to gguf-py's own
dequantize for every type we read, the decoders' levels and scales consistent with it, and
everything else refused by name."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from gguf_blocks import gguf_tensor
from sglc_runtime.model.gguf import SUPPORTED_TYPES, GGUFWeight, UnsupportedTensorType, check_supported, dequantize
from sglc_runtime.model.gguf.blocks import decode_q4_0, decode_q4_1, decode_q4_k, decode_q6_k, decode_q8_0


@pytest.mark.parametrize("name", SUPPORTED_TYPES)
def test_dequantize_equals_gguf_py_bit_for_bit(name):
    rows, cols = 6, 512
    raw = gguf_tensor(name, rows, cols, seed=len(name))
    ours = dequantize(name, raw, rows, cols)
    theirs = np.asarray(quants.dequantize(raw, GGMLQuantizationType[name]), dtype=np.float32).reshape(rows, cols)
    assert ours.dtype == np.float32 and ours.shape == (rows, cols)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_decoded_levels_and_scales_give_the_same_weights():
    """What the kernels are given (levels, float16 scale bits, 6-bit sub-block scales) rebuilds
    the dequantized weights exactly, in the kernels' own formulas."""
    rows, cols = 4, 512
    f16 = lambda bits: bits.view(np.float16).astype(np.float32)  # noqa: E731
    for name, decode in (("Q4_0", decode_q4_0), ("Q4_1", decode_q4_1)):
        raw = gguf_tensor(name, rows, cols, seed=1)
        blk = decode(raw, rows, cols)
        w = f16(blk.d).repeat(32, 1) * blk.levels.astype(np.float32) + f16(blk.m).repeat(32, 1)
        assert np.array_equal(w, dequantize(name, raw, rows, cols)), name
    raw = gguf_tensor("Q8_0", rows, cols, seed=2)
    blk = decode_q8_0(raw, rows, cols)
    assert np.array_equal(blk.levels.astype(np.float32) * f16(blk.d).repeat(32, 1), dequantize("Q8_0", raw, rows, cols))
    raw = gguf_tensor("Q4_K", rows, cols, seed=3)
    blk = decode_q4_k(raw, rows, cols)
    scale = (f16(blk.d).repeat(8, 1) * blk.sc.astype(np.float32)).repeat(32, 1)
    offset = (f16(blk.dmin).repeat(8, 1) * blk.mn.astype(np.float32)).repeat(32, 1)
    assert np.array_equal(scale * blk.levels.astype(np.float32) - offset, dequantize("Q4_K", raw, rows, cols))
    assert blk.sc.max() <= 63 and blk.mn.max() <= 63 and blk.levels.max() <= 15
    raw = gguf_tensor("Q6_K", rows, cols, seed=5)
    blk6 = decode_q6_k(raw, rows, cols)
    scale = (f16(blk6.d).repeat(16, 1) * blk6.sc.astype(np.float32)).repeat(16, 1)
    assert np.array_equal(scale * (blk6.levels.astype(np.float32) - 32), dequantize("Q6_K", raw, rows, cols))
    assert blk6.levels.max() <= 63


def test_weights_move_whole_rows_and_stack_only_alike_tensors():
    raw = gguf_tensor("Q4_K", 8, 256, seed=4)
    w = GGUFWeight("t", "Q4_K", 8, 256, raw)
    order = np.array([3, 1, 2, 0, 7, 6, 5, 4])
    assert np.array_equal(w.reorder_rows(order).dequantize(), w.dequantize()[order])
    both = w.concat_rows(w)
    assert both.rows == 16 and np.array_equal(both.dequantize()[8:], w.dequantize())
    with pytest.raises(ValueError, match="cannot stack"):
        w.concat_rows(GGUFWeight("u", "Q8_0", 8, 256, gguf_tensor("Q8_0", 8, 256)))
    with pytest.raises(ValueError, match="bytes for a Q4_K"):
        GGUFWeight("v", "Q4_K", 8, 256, raw[:, :10])


@pytest.mark.parametrize("name", ["Q2_K", "Q3_K", "IQ4_XS", "IQ2_XXS", "TQ1_0"])
def test_types_we_do_not_read_are_refused_by_name_with_the_list(name):
    with pytest.raises(UnsupportedTensorType, match=f"is {name}.*Q4_K.*Q6_K"):
        check_supported(name, "blk.0.ffn_down.weight")


def test_a_model_file_maps_to_transformers_hugging_face_tensors():
    """The default model's GGUF read in place (GGUFFile) gives the Hugging Face names, shapes and
    q/k row order transformers' own GGUF loader gives (gguf-py's dequantize, then its
    LlamaTensorProcessor), every tensor equal once decoded."""
    import torch
    from gguf import GGUFReader
    from gguf import dequantize as gguf_dequantize
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS

    from sglc_runtime.model.default_model import find_default_gguf
    from sglc_runtime.model.gguf import GGUFFile
    from sglc_runtime.model.gguf.architectures import GLOBAL_TENSORS, LAYER_TENSORS

    f = GGUFFile(find_default_gguf())
    config = f.config_dict()
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["num_key_value_heads"], config["vocab_size"], config["tie_word_embeddings"]) == (576, 30, 9, 3, 49152, True)
    ours = f.state_dict(config)
    processor = TENSOR_PROCESSORS["llama"](config={k: config[k] for k in ("num_attention_heads", "num_key_value_heads")})
    reader = GGUFReader(str(find_default_gguf()))
    assert len(reader.tensors) == len(ours)
    for t in reader.tensors:
        if t.name in GLOBAL_TENSORS:
            name = GLOBAL_TENSORS[t.name]
        else:
            _, layer, suffix = t.name.split(".", 2)
            name = f"model.layers.{layer}.{LAYER_TENSORS[suffix]}"
        want = processor.process(weights=gguf_dequantize(t.data, t.tensor_type), name=t.name).weights
        value = ours[name]
        got = value if isinstance(value, torch.Tensor) else torch.from_numpy(value.dequantize())
        assert torch.equal(got, torch.from_numpy(np.array(want, dtype=np.float32))), name
    assert f.tensor_types() == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
    assert isinstance(ours["model.layers.0.self_attn.q_proj.weight"], GGUFWeight)


def test_nibble_pairs_pack_the_same_q4_tiles_as_the_levels():
    """Decoded as nibble pairs (the file's bytes for Q4_0 / Q4_1, four byte operations for Q4_K),
    the 4-bit types give exactly the q4 tiles that packing their unpacked levels gives, and the
    same scales."""
    import torch

    from sglc_runtime.model.models.gguf_tiles import q4_tiles_of_pairs
    from sglc_runtime.model.models.quantized_linear import pack_q4_levels

    rows, cols = 48, 768
    for seed, (name, decode) in enumerate((("Q4_0", decode_q4_0), ("Q4_1", decode_q4_1), ("Q4_K", decode_q4_k))):
        raw = gguf_tensor(name, rows, cols, seed=10 + seed)
        levels, pairs = decode(raw, rows, cols), decode(raw, rows, cols, pairs=True)
        assert levels.pairs is None and pairs.levels is None and pairs.pairs.shape == (rows, cols // 32, 16)
        want = pack_q4_levels(torch.from_numpy(levels.levels))
        assert torch.equal(q4_tiles_of_pairs(pairs.pairs), want), name
        for field in ("d", "m", "dmin", "sc", "mn"):
            if hasattr(levels, field):
                assert np.array_equal(getattr(levels, field), getattr(pairs, field)), (name, field)
