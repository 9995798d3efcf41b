"""What a GGUF file's architecture means in Hugging Face terms: for each ``general.architecture`` that
sglc runs, the config.json its metadata describes (``config``) and where its tensors go (``tensors``).

Learnt from llama.cpp's own converter (convert_hf_to_gguf.py and its ``conversion/`` modules, gguf-py's
``constants.py`` / ``tensor_mapping.py``) and loader (``src/models/*.cpp``), and inverted:

- **llama** (Llama 1-3, Mistral and Mixtral convert to it): q/k rows permuted for llama.cpp's
  interleaved RoPE (undone by ``file.py``); Llama 3's rope scaling baked into a ``rope_freqs`` tensor
  (one factor per frequency, :func:`rope_from_freq_factors`); ``expert_count`` > 0 is Mixtral
  (``ffn_{gate,up,down}_exps`` stacked experts, router ``ffn_gate_inp``, top-k weights renormalised).
- **qwen2** (q/k/v bias), **qwen3** (per-head q/k norms), **qwen3moe** (experts; llama.cpp always
  renormalises the top-k weights; layers without a router are dense).
- **gemma2** / **gemma3**: every ``*norm.weight`` stored as ``1 + w`` (``norm_offset``: subtracted
  here, added back by the model at load); ``ffn_norm`` is the pre-feedforward norm,
  ``post_attention_norm`` / ``post_ffw_norm`` the sandwich norms; the attention scale is
  ``head_dim ** -0.5`` except for the 27B models (``hidden / heads``), as llama.cpp derives it;
  sliding layers by the file's pattern (array or period; llama.cpp's defaults 2 and 6); Gemma 3's
  local layers rotate with ``rope.freq_base_swa`` and no scaling.
- **phi3**: fused ``attn_qkv`` and ``ffn_up`` (gate then up rows) as Phi-3's own checkpoint fuses them;
  partial rotary from ``rope.dimension_count``; LongRoPE factors as the ``rope_factors_long`` /
  ``rope_factors_short`` tensors.
- **olmoe**: q/k norms over all heads, experts, top-k weights not renormalised; ``clamp_kqv`` if written.

What the converters never write cannot come back: a dense Llama's ``sliding_window`` (Mistral v0.1),
OLMoE's ``clip_qkv``, Gemma 2's ``query_pre_attn_scalar`` beyond the rule above, "dynamic" rope. Such a
GGUF describes the model llama.cpp runs, and so does this config.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

FULL, SLIDING = "full_attention", "sliding_attention"


class GGUFModelError(ValueError):
    """A GGUF file sglc cannot run (architecture, metadata, tensor type or layout), naming what and why."""


def f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (GGUF stores 1e-5 as float32)."""
    return float(str(np.float32(x)))


class ModelFile(Protocol):
    """What the readers here use of a GGUF file (``file.GGUFFile``, which imports this module)."""

    @property
    def architecture(self) -> str: ...

    def field(self, key: str, default: Any = None) -> Any: ...

    def has_tensor(self, name: str) -> bool: ...

    def tensor_shape(self, name: str) -> tuple[int, ...]: ...

    def vector_array(self, name: str) -> np.ndarray: ...


class Meta:
    """A GGUF file's ``{architecture}.*`` metadata, typed."""

    def __init__(self, f: ModelFile) -> None:
        self.f = f
        self.arch = f.architecture

    def get(self, key: str, default: Any = None) -> Any:
        return self.f.field(f"{self.arch}.{key}", default)

    def get_int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if value is None:
            raise GGUFModelError(f"GGUF metadata lacks {self.arch}.{key}")
        if isinstance(value, np.ndarray):  # NOTE: per-layer arrays (e.g. head counts): one value for all
            if len(set(value.tolist())) != 1:
                raise GGUFModelError(f"{self.arch}.{key} differs between layers ({value.tolist()}); "
                                            "per-layer sizes are not supported")
            value = value[0]
        return int(value)

    def get_float(self, key: str, default: float | None = None) -> float | None:
        value = self.get(key, default)
        return None if value is None else f32(value)


# ------------------------------------------------------------------ tensor names

