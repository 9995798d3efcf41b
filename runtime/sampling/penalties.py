"""Logit penalties over each request's output tokens, batched.

Stateless: counts are rebuilt each step from the output token ids (one scatter), so retraction,
abort and re-admission need no bookkeeping here. Only rows that use a penalty are touched.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import torch

from .sampling_params import SamplingParams


@dataclass(slots=True)
class PenaltyBatch:
    """Penalties for the rows of a batch that have any (built by `build`, applied by `apply`).

    rows: [b] long, the logits rows penalized; counts: [b, V] float32 output-token counts;
    frequency / presence / repetition: [b, 1] float32.
    """

    rows: torch.Tensor
    counts: torch.Tensor
    frequency: torch.Tensor
    presence: torch.Tensor
    repetition: torch.Tensor | None

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        output_ids: Sequence[Sequence[int]],
        vocab_size: int,
        device: torch.device | str = "cpu",
    ) -> PenaltyBatch | None:
        """Gather the penalized rows; None when no row has a penalty (the common case)."""
        rows = [i for i, p in enumerate(params) if p.has_penalties]
        if not rows:
            return None
        counts = torch.zeros(len(rows), vocab_size, dtype=torch.float32, device=device)
        lengths = [len(output_ids[i]) for i in rows]
        if sum(lengths):
            flat = torch.tensor(list(chain.from_iterable(output_ids[i] for i in rows)), dtype=torch.long, device=device)
            which = torch.repeat_interleave(torch.arange(len(rows), device=device), torch.tensor(lengths, device=device))
            counts.index_put_((which, flat), torch.ones_like(flat, dtype=torch.float32), accumulate=True)

        def column(name: str) -> torch.Tensor:
            return torch.tensor([getattr(params[i], name) for i in rows], dtype=torch.float32, device=device).view(-1, 1)

        any_rep = any(params[i].repetition_penalty != 1.0 for i in rows)
        return cls(
            rows=torch.tensor(rows, dtype=torch.long, device=device),
            counts=counts,
            frequency=column("frequency_penalty"),
            presence=column("presence_penalty"),
            repetition=column("repetition_penalty") if any_rep else None,
        )

    def apply(self, logits: torch.Tensor) -> None:
        """Penalize `logits` [B, V] in place (only `rows` change).

        Order as in SGLang/vLLM: repetition (divide positive / multiply negative logits of seen
        tokens), then frequency (count-weighted) and presence (seen-once) subtraction.
        """
        sub = logits.index_select(0, self.rows)
        seen = self.counts > 0
        if self.repetition is not None:
            scaled = torch.where(sub > 0, sub / self.repetition, sub * self.repetition)
            sub = torch.where(seen, scaled, sub)
        sub = sub - self.frequency * self.counts - self.presence * seen.to(sub.dtype)
        logits.index_copy_(0, self.rows, sub)


def suppress_tokens(logits: torch.Tensor, banned: Sequence[Sequence[int] | None]) -> None:
    """Set logits of banned token ids to -inf in place, per row (None = nothing banned).

    Used for min_new_tokens: eos and stop token ids are banned until enough tokens exist.
    """
    rows: list[int] = []
    cols: list[int] = []
    for i, ids in enumerate(banned):
        if ids:
            rows.extend([i] * len(ids))
            cols.extend(ids)
    if rows:
        logits[torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device)] = float("-inf")
