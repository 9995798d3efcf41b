"""ModelConfig: the architecture facts the runtime needs, read from a Hugging Face config.json."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

#: architectures (config.json "architectures"[0]) this runtime implements
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
#: RoPE scaling types implemented by ``models/rope.py``
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "half": torch.float16,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"bfloat16"`` / ``torch.bfloat16`` -> ``torch.bfloat16``; clear error otherwise."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype).removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None


@dataclass(slots=True)
class ModelConfig:
    """Llama-family architecture description (also Mistral and Qwen2).

    ``rope_scaling`` is None or a dict with ``rope_type`` in :data:`SUPPORTED_ROPE_TYPES` and that
    type's parameters (``factor``; for llama3 also ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings``). ``dtype`` is the checkpoint's dtype name.
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    dtype: str = "float32"
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {self.architecture!r}; supported: {SUPPORTED_ARCHITECTURES}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError("rms_norm_eps and rope_theta must be positive")
        if self.rope_scaling is not None:
            rope_type = self.rope_scaling.get("rope_type")
            if rope_type not in SUPPORTED_ROPE_TYPES:
                raise ValueError(
                    f"unsupported rope scaling {rope_type!r}; supported: {SUPPORTED_ROPE_TYPES}"
                )
            if rope_type != "default" and not float(self.rope_scaling.get("factor", 0)) > 0:
                raise ValueError(f"rope scaling {rope_type!r} needs a positive 'factor'")
        parse_dtype(self.dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        """The checkpoint dtype as a ``torch.dtype``."""
        return parse_dtype(self.dtype)

    @property
    def q_size(self) -> int:
        """Width of the query projection."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection."""
        return self.num_key_value_heads * self.head_dim

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Read a config.json dict (transformers 4.x or 5.x layout)."""
        archs = d.get("architectures") or ["LlamaForCausalLM"]
        arch = archs[0]
        try:
            hidden = int(d["hidden_size"])
            heads = int(d["num_attention_heads"])
            vocab = int(d["vocab_size"])
            layers = int(d["num_hidden_layers"])
            inter = int(d["intermediate_size"])
        except KeyError as e:
            raise ValueError(f"config.json lacks required field {e.args[0]!r}") from None
        rope_theta, rope_scaling = _read_rope(d)
        if arch == "MistralForCausalLM" and d.get("sliding_window") not in (None, 0):
            if int(d["sliding_window"]) < int(d.get("max_position_embeddings", 0)):
                raise ValueError("sliding-window attention (Mistral sliding_window) is not supported")
        if d.get("mlp_bias"):
            raise ValueError("mlp_bias=True is not supported")
        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        attention_bias = bool(d.get("attention_bias", False))
        qwen2 = arch == "Qwen2ForCausalLM"
        return cls(
            architecture=arch,
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or hidden // heads),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6 if qwen2 else 1e-5)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            qkv_bias=qwen2 or attention_bias,
            o_bias=attention_bias and not qwen2,
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=eos_ids,
            dtype=str(d.get("torch_dtype") or d.get("dtype") or "float32"),
            extra={k: v for k, v in d.items() if k in ("model_type", "_name_or_path")},
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "ModelConfig":
        """Read ``<path>/config.json``."""
        file = Path(path) / "config.json"
        if not file.is_file():
            raise FileNotFoundError(f"no config.json in model folder {str(path)!r}")
        try:
            data = json.loads(file.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{file}: invalid JSON ({e})") from None
        return cls.from_dict(data)


def _read_rope(d: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, normalized rope_scaling or None) from either config layout."""
    params = d.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:  # transformers 5 layout
        theta = float(params["rope_theta"])
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta = float(d.get("rope_theta", 10000.0))
        scaling = dict(d["rope_scaling"]) if d.get("rope_scaling") else None
    if scaling is None:
        return theta, None
    rope_type = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
    scaling.pop("type", None)
    if rope_type == "default":
        return theta, None
    return theta, {"rope_type": rope_type, **scaling}
