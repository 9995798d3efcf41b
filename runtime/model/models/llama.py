"""Llama-family models: Llama 1/2/3.x (incl. SmolLM2), Mistral (sliding window), Qwen2/2.5
(q/k/v bias) and Qwen3 (per-head q/k RMSNorm), over the shared decoder (:mod:`.decoder`).

They share one checkpoint layout (``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``,
``input_layernorm``, ``post_attention_layernorm``); what differs between them is in the
:class:`ModelConfig` their architecture's reader fills. The attention and MLP readers here are
reused by the other families that keep these names.
"""
from __future__ import annotations

from ..model_config import ModelConfig
from .decoder import Attention, DecoderForCausalLM, DecoderLayer, DenseMLP
from .weight_loader import WeightLoader

Shapes = dict[str, tuple[int, ...]]


def attention_shapes(c: ModelConfig, p: str) -> Shapes:
    """``self_attn.*`` of a layer with separate q/k/v projections (biases and q/k norms as configured)."""
    a = p + "self_attn."
    shapes: Shapes = {
        a + "q_proj.weight": (c.q_size, c.hidden_size),
        a + "k_proj.weight": (c.kv_size, c.hidden_size),
        a + "v_proj.weight": (c.kv_size, c.hidden_size),
        a + "o_proj.weight": (c.hidden_size, c.q_size),
    }
    if c.qkv_bias:
        shapes.update({a + "q_proj.bias": (c.q_size,), a + "k_proj.bias": (c.kv_size,),
                       a + "v_proj.bias": (c.kv_size,)})
    if c.o_bias:
        shapes[a + "o_proj.bias"] = (c.hidden_size,)
    if c.qk_norm == "head":
        shapes.update({a + "q_norm.weight": (c.head_dim,), a + "k_norm.weight": (c.head_dim,)})
    elif c.qk_norm == "full":
        shapes.update({a + "q_norm.weight": (c.q_size,), a + "k_norm.weight": (c.kv_size,)})
    return shapes


def load_attention(c: ModelConfig, p: str, w: WeightLoader) -> Attention:
    """The attention of a layer with separate q/k/v projections, fused into one linear."""
    a = p + "self_attn."
    return Attention(
        qkv=w.linear([a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"],
                     [a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"] if c.qkv_bias else None),
        o=w.linear(a + "o_proj.weight", a + "o_proj.bias" if c.o_bias else None),
        q_norm=w.norm(a + "q_norm.weight") if c.qk_norm else None,
        k_norm=w.norm(a + "k_norm.weight") if c.qk_norm else None,
    )


def mlp_shapes(c: ModelConfig, p: str) -> Shapes:
    """``mlp.{gate,up,down}_proj`` of a dense gated MLP."""
    m = p + "mlp."
    return {
        m + "gate_proj.weight": (c.intermediate_size, c.hidden_size),
        m + "up_proj.weight": (c.intermediate_size, c.hidden_size),
        m + "down_proj.weight": (c.hidden_size, c.intermediate_size),
    }


def load_mlp(p: str, w: WeightLoader) -> DenseMLP:
    """A dense gated MLP, gate and up fused."""
    m = p + "mlp."
    return DenseMLP(gate_up=w.linear([m + "gate_proj.weight", m + "up_proj.weight"]),
                    down=w.linear(m + "down_proj.weight"))


def rope_index(c: ModelConfig, layer: int) -> int:
    """Which RoPE table a layer uses: 1 (the local one) for sliding layers when the config gives
    them their own rope (Gemma 3), else 0."""
    return 1 if c.local_rope_theta is not None and c.layer_window(layer) is not None else 0


class LlamaForCausalLM(DecoderForCausalLM):
    """Llama, SmolLM2, Mistral, Qwen2/2.5 and Qwen3 (see the module docstring)."""

    @classmethod
    def layer_shapes(cls, config: ModelConfig, layer: int, prefix: str) -> Shapes:
        c = config
        return {
            prefix + "input_layernorm.weight": (c.hidden_size,),
            prefix + "post_attention_layernorm.weight": (c.hidden_size,),
            **attention_shapes(c, prefix),
            **mlp_shapes(c, prefix),
        }

    def load_layer(self, layer: int, prefix: str, w: WeightLoader) -> DecoderLayer:
        c = self.config
        return DecoderLayer(
            input_norm=w.norm(prefix + "input_layernorm.weight"),
            attn=load_attention(c, prefix, w),
            mlp_norm=w.norm(prefix + "post_attention_layernorm.weight"),
            mlp=load_mlp(prefix, w),
            rope=rope_index(c, layer),
        )