#: llama.cpp's name after ``blk.N.`` -> Hugging Face's after ``model.layers.N.`` (Llama's layout)
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
}
GEMMA_TENSORS = {
    **LAYER_TENSORS,
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
PHI3_TENSORS = {
    **LAYER_TENSORS,
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "ffn_up.weight": "mlp.gate_up_proj.weight",  # NOTE: gate rows, then up rows
}
MIXTRAL_TENSORS = {**LAYER_TENSORS, "ffn_gate_inp.weight": "block_sparse_moe.gate.weight"}
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
#: tensors the config is read from (rope factors), not weights
CONFIG_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


@dataclass(frozen=True)
class ExpertNames:
    """Hugging Face names of expert ``e`` of a layer: ``{block}experts.{e}.{gate|up|down}.weight``."""

    block: str
    gate: str
    up: str
    down: str

    def name(self, e: int, which: str) -> str:
        return f"{self.block}experts.{e}.{getattr(self, which)}.weight"


QWEN_EXPERTS = ExpertNames("mlp.", "gate_proj", "up_proj", "down_proj")
MIXTRAL_EXPERTS = ExpertNames("block_sparse_moe.", "w1", "w3", "w2")


@dataclass(frozen=True)
class GGUFArchitecture:
    """One llama.cpp architecture: its config reader, tensor names and storage conventions."""

    name: str
    config: Callable[[Meta], dict[str, Any]]
    tensors: Callable[[dict[str, Any]], dict[str, str]] = field(default=lambda c: LAYER_TENSORS)
    experts: Callable[[dict[str, Any]], ExpertNames] = field(default=lambda c: QWEN_EXPERTS)
    rope_permuted: bool = False  # llama.cpp's "normal" RoPE: q/k rows interleaved per head
    norm_offset: float = 0.0  # norms stored as offset + w (Gemma: 1)


# ------------------------------------------------------------------ configs

def _common(m: Meta, arch: str, model_type: str) -> dict[str, Any]:
    """The fields every architecture reads the same way (llama.cpp's generic hparams)."""
    f = m.f
    heads = m.get_int("attention.head_count")
    hidden = m.get_int("embedding_length")
    head_dim = m.get_int("attention.key_length", hidden // heads)
    if m.get_int("attention.value_length", head_dim) != head_dim:
        raise GGUFModelError(f"value heads of {m.get('attention.value_length')} features beside key heads of "
                                    f"{head_dim} are not supported")
    embd = f.tensor_shape("token_embd.weight")
    return {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": embd[0],  # NOTE: the table's rows (Gemma 3's converter drops unused rows)
        "hidden_size": hidden,
        "intermediate_size": m.get_int("feed_forward_length"),
        "num_hidden_layers": m.get_int("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": m.get_int("attention.head_count_kv", heads),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": m.get_int("context_length", 2048),
        "rms_norm_eps": m.get_float("attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": m.get_float("rope.freq_base", 10000.0),
        "rope_scaling": _rope_scaling(m, head_dim),
        "tie_word_embeddings": not f.has_tensor("output.weight"),
        "attention_bias": f.has_tensor("blk.0.attn_q.bias") or f.has_tensor("blk.0.attn_qkv.bias"),
        "mlp_bias": False,
        "bos_token_id": f.field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": f.field("tokenizer.ggml.eos_token_id"),
        "pad_token_id": f.field("tokenizer.ggml.padding_token_id"),
        "torch_dtype": "float32",
    }


def _rope_scaling(m: Meta, head_dim: int) -> dict[str, Any] | None:
    """``rope.scaling.*`` as transformers' rope_scaling (linear, yarn; "none" for none)."""
    kind = m.get("rope.scaling.type")
    if kind in (None, "none"):
        return None
    if kind == "linear":
        factor = m.get_float("rope.scaling.factor", 1.0)
        return None if factor == 1.0 else {"rope_type": "linear", "factor": factor}
    if kind == "yarn":
        out: dict[str, Any] = {"rope_type": "yarn", "factor": m.get_float("rope.scaling.factor"),
                               "original_max_position_embeddings": m.get_int("rope.scaling.original_context_length")}
        for key, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow"),
                        ("yarn_attn_factor", "attention_factor")):
            if m.get(f"rope.scaling.{key}") is not None:
                out[hf] = m.get_float(f"rope.scaling.{key}")
        return out
    if kind == "longrope":
        return None  # NOTE: its factors are tensors; the architecture reads them (Phi-3)
    raise GGUFModelError(f"GGUF rope scaling {kind!r} is not supported (supported: none, linear, yarn, "
                                "longrope, llama3 rope_freqs)")


def rope_from_freq_factors(factors: np.ndarray, theta: float, dim: int, context: int) -> dict[str, Any] | None:
    """transformers' rope_scaling for llama.cpp's ``rope_freqs`` (frequency i divided by factor i).

    The converter writes Llama 3's scaling this way: factor 1 for short wavelengths, ``factor`` for
    long ones, ``1 / ((1 - s) / factor + s)`` between, s linear in 1 / wavelength. With the Llama 3
    recipe's ``low_freq_factor`` 1 the blend's two points give ``high_freq_factor`` and the original
    context; the result is kept only if recomputing the factors gives the file's (float32). Anything
    else becomes per-frequency factors as transformers' "longrope" spells them (one list for every
    length, no attention scaling), which rotates exactly as llama.cpp does."""
    r = np.asarray(factors, dtype=np.float64)
    if np.all(r == 1.0):
        return None
    inv_freq = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    wavelen = 2 * math.pi / inv_freq
    factor = float(r.max())
    medium = (r > 1.0) & (r < factor)
    if factor > 1.0 and medium.sum() >= 2:
        s = (1.0 / r[medium] - 1.0 / factor) / (1.0 - 1.0 / factor)
        slope, intercept = np.polyfit(1.0 / wavelen[medium], s, 1)  # s = orig / (high - 1) / wavelen - 1 / (high - 1)
        if intercept < 0:
            high = round(1.0 - 1.0 / intercept, 4)
            orig = int(round(-slope / intercept))
            scaling = {"rope_type": "llama3", "factor": f32(factor), "low_freq_factor": 1.0, "high_freq_factor": high,
                       "original_max_position_embeddings": orig}
            if np.allclose(_llama3_factors(scaling, wavelen), r, rtol=1e-6, atol=0):
                return scaling
    values = [f32(x) for x in factors]
    return {"rope_type": "longrope", "short_factor": values, "long_factor": values, "attention_factor": 1.0,
            "original_max_position_embeddings": context}


def _llama3_factors(s: dict[str, Any], wavelen: np.ndarray) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, restated."""
    orig, low, high, factor = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    out = []
    for w in wavelen:
        if w < orig / high:
            out.append(1.0)
        elif w > orig / low:
            out.append(factor)
        else:
            smooth = (orig / w - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32).astype(np.float64)


def _window(m: Meta) -> int | None:
    w = m.get("attention.sliding_window")
    return int(w) if w else None


def _layer_types(m: Meta, layers: int, default_period: int) -> list[str]:
    """Sliding layers as llama.cpp's ``load_swa_pattern`` reads them: a per-layer bool array, or a
    period p (layer i slides unless i % p == p - 1)."""
    pattern = m.get("attention.sliding_window_pattern")
    if isinstance(pattern, np.ndarray):
        if len(pattern) < layers:
            raise GGUFModelError(f"sliding_window_pattern has {len(pattern)} entries for {layers} layers")
        return [SLIDING if bool(pattern[i]) else FULL for i in range(layers)]
    period = int(pattern) if pattern is not None else default_period
    return [SLIDING if period == 0 or i % period < period - 1 else FULL for i in range(layers)]


def _llama(m: Meta) -> dict[str, Any]:
    """Llama (and Mistral / Mixtral, which llama.cpp converts to it)."""
    d = _common(m, "LlamaForCausalLM", "llama")
    if m.get_int("rope.dimension_count", d["head_dim"]) != d["head_dim"]:
        raise GGUFModelError(f"llama rope.dimension_count {m.get('rope.dimension_count')} != head_dim "
                                    f"{d['head_dim']} (llama.cpp refuses it too)")
    if m.f.has_tensor("rope_freqs.weight"):
        d["rope_scaling"] = rope_from_freq_factors(m.f.vector_array("rope_freqs.weight"), d["rope_theta"],
                                                   d["head_dim"], d["max_position_embeddings"])
    window = _window(m)
    experts = m.get_int("expert_count", 0)
    if experts:
        d.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=experts,
                 num_experts_per_tok=m.get_int("expert_used_count"),
                 intermediate_size=m.get_int("expert_feed_forward_length", d["intermediate_size"]), sliding_window=window)
    elif window:
        d.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=window)
    return d


def _qwen2(m: Meta) -> dict[str, Any]:
    d = _common(m, "Qwen2ForCausalLM", "qwen2")
    window = _window(m)
    d.update(use_sliding_window=window is not None, sliding_window=window, max_window_layers=0)
    return d


def _qwen3(m: Meta) -> dict[str, Any]:
    return _common(m, "Qwen3ForCausalLM", "qwen3")


def _moe_fields(m: Meta, d: dict[str, Any], renormalize_default: bool) -> dict[str, Any]:
    """Experts of Qwen3-MoE / OLMoE: count, top-k, width, renormalisation (``expert_weights_norm``
    if written, else what llama.cpp's graph for the architecture does)."""
    return {"num_experts": m.get_int("expert_count"), "num_experts_per_tok": m.get_int("expert_used_count"),
            "moe_intermediate_size": m.get_int("expert_feed_forward_length", d["intermediate_size"]),
            "norm_topk_prob": bool(m.get("expert_weights_norm", renormalize_default))}


def _qwen3moe(m: Meta) -> dict[str, Any]:
    d = _common(m, "Qwen3MoeForCausalLM", "qwen3_moe")
    d.update(_moe_fields(m, d, renormalize_default=True))
    dense = [i for i in range(d["num_hidden_layers"]) if not m.f.has_tensor(f"blk.{i}.ffn_gate_inp.weight")]
    d.update(mlp_only_layers=dense, decoder_sparse_step=1)
    return d


def _olmoe(m: Meta) -> dict[str, Any]:
    d = _common(m, "OlmoeForCausalLM", "olmoe")
    d.update(_moe_fields(m, d, renormalize_default=False))
    d["clip_qkv"] = m.get_float("attention.clamp_kqv")
    return d


def _gemma(m: Meta, arch: str, model_type: str, big_layers: int, period: int,
           default_window: int | None = None) -> dict[str, Any]:
    d = _common(m, arch, model_type)
    layers = d["num_hidden_layers"]
    big = layers == big_layers  # NOTE: llama.cpp: the 27B model scales queries by hidden / heads
    window = _window(m) or default_window  # NOTE: llama.cpp's Gemma 2 default: 4096
    d.update(
        hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        query_pre_attn_scalar=d["hidden_size"] // d["num_attention_heads"] if big else d["head_dim"],
        final_logit_softcapping=m.get_float("final_logit_softcapping"),
        sliding_window=window,
        layer_types=_layer_types(m, layers, period) if window else [FULL] * layers,
    )
    return d


def _gemma2(m: Meta) -> dict[str, Any]:
    d = _gemma(m, "Gemma2ForCausalLM", "gemma2", big_layers=46, period=2, default_window=4096)
    d["attn_logit_softcapping"] = m.get_float("attn_logit_softcapping")
    return d


def _gemma3(m: Meta) -> dict[str, Any]:
    d = _gemma(m, "Gemma3ForCausalLM", "gemma3_text", big_layers=62, period=6)
    d["rope_local_base_freq"] = m.get_float("rope.freq_base_swa", 10000.0)
    return d


def _phi3(m: Meta) -> dict[str, Any]:
    d = _common(m, "Phi3ForCausalLM", "phi3")
    rot = m.get_int("rope.dimension_count", d["head_dim"])
    d["partial_rotary_factor"] = rot / d["head_dim"]
    d["sliding_window"] = _window(m)
    f = m.f
    if f.has_tensor("rope_factors_long.weight"):
        orig = m.get_int("rope.scaling.original_context_length")
        scaling: dict[str, Any] = {
            "rope_type": "longrope", "original_max_position_embeddings": orig,
            "short_factor": [f32(x) for x in f.vector_array("rope_factors_short.weight").tolist()],
            "long_factor": [f32(x) for x in f.vector_array("rope_factors_long.weight").tolist()]}
        written = m.get_float("rope.scaling.attn_factor")
        scale = d["max_position_embeddings"] / orig
        implied = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
        if written is not None and abs(written - implied) > 1e-6:  # NOTE: the converter writes the implied one
            scaling["attention_factor"] = written
        d["rope_scaling"] = scaling
        d["original_max_position_embeddings"] = orig
    return d


def _gemma_tensors(c: dict[str, Any]) -> dict[str, str]:
    return GEMMA_TENSORS


ARCHITECTURES: dict[str, GGUFArchitecture] = {a.name: a for a in (
    GGUFArchitecture("llama", _llama, rope_permuted=True,
                     tensors=lambda c: MIXTRAL_TENSORS if c.get("num_local_experts") else LAYER_TENSORS,
                     experts=lambda c: MIXTRAL_EXPERTS),
    GGUFArchitecture("qwen2", _qwen2),
    GGUFArchitecture("qwen3", _qwen3),
    GGUFArchitecture("qwen3moe", _qwen3moe),
    GGUFArchitecture("gemma2", _gemma2, tensors=_gemma_tensors, norm_offset=1.0),
    GGUFArchitecture("gemma3", _gemma3, tensors=_gemma_tensors, norm_offset=1.0),
    GGUFArchitecture("phi3", _phi3, tensors=lambda c: PHI3_TENSORS),
    GGUFArchitecture("olmoe", _olmoe),
)}
#: ``general.architecture`` values sglc runs
SUPPORTED_GGUF_ARCHITECTURES = tuple(ARCHITECTURES)


def architecture(name: str) -> GGUFArchitecture:
    """The architecture ``name``; GGUFModelError naming the supported ones otherwise."""
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise GGUFModelError(f"GGUF architecture {name!r} is not supported; supported: "
                                    f"{', '.join(SUPPORTED_GGUF_ARCHITECTURES)}") from None
