"""ModelConfig: the architecture facts the runtime needs, read from a Hugging Face config.json.

One dataclass describes every family the runtime implements (``models/``): what differs between
Llama, Qwen, Mistral, Gemma, Phi-3 and the mixture-of-experts families is a handful of fields
(norm style, activation, q/k norms, soft-caps, sliding windows, rope per layer type, experts),
set per architecture by the readers at the bottom of this file. Anything a config asks for that
no family implements is refused here, by name, before any weight is read.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

#: RoPE scaling types implemented by ``models/rope.py``
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "yarn", "longrope")
#: gated-MLP activations (``hidden_act`` / ``hidden_activation``) by their config names
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}
#: the two attention layer kinds (transformers' ``layer_types``)
FULL, SLIDING = "full_attention", "sliding_attention"

#: dtype spellings -> torch's attribute names (kept as names: a torch-free process reads configs too)
_DTYPES = {
    "float32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
}


def dtype_name(dtype: "str | torch.dtype") -> str:
    """``"bfloat16"`` / ``"torch.bfloat16"`` / ``torch.bfloat16`` -> ``"bfloat16"``; clear error otherwise."""
    try:
        return _DTYPES[str(dtype).removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None


def parse_dtype(dtype: "str | torch.dtype") -> "torch.dtype":
    """``"bfloat16"`` / ``torch.bfloat16`` -> ``torch.bfloat16``; clear error otherwise."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, dtype_name(dtype))


