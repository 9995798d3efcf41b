"""Log-probability helpers: chosen tokens (output and prompt positions) and top alternatives.

Both take the ORIGINAL logits (the model's output, before penalties, constraint masks,
temperature and top-k/top-p/min-p), so a logprob describes the model, not the sampling settings.
Select scoring builds on the prompt positions' values (``ModelRunner`` collects them into
``SamplingState.prompt_logprobs``); SGLang's normalizations (token-length normalized, greedy,
unconditional-likelihood normalized) are computed from these per-token values.
"""
from __future__ import annotations

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
