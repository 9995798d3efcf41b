"""Decoder layers of decode batches as one native call each (``sglc_cpu.DecodeLayer``).

A one-stream decode step of a small model spends a good part of its time between kernels: each
layer runs ~10 operators, and each costs a few microseconds of Python and dispatcher before its
kernel starts (a Qwen3-MoE GGUF step on 2 cores: ~2 of ~14 ms). Where a layer's every op has a
native form (the tiled GGUF linears, the native norms / RoPE / activation, the CPU decode attention
kernel, native experts with the router inside ``moe_route``), :func:`build_decode_layers` parses
its weights once into a ``DecodeLayer`` (``native/binding/decode_layer.h``) whose ``forward`` runs
those ops in C++, in the decoder loop's order, on the same inputs: the logits are the loop's bit
for bit (tests/test_decode_layers.py). Anything else (a float or int4 linear, a padded last tile,
OLMoE's full-width q/k norms, ``clip_qkv``, a prefill or mixed batch, more rows than a linear's
float copy waits for) keeps the Python loop.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..attention import TorchAttentionBackend
from .gguf_tiles import TILE
from .layer_ops import NativeLayerOps
from .moe import NATIVE_ROUTER_MAX_TOKENS, SparseMoE, native_act_name
from .tiled_linear import tiled_for_few_rows
from .weight_loader import StackedLinear


class TiledProjection(NamedTuple):
    """A linear as ``stacked_linear`` parts, its bias in the compute dtype, and the row count from
    which it runs elsewhere (a float copy)."""

    kinds: list[str]
    tensors: list[torch.Tensor]
    bias: torch.Tensor | None
    max_rows: int | float


class DecodeLayers(NamedTuple):
    """One ``DecodeLayer`` per decoder layer, what the loop passes each (its RoPE table, the next
    layer's input norm), and the row count below which every one of them runs."""

    layers: list[Any]  # torch.classes.sglc_cpu.DecodeLayer
    ropes: list[int]
    next_norms: list[torch.Tensor | None]
    max_rows: int | float


def tiled_projection(linear, dtype: torch.dtype) -> TiledProjection | None:
    """``linear`` as tiled GGUF parts filling whole tiles, or None where it is anything else."""
    if isinstance(linear, StackedLinear):
        parts = linear.tiled_parts()
        if parts is None:
            return None
        kinds, tensors, bias, max_rows = parts
    else:
        found = tiled_for_few_rows(linear)
        if found is None or found[0].out_features % TILE:
            return None
        kind, tensors = found[0].tiled()
        kinds, bias, max_rows = [kind], found[0].bias, found[1]
    # NOTE: the Python roads add `bias.to(y.dtype)`: the same rounding, done once here
    return TiledProjection(kinds, list(tensors), None if bias is None else bias.to(dtype).contiguous(), max_rows)


def _set_projection(layer, which: str, projection: TiledProjection) -> None:
    layer.set_projection(which, projection.kinds, projection.tensors, projection.bias)


def build_decode_layer(model, index: int) -> tuple[Any, int | float] | None:
    """Layer ``index`` of ``model`` (a loaded DecoderForCausalLM) as a DecodeLayer and its row bound,
    or None where one of its ops has no native form."""
    c, layer = model.config, model.layers[index]
    attn = layer.attn
    if c.clip_qkv is not None or (attn.q_norm is not None and c.qk_norm != "head"):
        return None  # NOTE: the clamp sits between the norms and RoPE; OLMoE normalizes all heads at once
    act = native_act_name(model.act)
    qkv, o = tiled_projection(attn.qkv, model.dtype), tiled_projection(attn.o, model.dtype)
    if act is None or qkv is None or o is None:
        return None
    dl = torch.classes.sglc_cpu.DecodeLayer()
    _set_projection(dl, "qkv", qkv)
    _set_projection(dl, "o", o)
    backend = model.attn
    dl.set_attention(c.num_attention_heads, c.num_key_value_heads, c.head_dim, attn.q_norm, attn.k_norm,
                     attn.post_norm, float(backend.scale), float(backend.softcap or 0.0))
    dl.set_mlp(layer.mlp_norm, layer.post_mlp_norm, act, float(c.rms_norm_eps))
    max_rows = min(qkv.max_rows, o.max_rows)
    mlp = layer.mlp
    if isinstance(mlp, SparseMoE):
        native = mlp.native
        if native is None or mlp.router_weight is None:
            return None
        dl.set_experts(native.gate_up_kinds, native.gate_up, native.down_kinds, native.down, act, mlp.router_weight,
                       mlp.top_k, mlp.renormalize, mlp.float_weights)
        max_rows = min(max_rows, native.max_tokens, NATIVE_ROUTER_MAX_TOKENS + 1)
    else:
        gate_up, down = tiled_projection(mlp.gate_up, model.dtype), tiled_projection(mlp.down, model.dtype)
        if gate_up is None or down is None:
            return None
        _set_projection(dl, "gate_up", gate_up)
        _set_projection(dl, "down", down)
        max_rows = min(max_rows, gate_up.max_rows, down.max_rows)
    return dl, max_rows


def build_decode_layers(model) -> DecodeLayers | None:
    """Every layer of ``model`` as a DecodeLayer, or None where one of them cannot be (then the
    decoder's Python loop runs every step)."""
    if (not isinstance(model.ops, NativeLayerOps) or not isinstance(model.attn, TorchAttentionBackend)
            or model.attn.native is False or model.device.type != "cpu" or not model.layers):
        return None
    built = [build_decode_layer(model, i) for i in range(len(model.layers))]
    if any(b is None for b in built):
        return None
    layers = model.layers
    next_norms = [layers[i + 1].input_norm if i + 1 < len(layers) else None for i in range(len(layers))]
    return DecodeLayers([b[0] for b in built], [layer.rope for layer in layers], next_norms,
                        min(b[1] for b in built))
