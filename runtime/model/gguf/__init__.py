"""GGUF files read as shipped: the tensor types (``tensor_types.py``), their block formats decoded
exactly (``blocks.py``), and one tensor kept in its blocks (``weight.py``). The linears that run
them live in ``models/gguf_linear.py``. numpy and gguf-py's reader only; no torch here."""
from .blocks import dequantize
from .tensor_types import DEQUANTIZED_TYPES, NATIVE_TYPES, SUPPORTED_TYPES, UnsupportedTensorType, check_supported
from .weight import GGUFWeight

__all__ = ["DEQUANTIZED_TYPES", "GGUFWeight", "NATIVE_TYPES", "SUPPORTED_TYPES", "UnsupportedTensorType",
           "check_supported", "dequantize"]
