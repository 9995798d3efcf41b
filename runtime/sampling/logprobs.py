"""Log-probability helpers for output tokens, their top alternatives, and prompt tokens.

All of them take the ORIGINAL logits (the model's output, before penalties, constraint masks,
temperature and top-k/top-p/min-p), so a logprob describes the model, not the sampling settings.
Select scoring builds on `prompt_logprobs`: SGLang's normalizations (token-length normalized,
greedy, unconditional-likelihood normalized) are computed from these per-token values.
"""
from __future__ import annotations

from typing import Sequence

import torch


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits[i])[token_ids[i]] for each row: [N, V] x [N] -> [N] float32.

    `logits` must be the ORIGINAL logits, before temperature or any other processing.
    """
    logits = logits.float()
    picked = logits.gather(1, token_ids.view(-1, 1).to(logits.device, torch.long)).view(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def top_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most likely tokens per row of the ORIGINAL logits: (logprobs [N, k], ids [N, k])."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    values, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
    return values, ids


def shifted_logprobs(logits: torch.Tensor, ids: Sequence[int], first_position: int) -> torch.Tensor:
    """Teacher-forced logprobs: row j is the model's output at position first_position + j and
    predicts ids[first_position + j + 1]; rows with nothing left to predict are dropped.

    Returns [min(N, len(ids) - first_position - 1)] float32.
    """
    targets = list(ids[first_position + 1 : first_position + 1 + logits.shape[0]])
    if not targets:
        return torch.empty(0, dtype=torch.float32)
    target = torch.tensor(targets, dtype=torch.long, device=logits.device)
    return token_logprobs(logits[: len(targets)], target)


def prompt_logprobs(logits: torch.Tensor, prompt_ids: Sequence[int], start: int) -> list[float | None]:
    """Logprob of each prompt token at positions start .. L-1 given the tokens before it.

    `logits` holds the ORIGINAL logits of positions max(start - 1, 0) .. L - 2 (each predicts
    the next prompt token). Position 0 has no context, so its entry is None (as in SGLang).
    """
    if not 0 <= start < len(prompt_ids):
        raise ValueError(f"logprob start {start} is outside the prompt of {len(prompt_ids)} tokens")
    first = max(start - 1, 0)
    expected = len(prompt_ids) - 1 - first
    if logits.shape[0] != expected:
        raise ValueError(f"expected logits for {expected} prompt positions, got {logits.shape[0]}")
    values: list[float | None] = shifted_logprobs(logits, prompt_ids, first).tolist()
    return [None] + values if start == 0 else values
