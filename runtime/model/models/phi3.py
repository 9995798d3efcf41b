"""Phi-3 / Phi-3.5 / Phi-4-mini over the shared decoder (:mod:`.decoder`).

Llama's layer with the projections fused in the checkpoint itself: ``self_attn.qkv_proj``
(q, k, v rows in that order) and ``mlp.gate_up_proj`` (gate rows, then up), which are exactly the
fused matrices the decoder runs, so they load as they are. Its RoPE is usually ``longrope``
(``short_factor`` / ``long_factor``, see :mod:`.rope`), partial on Phi-4-mini
(``partial_rotary_factor``), and Phi-3-mini-4k slides a window over every layer.
"""
from __future__ import annotations

from ..model_config import ModelConfig
from .decoder import Attention, DecoderForCausalLM, DecoderLayer, DenseMLP
from .weight_loader import WeightLoader
from .llama import Shapes


class Phi3ForCausalLM(DecoderForCausalLM):
    """Phi3ForCausalLM checkpoints."""

    @classmethod
    def layer_shapes(cls, config: ModelConfig, layer: int, prefix: str) -> Shapes:
        c = config
        return {
            prefix + "input_layernorm.weight": (c.hidden_size,),
            prefix + "post_attention_layernorm.weight": (c.hidden_size,),
            prefix + "self_attn.qkv_proj.weight": (c.q_size + 2 * c.kv_size, c.hidden_size),
            prefix + "self_attn.o_proj.weight": (c.hidden_size, c.q_size),
            prefix + "mlp.gate_up_proj.weight": (2 * c.intermediate_size, c.hidden_size),
            prefix + "mlp.down_proj.weight": (c.hidden_size, c.intermediate_size),
        }

    def load_layer(self, layer: int, prefix: str, w: WeightLoader) -> DecoderLayer:
        return DecoderLayer(
            input_norm=w.norm(prefix + "input_layernorm.weight"),
            attn=Attention(qkv=w.linear(prefix + "self_attn.qkv_proj.weight"),
                           o=w.linear(prefix + "self_attn.o_proj.weight")),
            mlp_norm=w.norm(prefix + "post_attention_layernorm.weight"),
            mlp=DenseMLP(gate_up=w.linear(prefix + "mlp.gate_up_proj.weight"),
                         down=w.linear(prefix + "mlp.down_proj.weight")),
        )
