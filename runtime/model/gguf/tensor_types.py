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

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

#: types with a native integer kernel (weights stay quantized in memory), and the kernel's operator
NATIVE_KERNELS = {"Q4_0": "q4_linear", "Q4_1": "q4_linear", "Q4_K": "q4k_linear", "Q5_0": "q5_linear",
                  "Q5_1": "q5_linear", "Q5_K": "q5k_linear", "Q6_K": "q6k_linear", "Q8_0": "q8b_linear"}
NATIVE_TYPES = tuple(NATIVE_KERNELS)
#: types decoded into a float dtype at load
DEQUANTIZED_TYPES = ("F32", "F16", "BF16")
SUPPORTED_TYPES = NATIVE_TYPES + DEQUANTIZED_TYPES


class UnsupportedTensorType(ValueError):
    """A GGUF tensor of a type sglc does not read."""


def type_name(qtype: GGMLQuantizationType | int) -> str:
    return GGMLQuantizationType(qtype).name


def block_shape(name: str) -> tuple[int, int]:
    """(values per block, bytes per block) of a type."""
    return GGML_QUANT_SIZES[GGMLQuantizationType[name]]


def check_supported(name: str, tensor: str) -> None:
    """UnsupportedTensorType naming the tensor, its type and the types sglc reads."""
    if name not in SUPPORTED_TYPES:
        raise UnsupportedTensorType(
            f"tensor {tensor!r} is {name}, which sglc does not read; supported GGUF tensor types: "
            f"{', '.join(NATIVE_TYPES)} (native kernels), {', '.join(DEQUANTIZED_TYPES)} (dequantized at load)")
