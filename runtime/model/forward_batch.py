"""ForwardBatch: the one contract between the model runner and the model.

A forward step runs some new tokens for each of several requests. Each request already has
``prefix_len`` tokens in the KV buffer and adds ``extend_len`` new ones (``extend_len == 1`` is a
decode step; larger is a prefill or a chunk of one). Tokens of all requests are concatenated,
request-major, into flat tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch


@dataclass(slots=True)
class ForwardBatch:
    """Inputs of one ``Model.forward`` call.

    Attributes:
        input_ids: ``LongTensor[T]``, the new tokens of all requests, concatenated request-major.
        positions: ``LongTensor[T]``, each new token's position in its sequence
            (``prefix_len .. prefix_len + extend_len - 1`` for each request).
        out_cache_loc: ``LongTensor[T]``, the KV slot each new token's key/value is written to.
        extend_lens: new tokens per request (1 for decode).
        prefix_lens: tokens of each request already in the KV buffer before this step.
        kv_indices: per request, ``LongTensor[prefix_len + extend_len]``: the slots of ALL of
            the request's tokens in sequence order. NOTE: its last ``extend_len`` entries equal
            that request's part of ``out_cache_loc``.
        logits_start: per request, the index within its extend from which logits are returned
            (default ``extend_len - 1``: the last token only).

    ``Model.forward`` returns float32 logits of shape
    ``[sum(extend_len - logits_start), vocab]``, request-major.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    extend_lens: list[int]
    prefix_lens: list[int]
    kv_indices: list[torch.Tensor]
    logits_start: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.extend_lens)
        if not self.logits_start:
            self.logits_start = [e - 1 for e in self.extend_lens]
        if not (len(self.prefix_lens) == len(self.kv_indices) == len(self.logits_start) == n):
            raise ValueError(
                f"ForwardBatch: per-request lists differ in length: extend_lens={n}, "
                f"prefix_lens={len(self.prefix_lens)}, kv_indices={len(self.kv_indices)}, "
                f"logits_start={len(self.logits_start)}"
            )
        if n == 0:
            raise ValueError("ForwardBatch: a batch needs at least one request")
        total = sum(self.extend_lens)
        for name in ("input_ids", "positions", "out_cache_loc"):
            t = getattr(self, name)
            if t.dim() != 1 or t.numel() != total:
                raise ValueError(
                    f"ForwardBatch.{name}: expected a 1-D tensor of {total} tokens "
                    f"(sum of extend_lens), got shape {tuple(t.shape)}"
                )
        for i, (e, p, kv, s) in enumerate(
            zip(self.extend_lens, self.prefix_lens, self.kv_indices, self.logits_start)
        ):
            if e < 1 or p < 0:
                raise ValueError(f"request {i}: extend_len={e} must be >= 1, prefix_len={p} >= 0")
            if kv.dim() != 1 or kv.numel() != p + e:
                raise ValueError(
                    f"request {i}: kv_indices has {kv.numel()} slots, expected "
                    f"prefix_len + extend_len = {p + e}"
                )
            if not 0 <= s < e:
                raise ValueError(f"request {i}: logits_start={s} not in [0, extend_len={e})")

    @classmethod
    def from_requests(
        cls,
        new_token_ids: Sequence[Sequence[int]],
        kv_indices: Sequence[Sequence[int] | torch.Tensor],
        prefix_lens: Sequence[int] | None = None,
        logits_start: Sequence[int] | None = None,
        device: torch.device | str = "cpu",
    ) -> "ForwardBatch":
        """Build a batch from per-request lists.

        ``new_token_ids[i]`` are request i's new tokens; ``kv_indices[i]`` the slots of all its
        tokens (prefix then new). ``prefix_lens`` defaults to ``len(kv_indices[i]) -
        len(new_token_ids[i])``. Positions and ``out_cache_loc`` are derived.
        """
        extend_lens = [len(t) for t in new_token_ids]
        kv = [
            torch.as_tensor(k, dtype=torch.long, device=device).reshape(-1) for k in kv_indices
        ]
        if prefix_lens is None:
            prefix_lens = [k.numel() - e for k, e in zip(kv, extend_lens)]
        prefix_lens = list(prefix_lens)
        if len(kv) != len(extend_lens) or len(prefix_lens) != len(extend_lens):
            raise ValueError("from_requests: new_token_ids, kv_indices, prefix_lens differ in length")
        flat_ids = [t for toks in new_token_ids for t in toks]
        positions = [p + j for p, e in zip(prefix_lens, extend_lens) for j in range(e)]
        input_ids = torch.tensor(flat_ids, dtype=torch.long, device=device)
        pos = torch.tensor(positions, dtype=torch.long, device=device)
        if any(k.numel() != p + e for k, p, e in zip(kv, prefix_lens, extend_lens)):
            raise ValueError("from_requests: each kv_indices[i] needs prefix_len + extend_len slots")
        out_loc = torch.cat([k[p:] for k, p in zip(kv, prefix_lens)])
        return cls(
            input_ids=input_ids,
            positions=pos,
            out_cache_loc=out_loc,
            extend_lens=extend_lens,
            prefix_lens=prefix_lens,
            kv_indices=kv,
            logits_start=list(logits_start) if logits_start is not None else [],
        )

    @property
    def batch_size(self) -> int:
        """Number of requests."""
        return len(self.extend_lens)

    @property
    def num_tokens(self) -> int:
        """Number of new tokens (T)."""
        return int(self.input_ids.numel())

    @property
    def is_decode(self) -> bool:
        """True when every request adds exactly one token."""
        return all(e == 1 for e in self.extend_lens)

    @property
    def seq_lens(self) -> list[int]:
        """Per request, prefix_len + extend_len."""
        return [p + e for p, e in zip(self.prefix_lens, self.extend_lens)]

    @property
    def num_logits(self) -> int:
        """Rows of the logits ``Model.forward`` returns."""
        return sum(e - s for e, s in zip(self.extend_lens, self.logits_start))
