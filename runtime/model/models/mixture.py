"""Mixture-of-experts families over the shared decoder (:mod:`.decoder`) and the grouped expert
block (:mod:`.moe`): OLMoE and Qwen3-MoE (``mlp.gate``, ``mlp.experts.N.{gate,up,down}_proj``)
and Mixtral (``block_sparse_moe.gate``, ``block_sparse_moe.experts.N.w1/w3/w2``: gate, up, down).

Attention is Llama's with the family's q/k norms (OLMoE: over all heads, Qwen3-MoE: per head);
routing and normalisation come from the config (``norm_topk_prob``; Mixtral always renormalises
and keeps the routing weights in float32). Qwen3-MoE layers listed in ``mlp_only_layers`` (or off
its ``decoder_sparse_step``) run a dense MLP instead.
"""
from __future__ import annotations

from ..model_config import ModelConfig
from .decoder import DecoderForCausalLM, DecoderLayer, DenseMLP
from .weight_loader import WeightLoader
from .llama import Shapes, attention_shapes, load_attention, load_mlp, mlp_shapes
from .moe import SparseMoE

#: checkpoint names of the expert block: (block prefix, gate, up, down)
_MIXTRAL_NAMES = ("block_sparse_moe.", "w1", "w3", "w2")
_QWEN_NAMES = ("mlp.", "gate_proj", "up_proj", "down_proj")


def _names(c: ModelConfig) -> tuple[str, str, str, str]:
    return _MIXTRAL_NAMES if c.architecture == "MixtralForCausalLM" else _QWEN_NAMES


class MoeForCausalLM(DecoderForCausalLM):
    """OlmoeForCausalLM, Qwen3MoeForCausalLM and MixtralForCausalLM checkpoints."""

    @classmethod
    def layer_shapes(cls, config: ModelConfig, layer: int, prefix: str) -> Shapes:
        c = config
        shapes: Shapes = {
            prefix + "input_layernorm.weight": (c.hidden_size,),
            prefix + "post_attention_layernorm.weight": (c.hidden_size,),
            **attention_shapes(c, prefix),
        }
        if not c.is_moe_layer(layer):
            return {**shapes, **mlp_shapes(c, prefix)}
        block, gate, up, down = _names(c)
        b, inter = prefix + block, c.moe_intermediate_size
        shapes[b + "gate.weight"] = (c.num_experts, c.hidden_size)
        for e in range(c.num_experts):
            x = f"{b}experts.{e}."
            shapes[f"{x}{gate}.weight"] = (inter, c.hidden_size)
            shapes[f"{x}{up}.weight"] = (inter, c.hidden_size)
            shapes[f"{x}{down}.weight"] = (c.hidden_size, inter)
        return shapes

    def load_layer(self, layer: int, prefix: str, w: WeightLoader) -> DecoderLayer:
        c = self.config
        mlp: DenseMLP | SparseMoE
        if c.is_moe_layer(layer):
            block, gate, up, down = _names(c)
            b = prefix + block
            ex = [f"{b}experts.{e}." for e in range(c.num_experts)]
            mlp = SparseMoE(
                router=w.float_linear(b + "gate.weight"),
                gate_up=[w.linear([f"{x}{gate}.weight", f"{x}{up}.weight"]) for x in ex],
                down=[w.linear(f"{x}{down}.weight") for x in ex],
                top_k=c.num_experts_per_tok,
                renormalize=c.norm_topk_prob,
                float_weights=c.architecture == "MixtralForCausalLM",
            )
        else:
            mlp = load_mlp(prefix, w)
        return DecoderLayer(
            input_norm=w.norm(prefix + "input_layernorm.weight"),
            attn=load_attention(c, prefix, w),
            mlp_norm=w.norm(prefix + "post_attention_layernorm.weight"),
            mlp=mlp,
        )
