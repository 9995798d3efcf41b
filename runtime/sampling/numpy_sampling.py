"""Sampling in numpy, for the torch-free engine (``engine/native_engine.py``): one logits row at a
time, the rules of the torch sampler (``sampler.py``, ``penalties.py``, ``logprobs.py``) without
torch. A seeded request draws from its own numpy generator, so its tokens repeat per seed but are
not the torch engine's draws.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .sampling_params import SamplingParams
from .token_result import TokenResult


def sample_token(logits: np.ndarray, p: SamplingParams, rng: np.random.Generator) -> int:
    """One token from a float32 logits row: greedy at temperature 0 (or top_k 1), else drawn from
    the softmax at ``temperature`` restricted by top_k, top_p and min_p."""
    if p.temperature == 0.0 or p.top_k == 1:
        return int(np.argmax(logits))
    x = logits.astype(np.float64) / p.temperature
    ids = np.arange(x.shape[0])
    if 0 < p.top_k < x.shape[0]:
        ids = np.argpartition(-x, p.top_k - 1)[:p.top_k]
    order = ids[np.argsort(-x[ids], kind="stable")]
    probs = np.exp(x[order] - x[order[0]])
    probs /= probs.sum()
    keep = probs.shape[0]
    if p.top_p < 1.0:  # NOTE: the smallest head whose mass reaches top_p (the first token always stays)
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1)
    if p.min_p > 0.0:
        keep = min(keep, max(1, int((probs >= p.min_p * probs[0]).sum())))
    head = probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(keep, p=head)])


def apply_penalties(logits: np.ndarray, p: SamplingParams, output_ids: Sequence[int]) -> np.ndarray:
    """``logits`` with the output tokens' penalties, in SGLang's and vLLM's order (the torch
    engine's ``sampling/penalties.py``): repetition (divide positive / multiply negative logits of
    seen tokens), then frequency (per occurrence) and presence (once) subtracted."""
    if not output_ids:
        return logits
    counts = np.bincount(np.asarray(output_ids, np.int64), minlength=logits.shape[0])[:logits.shape[0]].astype(np.float32)
    seen = counts > 0
    out = logits.astype(np.float32, copy=True)
    if p.repetition_penalty != 1.0:
        rep = np.float32(p.repetition_penalty)
        out = np.where(seen, np.where(out > 0, out / rep, out * rep), out).astype(np.float32)
    return (out - np.float32(p.frequency_penalty) * counts - np.float32(p.presence_penalty) * seen).astype(np.float32)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float32 log-probabilities of a logits row (what the torch engine's logprobs report)."""
    x = logits.astype(np.float32)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum(dtype=np.float32)))


def choose_token(logits: np.ndarray, p: SamplingParams, rng: np.random.Generator, output_ids: Sequence[int],
                 eos_token_ids: Sequence[int]) -> TokenResult:
    """A request's next token from its logits row: penalties over ``output_ids`` (its tokens so
    far), no stop token before ``min_new_tokens`` (EOS too unless ``ignore_eos``), then
    ``sample_token``; logprobs, when asked, of the model's own logits before any ban (the torch
    engine's rule)."""
    row = apply_penalties(logits, p, output_ids) if p.has_penalties else logits
    if len(output_ids) < p.min_new_tokens:
        banned = [t for t in (*([] if p.ignore_eos else eos_token_ids), *p.stop_token_ids) if t < row.shape[0]]
        row = row.copy()
        row[banned] = -np.inf
    token = sample_token(row, p, rng)
    lp = top = None
    if p.return_logprob:
        logp = log_softmax(logits)
        lp = float(logp[token])
        if p.top_logprobs_num:
            k = min(p.top_logprobs_num, logp.shape[0])
            best = np.argsort(-logp, kind="stable")[:k]
            top = [(int(t), float(logp[t])) for t in best]
    return TokenResult(token, lp, top, None)
