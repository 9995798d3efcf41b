"""The sparse mixture-of-experts MLP block (OLMoE, Qwen3-MoE, Mixtral), run grouped by expert.

Routing follows transformers: router logits in the model's dtype, softmax in float32, the top
``k`` probabilities per token, renormalised to sum to 1 where the config says so
(``norm_topk_prob``; Mixtral always), cast back to the model's dtype except for Mixtral (which
keeps them in float32). The experts then run grouped: the (token, expert) pairs are sorted by
expert (a stable sort, so each token's contributions are added in expert order, as transformers
adds them), each expert that received tokens runs ONE gated MLP over all of them, the outputs are
scaled by their routing weights and summed back into their tokens with one ``index_add_``. The
Python loop is over experts that got tokens (at most ``k`` per token), never over tokens.

One token (every decode step of one stream) takes a shorter road: its ``k`` experts in ascending
order, each output scaled and added in place. The sums are the same as the grouped path's (same
order, same casts); what goes is the sort, the bincount, the gathers and the scatter, which cost
more than the expert linears themselves on a small model.

Where every expert is a GGUF weight on a native tile kernel (a GGUF model on a CPU), both roads
are one operator call instead: ``torch.ops.sglc_cpu.moe_experts`` (``native/binding/moe_experts.h``)
quantizes the tokens' rows once, runs every expert's tiles in one pass per projection and adds
the contributions in the same order and roundings, so its output equals the grouped path's bit
for bit (tested). On a 2-core CPU the Python roads' operators cost about as much as the experts'
weight streaming (a Qwen3-MoE decode step: ~2.6 of ~17 ms at one stream, ~8 of ~42 at eight).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from .linear import Linear
from .quantized_linear import CastLinear
from .tiled_linear import tiled_for_few_rows

#: up to this many tokens the router's logits are computed inside ``moe_route`` (its float32 dot
#: products: a one-token step saves the cast, the GEMV's dispatch and the cast back, ~30 us a layer);
#: from here on the float32 GEMM library's kernel is faster.
NATIVE_ROUTER_MAX_TOKENS = 16


class NativeExperts(NamedTuple):
    """The experts as ``moe_experts`` takes them, and the token count from which the float copies
    (where the linears keep them) serve instead."""

    gate_up_kinds: list[str]
    gate_up: list[torch.Tensor]
    down_kinds: list[str]
    down: list[torch.Tensor]
    max_tokens: int | float


def native_experts(gate_up: list, down: list) -> NativeExperts | None:
    """Every expert's linears as tiled GGUF weights without bias, or None where one is not (float,
    int4/int8 quantized, stacked mixed types, a padded last tile)."""
    kinds: tuple[list[str], list[str]] = ([], [])
    tensors: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    max_tokens: int | float = float("inf")
    for pair in zip(gate_up, down):
        for i, linear in enumerate(pair):
            found = tiled_for_few_rows(linear)
            if found is None or found[0].bias is not None or found[0].out_features % 16:
                return None
            kind, args = found[0].tiled()
            kinds[i].append(kind)
            tensors[i].extend(args)
            max_tokens = min(max_tokens, found[1])
    return NativeExperts(kinds[0], tensors[0], kinds[1], tensors[1], max_tokens)


def router_weight(router) -> torch.Tensor | None:
    """The router's float32 weight [experts, hidden] where it is a float32 linear without bias
    (run on the model's dtype through :class:`CastLinear` or not), else None."""
    linear = router.linear if isinstance(router, CastLinear) else router
    if not isinstance(linear, Linear) or linear.bias is not None or linear.weight is None:
        return None
    w = linear.weight
    return w if w.dtype == torch.float32 and w.device.type == "cpu" and w.is_contiguous() else None


def native_act_name(act: Callable) -> str | None:
    """'silu' / 'gelu_tanh' where ``act`` is the native gated activation of that name."""
    ops = getattr(torch.ops, "sglc_cpu", None)
    if ops is None:
        return None
    if act is getattr(ops, "silu_mul", None):
        return "silu"
    if act is getattr(ops, "gelu_tanh_mul", None):
        return "gelu_tanh"
    return None


class SparseMoE:
    """Router + experts of one layer. ``gate_up[e]`` / ``down[e]``: expert e's linears (any
    linear the model builds: plain, packed or quantized)."""

    __slots__ = ("router", "gate_up", "down", "top_k", "renormalize", "float_weights", "native", "router_weight")

    def __init__(self, router, gate_up: list, down: list, top_k: int, renormalize: bool,
                 float_weights: bool = False) -> None:
        assert len(gate_up) == len(down) >= top_k >= 1, "SparseMoE: top_k must not exceed the experts"
        self.router = router
        self.gate_up = gate_up
        self.down = down
        self.top_k = top_k
        self.renormalize = renormalize
        self.float_weights = float_weights
        self.native = native_experts(gate_up, down)
        self.router_weight = router_weight(router) if self.native is not None else None

    @property
    def num_experts(self) -> int:
        return len(self.gate_up)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, experts) ``[T, top_k]`` of each token; with native experts, one ``moe_route``
        call (the same arithmetic in C++: a probability may differ from torch's in its last bit),
        which for a few tokens computes the router's logits too (summed in another order than the
        GEMV library's: a logit may differ from it in its last float32 bit before rounding)."""
        if self.native is not None:  # NOTE: native experts exist only where the native ops loaded
            if self.router_weight is not None and x.shape[0] <= NATIVE_ROUTER_MAX_TOKENS:
                return torch.ops.sglc_cpu.moe_route(x, self.top_k, self.renormalize, self.float_weights,
                                                    self.router_weight)
            return torch.ops.sglc_cpu.moe_route(self.router(x), self.top_k, self.renormalize, self.float_weights)
        logits = self.router(x)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if not self.float_weights:
            weights = weights.to(x.dtype)
        return weights, experts

    def __call__(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        weights, experts = self.route(x)
        native = self.native
        if native is not None and x.shape[0] < native.max_tokens and x.is_contiguous():
            act_name = native_act_name(act)
            if act_name is not None:
                return torch.ops.sglc_cpu.moe_experts(x, experts, weights, native.gate_up_kinds, native.gate_up,
                                                      native.down_kinds, native.down, act_name)
        if x.shape[0] == 1:
            return self._one_token(x, act, weights[0], experts[0])
        return self._grouped(x, act, weights, experts)

    def _grouped(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor], weights: torch.Tensor,
                 experts: torch.Tensor) -> torch.Tensor:
        """Each expert that got tokens runs once over all of them (see the module doc)."""
        flat = experts.reshape(-1)
        order = torch.argsort(flat, stable=True)  # NOTE: pairs grouped by expert, tokens in order within
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        token = order // self.top_k
        xs = x.index_select(0, token)
        ys = torch.empty_like(xs)
        start = 0
        for e, n in enumerate(counts):
            if n:
                ys[start:start + n] = self.down[e](act(self.gate_up[e](xs[start:start + n])))
                start += n
        scaled = (ys * weights.reshape(-1).index_select(0, order)[:, None]).to(x.dtype)
        return torch.zeros_like(x).index_add_(0, token, scaled)

    def _one_token(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor], weights: torch.Tensor,
                   experts: torch.Tensor) -> torch.Tensor:
        """The grouped path's sum for a single token, without its sort, gathers and scatter."""
        # NOTE: each weight stays a 1-element tensor, so `y * w` promotes as the grouped path's [n, 1] does
        ranked = sorted(zip(experts.tolist(), weights.split(1)), key=lambda pair: pair[0])
        out = torch.zeros_like(x)
        for e, w in ranked:
            out += (self.down[e](act(self.gate_up[e](x))) * w).to(x.dtype)
        return out
