"""Model implementations, picked by the Hugging Face architecture name in config.json.

One module per family over the shared decoder (``decoder.py``): ``llama.py`` (Llama, Mistral,
Qwen2, Qwen3), ``gemma.py`` (Gemma 2 and 3), ``phi3.py``, ``mixture.py`` (OLMoE, Qwen3-MoE,
Mixtral, with the expert block of ``moe.py``). What differs within a family is set by
``ModelConfig.from_dict`` from the architecture name; see docs/models.md.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..attention import AttentionBackend
from ..freed_memory import return_freed_memory
from ..model_config import ModelConfig
from .decoder import DecoderForCausalLM
from .gemma import GemmaForCausalLM
from .llama import LlamaForCausalLM
from .mixture import MoeForCausalLM
from .phi3 import Phi3ForCausalLM

MODEL_REGISTRY: dict[str, type[DecoderForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "Gemma2ForCausalLM": GemmaForCausalLM,
    "Gemma3ForCausalLM": GemmaForCausalLM,
    "Phi3ForCausalLM": Phi3ForCausalLM,
    "OlmoeForCausalLM": MoeForCausalLM,
    "Qwen3MoeForCausalLM": MoeForCausalLM,
    "MixtralForCausalLM": MoeForCausalLM,
}


def get_model_class(architecture: str) -> type[DecoderForCausalLM]:
    """The class implementing ``architecture``; ValueError naming the supported ones otherwise."""
    try:
        return MODEL_REGISTRY[architecture]
    except KeyError:
        raise ValueError(
            f"unsupported model architecture {architecture!r}; supported: {sorted(MODEL_REGISTRY)}"
        ) from None


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face tensor names and shapes a checkpoint of ``config`` must provide."""
    return get_model_class(config.architecture).checkpoint_shapes(config)


def load_model(
    path: str | Path,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str = "cpu",
    attention: AttentionBackend | str = "torch",
    pack_weights: bool | None = None,
    quantization: str = "none",
    native_ops: bool | None = None,
    gguf: str | Path | None = None,
    decode_gguf: bool = False,
) -> DecoderForCausalLM:
    """Load a model folder (config.json + safetensors, or + a GGUF file) with the class its architecture names.

    ``pack_weights`` (None = auto: on for CPU): pre-pack linear weights for oneDNN (see .linear).
    ``quantization`` ('none', 'int8', 'int4'): weight-only integer linears (see .quantized_linear).
    ``native_ops`` (None = when they build): fused CPU kernels for the small ops (see .layer_ops).
    ``gguf``: read the weights from this GGUF file in place (``path``: its config and tokenizer
    folder; the tensors keep their types and run on their native kernels under any
    ``quantization`` but "none", which decodes them into a float model, see .gguf_linear);
    ``decode_gguf``: decode them to float32 first, so that ``quantization`` re-quantizes them.
    """
    config = ModelConfig.from_pretrained(path)
    model = get_model_class(config.architecture).from_pretrained(
        path, dtype=dtype, device=device, attention=attention, pack_weights=pack_weights,
        quantization=quantization, native_ops=native_ops, gguf=gguf, decode_gguf=decode_gguf,
    )
    return_freed_memory()  # NOTE: the load's temporaries, kept by malloc otherwise (freed_memory.py)
    return model


__all__ = ["MODEL_REGISTRY", "DecoderForCausalLM", "LlamaForCausalLM", "expected_shapes", "get_model_class",
           "load_model"]
