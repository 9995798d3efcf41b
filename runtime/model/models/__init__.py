"""Model implementations, picked by the Hugging Face architecture name in config.json."""
from __future__ import annotations

from pathlib import Path

import torch

from ..attention import AttentionBackend
from ..model_config import ModelConfig
from .llama import LlamaForCausalLM

# NOTE: Mistral (without sliding window) and Qwen2 (q/k/v bias) are Llama with config flags;
# ModelConfig.from_dict sets those flags from the architecture name.
MODEL_REGISTRY: dict[str, type[LlamaForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
}


def get_model_class(architecture: str) -> type[LlamaForCausalLM]:
    """The class implementing ``architecture``; ValueError naming the supported ones otherwise."""
    try:
        return MODEL_REGISTRY[architecture]
    except KeyError:
        raise ValueError(
            f"unsupported model architecture {architecture!r}; supported: {sorted(MODEL_REGISTRY)}"
        ) from None


def load_model(
    path: str | Path,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str = "cpu",
    attention: AttentionBackend | str = "torch",
    pack_weights: bool | None = None,
    quantization: str = "none",
    native_ops: bool | None = None,
) -> LlamaForCausalLM:
    """Load a model folder (config.json + safetensors) with the class its architecture names.

    ``pack_weights`` (None = auto: on for CPU): pre-pack linear weights for oneDNN (see .linear).
    ``quantization`` ('none', 'int8', 'int4'): weight-only integer linears (see .quantized_linear).
    ``native_ops`` (None = when they build): fused CPU kernels for the small ops (see .layer_ops).
    """
    config = ModelConfig.from_pretrained(path)
    return get_model_class(config.architecture).from_pretrained(
        path, dtype=dtype, device=device, attention=attention, pack_weights=pack_weights,
        quantization=quantization, native_ops=native_ops,
    )


__all__ = ["MODEL_REGISTRY", "LlamaForCausalLM", "get_model_class", "load_model"]
