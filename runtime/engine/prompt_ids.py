"""Prompts as the engine takes them (text or token ids) -> validated token ids.

Also the token spans ``Engine.score`` feeds: each continuation's tokens after the prompt.
"""
from __future__ import annotations

import sys
from typing import Sequence

from ..cache.token_prefix import common_prefix_len

Prompt = str | Sequence[int]


def to_token_ids(prompt: Prompt, tokenizer, vocab_size: int) -> list[int]:
    """The prompt's token ids: text is encoded, ids are checked against the vocabulary.
    Raises TypeError (not text / ids) or ValueError (empty, out-of-vocabulary ids)."""
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, (list, tuple)) or _is_torch_vector(prompt):
        ids = [int(t) for t in prompt]
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary ({vocab_size})")
    else:
        raise TypeError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("prompt is empty: it must have at least one token")
    return ids


def continuation_spans(prompt: Prompt, prompt_ids: list[int], continuations: Sequence[Prompt],
                       tokenizer, vocab_size: int) -> list[tuple[list[int], int]]:
    """``(full_ids, start)`` per continuation: ``full_ids[start:]`` are its tokens after the prompt.

    Text continuations of a text prompt are tokenized together with it; their tokens start
    where that tokenization departs from the prompt's own (never at 0: position 0 has no
    logprob). Raises ValueError for a continuation that adds no token.
    """
    spans = []
    for c in continuations:
        if isinstance(prompt, str) and isinstance(c, str):
            full = to_token_ids(prompt + c, tokenizer, vocab_size)
        else:
            full = prompt_ids + to_token_ids(c, tokenizer, vocab_size)
        start = max(common_prefix_len(prompt_ids, full), 1)  # NOTE: position 0 has no logprob
        if start >= len(full):
            raise ValueError(f"continuation {c!r} adds no token to score after the prompt's first token")
        spans.append((full, start))
    return spans


def _is_torch_vector(prompt) -> bool:
    """A 1-D torch tensor of ids (torch is not imported for this: the torch-free engine reads
    prompts too, and a tensor can only exist where torch already is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(prompt, torch.Tensor) and prompt.dim() == 1