@dataclass(slots=True)
class ModelConfig:
    """A decoder-only transformer, as the shared layers of ``models/`` run it.

    The Llama facts come first; the family-specific ones default to Llama's behaviour:

    * ``rope_scaling``: None or a dict with ``rope_type`` in :data:`SUPPORTED_ROPE_TYPES` and that
      type's parameters (see ``models/rope.py``); ``local_rope_theta`` / ``local_rope_scaling``:
      the rope of sliding-window layers where it differs (Gemma 3's ``rope_local_base_freq``);
      ``partial_rotary_factor``: the fraction of ``head_dim`` that rotates (Phi-4-mini).
    * ``norm_weight_offset``: 1.0 where RMSNorm scales by ``1 + w`` (Gemma; folded into the
      weights at load); ``sandwich_norms``: Gemma 2/3's extra norms on the attention and MLP
      outputs (``post_attention_layernorm`` on the attention output, ``pre_feedforward_layernorm``
      before the MLP, ``post_feedforward_layernorm`` after it).
    * ``qk_norm``: "head" (RMSNorm over each head's ``head_dim``: Qwen3, Gemma 3), "full" (over
      all heads at once: OLMoE) or None; ``clip_qkv``: OLMoE's clamp of q/k/v.
    * ``embed_scale`` (Gemma: ``sqrt(hidden_size)``), ``attn_scale`` (None: ``head_dim ** -0.5``;
      Gemma: ``query_pre_attn_scalar ** -0.5``), ``attn_logit_softcap`` and
      ``final_logit_softcap`` (Gemma 2: ``cap * tanh(x / cap)``).
    * ``sliding_window`` and ``layer_types`` (one of :data:`FULL` / :data:`SLIDING` per layer;
      empty = all full): a sliding layer's query at position p sees keys p - window + 1 .. p.
    * ``num_experts`` > 0: the layers listed in ``moe_layers`` run a sparse MoE block of
      ``num_experts`` experts (``moe_intermediate_size`` wide), ``num_experts_per_tok`` of them per
      token; ``norm_topk_prob``: the top-k routing weights renormalised to sum to 1.
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
    # --- what differs between families (defaults: Llama) ---
    hidden_act: str = "silu"
    norm_weight_offset: float = 0.0
    sandwich_norms: bool = False
    qk_norm: str | None = None
    clip_qkv: float | None = None
    embed_scale: float | None = None
    attn_scale: float | None = None
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    local_rope_theta: float | None = None
    local_rope_scaling: dict[str, Any] | None = None
    partial_rotary_factor: float = 1.0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    moe_layers: tuple[int, ...] = ()
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
        for scaling in (self.rope_scaling, self.local_rope_scaling):
            _check_rope_scaling(scaling)
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim % 2:
            raise ValueError(f"partial_rotary_factor={self.partial_rotary_factor} must give an even rotary "
                             f"dimension in (0, head_dim={self.head_dim}]")
        if self.hidden_act not in set(ACTIVATIONS.values()):
            raise ValueError(f"unsupported MLP activation {self.hidden_act!r}; supported: {sorted(ACTIVATIONS)}")
        if self.qk_norm not in (None, "head", "full"):
            raise ValueError(f"qk_norm must be None, 'head' or 'full', got {self.qk_norm!r}")
        if self.layer_types:
            if len(self.layer_types) != self.num_hidden_layers:
                raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                                 f"{self.num_hidden_layers} layers")
            bad = sorted(set(self.layer_types) - {FULL, SLIDING})
            if bad:
                raise ValueError(f"unsupported attention layer types {bad}; supported: {[FULL, SLIDING]}")
            if SLIDING in self.layer_types and not (self.sliding_window and self.sliding_window > 0):
                raise ValueError("sliding_attention layers need a positive sliding_window")
        for name in ("attn_logit_softcap", "final_logit_softcap", "clip_qkv", "attn_scale", "embed_scale"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"ModelConfig.{name} must be positive or None, got {value!r}")
        if self.num_experts:
            if not 0 < self.num_experts_per_tok <= self.num_experts or self.moe_intermediate_size < 1:
                raise ValueError(f"mixture of experts: num_experts_per_tok={self.num_experts_per_tok} must be in "
                                 f"[1, num_experts={self.num_experts}] and moe_intermediate_size positive")
            if any(not 0 <= i < self.num_hidden_layers for i in self.moe_layers):
                raise ValueError(f"moe_layers {self.moe_layers} outside the {self.num_hidden_layers} layers")
        dtype_name(self.dtype)

    @property
    def torch_dtype(self) -> "torch.dtype":
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

    @property
    def rotary_dim(self) -> int:
        """The leading features of each head that RoPE rotates (``head_dim`` unless partial)."""
        return int(self.head_dim * self.partial_rotary_factor)

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of ``layer`` (keys a query sees, itself included), or None (global)."""
        if self.layer_types and self.layer_types[layer] == SLIDING:
            return self.sliding_window
        return None

    def is_moe_layer(self, layer: int) -> bool:
        """Whether ``layer`` runs the sparse MoE block (else the dense MLP)."""
        return self.num_experts > 0 and layer in self.moe_layers

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Read a config.json dict (transformers 4.x or 5.x layout)."""
        archs = d.get("architectures") or ["LlamaForCausalLM"]
        arch = archs[0]
        reader = _READERS.get(arch)
        if reader is None:
            hint = _REFUSED.get(arch)
            raise ValueError(f"unsupported architecture {arch!r}" + (f" ({hint})" if hint else "")
                             + f"; supported: {SUPPORTED_ARCHITECTURES}")
        try:
            hidden = int(d["hidden_size"])
            heads = int(d["num_attention_heads"])
            vocab = int(d["vocab_size"])
            layers = int(d["num_hidden_layers"])
            inter = int(d["intermediate_size"])
        except KeyError as e:
            raise ValueError(f"config.json lacks required field {e.args[0]!r}") from None
        if d.get("mlp_bias"):
            raise ValueError("mlp_bias=True is not supported")
        rope_theta, rope_scaling, partial = _read_rope(d)
        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        attention_bias = bool(d.get("attention_bias", False))
        fields: dict[str, Any] = dict(
            architecture=arch,
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or hidden // heads),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            partial_rotary_factor=partial,
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            qkv_bias=attention_bias,
            o_bias=attention_bias,
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=eos_ids,
            dtype=str(d.get("torch_dtype") or d.get("dtype") or "float32"),
            hidden_act=_activation(d.get("hidden_act") or d.get("hidden_activation") or "silu"),
            extra={k: v for k, v in d.items() if k in ("model_type", "_name_or_path")},
        )
        fields.update(reader(d, fields))
        window = fields.get("sliding_window")
        if window is not None and window >= fields["max_position_embeddings"]:
            # NOTE: a window no sequence can outgrow is no window (keeps the full-attention paths)
            fields["sliding_window"], fields["layer_types"] = None, ()
        if fields.get("layer_types") and SLIDING not in fields["layer_types"]:
            fields["layer_types"] = ()
        return cls(**fields)

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


def _check_rope_scaling(scaling: dict[str, Any] | None) -> None:
    if scaling is None:
        return
    rope_type = scaling.get("rope_type")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"unsupported rope scaling {rope_type!r}; supported: {SUPPORTED_ROPE_TYPES}")
    if rope_type in ("linear", "llama3", "dynamic") and not float(scaling.get("factor") or 0) > 0:
        raise ValueError(f"rope scaling {rope_type!r} needs a positive 'factor'")
    if rope_type in ("yarn", "longrope", "llama3") and not scaling.get("original_max_position_embeddings"):
        raise ValueError(f"rope scaling {rope_type!r} needs 'original_max_position_embeddings'")
    if rope_type == "longrope" and not (scaling.get("short_factor") and scaling.get("long_factor")):
        raise ValueError("rope scaling 'longrope' needs 'short_factor' and 'long_factor'")


def _activation(name: str) -> str:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unsupported MLP activation {name!r}; supported: {sorted(ACTIVATIONS)}") from None


def _normalize_rope(params: dict[str, Any] | None, d: dict[str, Any]) -> dict[str, Any] | None:
    """One rope parameter dict (``rope_type`` named, theta removed) or None for plain RoPE."""
    if not params:
        return None
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    rope_type = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
    scaling.pop("type", None)
    if rope_type == "su":  # NOTE: Phi-3's first name for longrope
        rope_type = "longrope"
    if rope_type == "default":
        return None
    if rope_type in ("yarn", "longrope", "llama3") and not scaling.get("original_max_position_embeddings"):
        # NOTE: Phi-3 and some yarn configs keep it at the top level
        original = d.get("original_max_position_embeddings")
        if original:
            scaling["original_max_position_embeddings"] = int(original)
    return {"rope_type": rope_type, **scaling}


def _read_rope(d: dict[str, Any]) -> tuple[float, dict[str, Any] | None, float]:
    """(rope_theta, normalized rope_scaling or None, partial_rotary_factor) from either layout."""
    params = d.get("rope_parameters")
    if isinstance(params, dict) and FULL in params:  # transformers 5, per layer type (Gemma 3)
        params = params[FULL]
    partial = float(d.get("partial_rotary_factor") or 1.0)
    if isinstance(params, dict) and "rope_theta" in params:  # transformers 5 layout
        theta = float(params["rope_theta"])
        partial = float(params.get("partial_rotary_factor") or partial)
        return theta, _normalize_rope(params, d), partial
    theta = float(d.get("rope_theta", 10000.0))
    return theta, _normalize_rope(d.get("rope_scaling"), d), partial


def _window_layers(d: dict[str, Any], layers: int, rule: Callable[[int], bool]) -> tuple[str, ...]:
    """``layer_types`` from config.json when it has them, else from the family's rule."""
    given = d.get("layer_types")
    if given:
        return tuple(given)
    return tuple(SLIDING if rule(i) else FULL for i in range(layers))


