"""Gemma 2 and Gemma 3 (text) over the shared decoder (:mod:`.decoder`).

Their checkpoints keep Llama's projection names and add two norms per layer: the attention
output is normed (``post_attention_layernorm``) before the residual add, the MLP input by
``pre_feedforward_layernorm`` and its output by ``post_feedforward_layernorm`` ("sandwich"
norms). Everything else is configuration (``model_config._gemma``): RMSNorm scaling by
``1 + w`` (folded into the weights at load, see :mod:`.decoder`), GeGLU with tanh-approximated
GELU, embeddings times ``sqrt(hidden_size)``, ``query_pre_attn_scalar``, attention and final
logit soft-capping (Gemma 2), and local (sliding-window) layers interleaved with global ones,
which in Gemma 3 have a RoPE base of their own (``rope_local_base_freq``) and per-head q/k norms.
"""
from __future__ import annotations

from ..model_config import ModelConfig
from .decoder import DecoderForCausalLM, DecoderLayer
from .weight_loader import WeightLoader
from .llama import Shapes, attention_shapes, load_attention, load_mlp, mlp_shapes, rope_index


class GemmaForCausalLM(DecoderForCausalLM):
    """Gemma 2 (Gemma2ForCausalLM) and Gemma 3 text models (Gemma3ForCausalLM)."""

    @classmethod
    def layer_shapes(cls, config: ModelConfig, layer: int, prefix: str) -> Shapes:
        c = config
        norms = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm")
        return {
            **{f"{prefix}{n}.weight": (c.hidden_size,) for n in norms},
            **attention_shapes(c, prefix),
            **mlp_shapes(c, prefix),
        }

    def load_layer(self, layer: int, prefix: str, w: WeightLoader) -> DecoderLayer:
        c = self.config
        attn = load_attention(c, prefix, w)
        attn.post_norm = w.norm(prefix + "post_attention_layernorm.weight")
        return DecoderLayer(
            input_norm=w.norm(prefix + "input_layernorm.weight"),
            attn=attn,
            mlp_norm=w.norm(prefix + "pre_feedforward_layernorm.weight"),
            mlp=load_mlp(prefix, w),
            post_mlp_norm=w.norm(prefix + "post_feedforward_layernorm.weight"),
            rope=rope_index(c, layer),
        )
