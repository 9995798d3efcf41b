"""GGUF files read as shipped: the tensor types (``tensor_types.py``), their block formats decoded
exactly (``blocks.py``), one tensor kept in its blocks (``weight.py``), and a whole model file
(``file.py``: metadata as a Hugging Face config, tensors under Hugging Face names, per architecture
as ``architectures.py`` says). The linears that run them live in ``models/gguf_linear.py``. numpy
and gguf-py's type tables; torch only for the 1-D tensors ``file.py`` hands over decoded."""
from .architectures import SUPPORTED_GGUF_ARCHITECTURES, GGUFModelError
from .blocks import dequantize
from .file import GGUFFile
from .tensor_types import DEQUANTIZED_TYPES, NATIVE_TYPES, SUPPORTED_TYPES, UnsupportedTensorType, check_supported
from .weight import GGUFWeight

__all__ = ["DEQUANTIZED_TYPES", "SUPPORTED_GGUF_ARCHITECTURES", "GGUFFile", "GGUFModelError", "GGUFWeight",
           "NATIVE_TYPES", "SUPPORTED_TYPES", "UnsupportedTensorType", "check_supported", "dequantize"]
