"""The GGUF tensor types sglc reads, and how each one runs.

A GGUF tensor is stored as rows of fixed-size blocks (llama.cpp's ggml types). Three groups:

- **native**: kept quantized at the file's bits a weight, in the native kernels' tile layout
  (``models/gguf_linear.py``), run by an integer kernel at every CPU level: Q4_0 and Q4_1
  (``q4_linear``), Q4_K (``q4k_linear``), Q5_0 and Q5_1 (``q5_linear``), Q5_K (``q5k_linear``),
  Q6_K (``q6k_linear``), Q8_0 (``q8b_linear``);
- **half**: F16 and BF16 linears keep their 2-byte values on half tiles (``models/half_linear.py``,
  multiplied in float32) where the native kernels run at a SIMD level;
- **dequantized**: F32 (and F16, BF16 elsewhere), decoded by ``blocks.py`` into the model's compute
  dtype at load (float32 where the CPU has no native bf16), with one log line naming the tensors;
- anything else (Q2_K, Q3_K, the IQ and TQ types, MXFP4, ...) is refused by name, listing these.
"""
from __future__ import annotations

#: ggml's type ids -> (name, values per block, bytes per block), as llama.cpp's ggml.h numbers them
#: (gguf-py's GGMLQuantizationType and GGML_QUANT_SIZES: equal, tested; written out so that reading
#: a file does not import gguf-py, ~45 ms of every native start)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}
_BY_NAME = {name: (per, nbytes) for name, per, nbytes in GGML_TYPES.values()}

#: types with a native integer kernel (weights stay quantized in memory), and the kernel's operator
NATIVE_KERNELS = {"Q4_0": "q4_linear", "Q4_1": "q4_linear", "Q4_K": "q4k_linear", "Q5_0": "q5_linear",
                  "Q5_1": "q5_linear", "Q5_K": "q5k_linear", "Q6_K": "q6k_linear", "Q8_0": "q8b_linear"}
NATIVE_TYPES = tuple(NATIVE_KERNELS)
#: types decoded into a float dtype at load
DEQUANTIZED_TYPES = ("F32", "F16", "BF16")
SUPPORTED_TYPES = NATIVE_TYPES + DEQUANTIZED_TYPES


class UnsupportedTensorType(ValueError):
    """A GGUF tensor of a type sglc does not read."""


def type_name(qtype: int) -> str:
    """A ggml type id's name; ValueError for an id this table does not know."""
    try:
        return GGML_TYPES[int(qtype)][0]
    except KeyError:
        raise ValueError(f"{qtype} is not a ggml type id sglc knows") from None


def block_shape(name: str) -> tuple[int, int]:
    """(values per block, bytes per block) of a type."""
    return _BY_NAME[name]


def check_supported(name: str, tensor: str) -> None:
    """UnsupportedTensorType naming the tensor, its type and the types sglc reads."""
    if name not in SUPPORTED_TYPES:
        raise UnsupportedTensorType(
            f"tensor {tensor!r} is {name}, which sglc does not read; supported GGUF tensor types: "
            f"{', '.join(NATIVE_TYPES)} (native kernels), {', '.join(DEQUANTIZED_TYPES)} (dequantized at load)")
