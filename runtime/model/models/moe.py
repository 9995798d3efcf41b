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
"""
from __future__ import annotations

from typing import Callable

import torch


class SparseMoE:
    """Router + experts of one layer. ``gate_up[e]`` / ``down[e]``: expert e's linears (any
    linear the model builds: plain, packed or quantized)."""

    __slots__ = ("router", "gate_up", "down", "top_k", "renormalize", "float_weights")

    def __init__(self, router, gate_up: list, down: list, top_k: int, renormalize: bool,
                 float_weights: bool = False) -> None:
        assert len(gate_up) == len(down) >= top_k >= 1, "SparseMoE: top_k must not exceed the experts"
        self.router = router
        self.gate_up = gate_up
        self.down = down
        self.top_k = top_k
        self.renormalize = renormalize
        self.float_weights = float_weights

    @property
    def num_experts(self) -> int:
        return len(self.gate_up)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, experts) ``[T, top_k]`` of each token."""
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
