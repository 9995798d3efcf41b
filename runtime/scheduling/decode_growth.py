"""DecodeGrowthEstimator: how much KV a running request will still need.

Admission reserves, for every running request, ``ratio * remaining max_new_tokens`` slots of
future decode growth. Reserving the full ``max_new_tokens`` wastes the pool (most requests stop
early at EOS); reserving too little forces retractions. Like SGLang's ``new_token_ratio`` the
ratio starts conservative and decays with every decode step, but never below a floor LEARNED
from finished requests (an EMA of ``num_output / max_new_tokens``, with headroom). A retraction
means the estimate was too low, so it jumps back up.
"""
from __future__ import annotations

import math


class DecodeGrowthEstimator:
    """Guarantees: ``min_ratio <= ratio <= 1`` always; ``estimate(n) <= n``."""

    __slots__ = ("ratio", "min_ratio", "decay", "ema_weight", "headroom", "observed", "num_observed")

    def __init__(
        self,
        init_ratio: float = 0.7,
        min_ratio: float = 0.1,
        decay: float = 0.001,
        ema_weight: float = 0.1,
        headroom: float = 1.25,
    ):
        if not 0.0 < min_ratio <= init_ratio <= 1.0:
            raise ValueError(
                f"DecodeGrowthEstimator: need 0 < min_ratio ({min_ratio}) <= init_ratio "
                f"({init_ratio}) <= 1"
            )
        self.ratio = init_ratio
        self.min_ratio = min_ratio
        self.decay = decay
        self.ema_weight = ema_weight
        self.headroom = headroom
        self.observed: float | None = None  # EMA of num_output / max_new_tokens
        self.num_observed = 0

    @property
    def floor(self) -> float:
        """The learned lower bound of ``ratio``."""
        if self.observed is None:
            return self.min_ratio
        return min(1.0, max(self.min_ratio, self.observed * self.headroom))

    def estimate(self, remaining_new_tokens: int) -> int:
        """Slots to reserve for a request that may still generate ``remaining_new_tokens``."""
        if remaining_new_tokens <= 0:
            return 0
        return min(remaining_new_tokens, math.ceil(remaining_new_tokens * self.ratio))

    def on_decode_step(self) -> None:
        """One decode step passed without running out of KV: relax the estimate."""
        self.ratio = max(self.floor, self.ratio - self.decay)

    def on_finished(self, num_output: int, max_new_tokens: int) -> None:
        """Learn from a request that finished normally (not aborted)."""
        if max_new_tokens <= 0:
            return
        r = min(1.0, num_output / max_new_tokens)
        w = self.ema_weight
        self.observed = r if self.observed is None else (1 - w) * self.observed + w * r
        self.num_observed += 1
        self.ratio = max(self.ratio, self.floor)

    def on_retract(self) -> None:
        """Decode ran out of KV: the estimate was too low, move halfway back to 1."""
        self.ratio = min(1.0, self.ratio + 0.5 * (1.0 - self.ratio))
