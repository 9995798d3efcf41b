"""GGUFFile: a GGUF model file read in place — its metadata, and its tensors under Hugging Face
names, the 2-D ones kept as :class:`GGUFWeight` (memory-mapped blocks, nothing decoded).

llama.cpp names tensors ``token_embd``, ``blk.N.attn_q`` ...; this module maps them to the names
of the Hugging Face checkpoint the model classes read (``model.embed_tokens``,
``model.layers.N.self_attn.q_proj`` ...), and undoes llama.cpp's rotary row order of the llama
family's q and k (rows move whole, so this is exact for every type). Metadata gives the config in
Hugging Face's layout (``config_dict``), so GGUF and HF folders meet in one ``ModelConfig``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from .reader import GGUFFormatError, GGUFReaderLite
from .tensor_types import check_supported, type_name
from .weight import GGUFWeight

#: architectures (general.architecture) read from GGUF metadata
SUPPORTED_GGUF_ARCHITECTURES = ("llama",)

# llama.cpp tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


class GGUFModelError(ValueError):
    """A GGUF file sglc cannot run (architecture, tensor type or layout), naming what and why."""


def _f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (GGUF stores 1e-5 as float32)."""
    return float(str(np.float32(x)))


class GGUFFile:
    """One GGUF file, memory-mapped (the weights are read from the page cache, never copied whole)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.reader = GGUFReaderLite(self.path)
        except (GGUFFormatError, OSError) as err:
            raise GGUFModelError(f"{self.path}: not a readable GGUF file ({err})") from None
        self._tensors = self.reader.tensors

    def field(self, key: str, default: Any = None) -> Any:
        return self.reader.field(key, default)

    @property
    def architecture(self) -> str:
        return str(self.field("general.architecture", ""))

    def has_tensor(self, name: str) -> bool:
        return name in self._tensors

    def tensor_types(self) -> dict[str, int]:
        """How many tensors of each type the file holds."""
        counts: dict[str, int] = {}
        for t in self._tensors.values():
            counts[type_name(t.type)] = counts.get(type_name(t.type), 0) + 1
        return counts

    def weight(self, name: str) -> GGUFWeight:
        """A 2-D tensor as shipped (Hugging Face's [out, in]: GGUF lists the shape inner first)."""
        t = self._tensors[name]
        kind = type_name(t.type)
        check_supported(kind, name)
        if len(t.shape) != 2:
            raise GGUFModelError(f"tensor {name!r} has shape {t.shape}, expected 2 dimensions")
        cols, rows = t.shape
        return GGUFWeight(name, kind, rows, cols, self.reader.tensor_bytes(t, kind))

    def vector(self, name: str) -> torch.Tensor:
        """A 1-D tensor (norms, biases) decoded to float32."""
        t = self._tensors[name]
        kind = type_name(t.type)
        check_supported(kind, name)
        n = t.shape[0]
        return torch.from_numpy(GGUFWeight(name, kind, 1, n, self.reader.tensor_bytes(t, kind)).dequantize().reshape(n))

    def config_dict(self) -> dict[str, Any]:
        """The model's config in Hugging Face's config.json layout, from the GGUF metadata."""
        arch = self.architecture
        if arch not in SUPPORTED_GGUF_ARCHITECTURES:
            raise GGUFModelError(f"GGUF architecture {arch!r} is not supported; supported: "
                                 f"{', '.join(SUPPORTED_GGUF_ARCHITECTURES)}")
        if self.has_tensor("rope_freqs.weight"):
            raise GGUFModelError("GGUF with baked rope_freqs (llama3 rope scaling) is not supported yet")
        p = arch + "."
        heads = int(self.field(p + "attention.head_count"))
        hidden = int(self.field(p + "embedding_length"))
        n_tokens = self.reader.array_length("tokenizer.ggml.tokens") or 0
        head_dim = int(self.field(p + "attention.key_length", hidden // heads))
        if int(self.field(p + "rope.dimension_count", head_dim)) != head_dim:
            raise GGUFModelError("partial rotary embeddings (rope.dimension_count != head_dim) are not supported")
        rope_scaling = None
        scaling_type = self.field(p + "rope.scaling.type")
        if scaling_type == "linear":
            rope_scaling = {"rope_type": "linear", "factor": _f32(self.field(p + "rope.scaling.factor"))}
        elif scaling_type not in (None, "none"):
            raise GGUFModelError(f"GGUF rope scaling {scaling_type!r} is not supported")
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": int(self.field(p + "vocab_size", n_tokens)),
            "hidden_size": hidden,
            "intermediate_size": int(self.field(p + "feed_forward_length")),
            "num_hidden_layers": int(self.field(p + "block_count")),
            "num_attention_heads": heads,
            "num_key_value_heads": int(self.field(p + "attention.head_count_kv", heads)),
            "head_dim": head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": int(self.field(p + "context_length", 2048)),
            "rms_norm_eps": _f32(self.field(p + "attention.layer_norm_rms_epsilon", 1e-5)),
            "rope_theta": _f32(self.field(p + "rope.freq_base", 10000.0)),
            "rope_scaling": rope_scaling,
            "tie_word_embeddings": not self.has_tensor("output.weight"),
            "attention_bias": self.has_tensor("blk.0.attn_q.bias"),
            "mlp_bias": False,
            "bos_token_id": self.field("tokenizer.ggml.bos_token_id"),
            "eos_token_id": self.field("tokenizer.ggml.eos_token_id"),
            "pad_token_id": self.field("tokenizer.ggml.padding_token_id"),
            "torch_dtype": "float32",
        }

    def state_dict(self, config: dict[str, Any]) -> dict[str, torch.Tensor | GGUFWeight]:
        """Every tensor under its Hugging Face name: 2-D as GGUFWeight, 1-D as float32 tensors;
        q and k rows in Hugging Face's order."""
        out: dict[str, torch.Tensor | GGUFWeight] = {}
        for t in self._tensors.values():
            if t.name in GLOBAL_TENSORS:
                name = GLOBAL_TENSORS[t.name]
            else:
                parts = t.name.split(".", 2)
                if len(parts) != 3 or parts[0] != "blk" or parts[2] not in LAYER_TENSORS:
                    raise GGUFModelError(f"unexpected GGUF tensor {t.name!r} for architecture {self.architecture!r}")
                name = f"model.layers.{parts[1]}.{LAYER_TENSORS[parts[2]]}"
            if len(t.shape) == 1:
                value: torch.Tensor | GGUFWeight = self.vector(t.name)
            else:
                value = self.weight(t.name)
            if name.endswith(("q_proj.weight", "q_proj.bias")):
                value = unpermute_rope_rows(value, config["num_attention_heads"])
            elif name.endswith(("k_proj.weight", "k_proj.bias")):
                value = unpermute_rope_rows(value, config["num_key_value_heads"])
            out[name] = value
        return out


def rope_row_order(rows: int, n_head: int) -> np.ndarray:
    """Row ``i`` of the Hugging Face q/k is row ``order[i]`` of llama.cpp's: llama.cpp writes the
    rows of each head as (j, half) where Hugging Face has (half, j)."""
    return np.arange(rows).reshape(n_head, rows // n_head // 2, 2).swapaxes(1, 2).reshape(rows)


def unpermute_rope_rows(value: torch.Tensor | GGUFWeight, n_head: int) -> torch.Tensor | GGUFWeight:
    order = rope_row_order(value.shape[0], n_head)
    if isinstance(value, GGUFWeight):
        return value.reorder_rows(order)
    return value[torch.from_numpy(order)].contiguous()