def _window(d: dict[str, Any]) -> int | None:
    w = d.get("sliding_window")
    return int(w) if w not in (None, 0) else None


# ------------------------------------------------------------------ per-architecture readers
# Each returns the fields where its family departs from the Llama defaults of ``from_dict``.

def _llama(d: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    return {}


def _mistral(d: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    window = _window(d)
    return {"sliding_window": window,
            "layer_types": _window_layers(d, f["num_hidden_layers"], lambda i: window is not None)}


def _qwen(d: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    """Qwen2/2.5 (q/k/v bias, no o bias) and Qwen3 (per-head q/k RMSNorm, no bias)."""
    qwen3 = f["architecture"] == "Qwen3ForCausalLM"
    window = _window(d) if d.get("use_sliding_window") else None
    first = int(d.get("max_window_layers") or 0)
    out = {
        "rms_norm_eps": float(d.get("rms_norm_eps", 1e-6)),
        "qkv_bias": bool(d.get("attention_bias", False)) if qwen3 else True,
        "o_bias": bool(d.get("attention_bias", False)) if qwen3 else False,
        "sliding_window": window,
        "layer_types": _window_layers(d, f["num_hidden_layers"], lambda i: window is not None and i >= first),
    }
    if qwen3:
        out["qk_norm"] = "head"
    return out


def _gemma(d: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    """Gemma 2 and 3 (text): (1 + w) norms, sandwich norms, GeGLU, scaled embeddings,
    query_pre_attn_scalar; soft-caps (Gemma 2); local/global layers (Gemma 3: two rope bases)."""
    if d.get("use_bidirectional_attention"):
        raise ValueError("Gemma use_bidirectional_attention=True (an embedding model) is not supported")
    gemma3 = f["architecture"] == "Gemma3ForCausalLM"
    layers = f["num_hidden_layers"]
    window = _window(d)
    pattern = int(d.get("sliding_window_pattern") or d.get("_sliding_window_pattern") or (6 if gemma3 else 2))
    out: dict[str, Any] = {
        "rms_norm_eps": float(d.get("rms_norm_eps", 1e-6)),
        "norm_weight_offset": 1.0,
        "sandwich_norms": True,
        "hidden_act": _activation(d.get("hidden_activation") or d.get("hidden_act") or "gelu_pytorch_tanh"),
        "embed_scale": f["hidden_size"] ** 0.5,
        "attn_scale": float(d.get("query_pre_attn_scalar") or f["head_dim"]) ** -0.5,
        "attn_logit_softcap": d.get("attn_logit_softcapping") or None,
        "final_logit_softcap": d.get("final_logit_softcapping") or None,
        "tie_word_embeddings": bool(d.get("tie_word_embeddings", True)),
        "sliding_window": window,
        "layer_types": _window_layers(d, layers, lambda i: window is not None and bool((i + 1) % pattern)),
    }
    if gemma3:
        out["qk_norm"] = "head"
        params = d.get("rope_parameters")
        if isinstance(params, dict) and SLIDING in params:  # transformers 5 layout
            local = params[SLIDING] or {}
            out["local_rope_theta"] = float(local.get("rope_theta", 10000.0))
            out["local_rope_scaling"] = _normalize_rope(local, d)
        else:
            out["local_rope_theta"] = float(d.get("rope_local_base_freq", 10000.0))
            out["local_rope_scaling"] = None
        if not (isinstance(params, dict) and FULL in params) and "rope_theta" not in d:
            out["rope_theta"] = 1_000_000.0  # NOTE: Gemma 3's default global base
    return out


def _phi3(d: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    window = _window(d)
    return {"sliding_window": window,
            "layer_types": _window_layers(d, f["num_hidden_layers"], lambda i: window is not None)}


def _moe(d: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    """OLMoE, Qwen3-MoE and Mixtral: a sparse MoE block in (some) layers."""
    arch = f["architecture"]
    layers = f["num_hidden_layers"]
    experts = int(d.get("num_experts") or d.get("num_local_experts") or 0)
    out: dict[str, Any] = {
        "num_experts": experts,
        "num_experts_per_tok": int(d.get("num_experts_per_tok") or 0),
        "moe_intermediate_size": int(d.get("moe_intermediate_size") or f["intermediate_size"]),
        "norm_topk_prob": bool(d.get("norm_topk_prob", False)),
        "moe_layers": tuple(range(layers)),
    }
    if arch == "MixtralForCausalLM":
        window = _window(d)
        out.update(norm_topk_prob=True, sliding_window=window,
                   layer_types=_window_layers(d, layers, lambda i: window is not None))
    elif arch == "Qwen3MoeForCausalLM":
        window = _window(d) if d.get("use_sliding_window") else None
        dense = set(d.get("mlp_only_layers") or ())
        step = int(d.get("decoder_sparse_step") or 1)
        out.update(
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), qk_norm="head", sliding_window=window,
            layer_types=_window_layers(d, layers, lambda i: window is not None),
            moe_layers=tuple(i for i in range(layers) if i not in dense and experts > 0 and (i + 1) % step == 0),
        )
    else:  # OLMoE: q/k RMSNorm over all heads, optional clamp of q/k/v; no sliding window
        out.update(qk_norm="full", clip_qkv=d.get("clip_qkv") or None)
    return out


_READERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _mistral,
    "Qwen2ForCausalLM": _qwen,
    "Qwen3ForCausalLM": _qwen,
    "Gemma2ForCausalLM": _gemma,
    "Gemma3ForCausalLM": _gemma,
    "Phi3ForCausalLM": _phi3,
    "OlmoeForCausalLM": _moe,
    "Qwen3MoeForCausalLM": _moe,
    "MixtralForCausalLM": _moe,
}
#: architectures (config.json "architectures"[0]) this runtime implements
SUPPORTED_ARCHITECTURES = tuple(_READERS)
#: architectures people ask for that are refused, with the reason given at load
_REFUSED = {
    "Gemma3ForConditionalGeneration": "the multimodal Gemma 3 (4B and up); its text-only "
                                      "Gemma3ForCausalLM checkpoints load",
    "GemmaForCausalLM": "Gemma 1 is not implemented; Gemma 2 and 3 are",
    "Qwen2MoeForCausalLM": "Qwen2-MoE's shared experts are not implemented; Qwen3-MoE is",
    "Phi3VForCausalLM": "the vision Phi-3 is not implemented; Phi3ForCausalLM is",
    "PhiMoEForCausalLM": "Phi-3.5-MoE is not implemented",
}
