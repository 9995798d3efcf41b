"""ScheduleBatch: the scheduler's plan for one forward step (no tensors beyond slot indices).

Each entry says, for one request: which tokens to feed, on top of how many tokens already in
the KV buffer, into which new slots, and the slots of the whole sequence. Prefill chunks and
decodes share one batch (continuous batching); the model runner turns the plan into a
``ForwardBatch`` and returns one sampled token per entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .request import Req


class ScheduledReq(NamedTuple):
    """One request's part of a step.

    - ``input_ids``: tokens to feed (``fill_ids[prefix_len : prefix_len + extend_len]``).
    - ``prefix_len``: tokens of the request already in the KV buffer (cached or computed).
    - ``new_slots``: ``LongTensor[extend_len]``, where the new tokens' KV goes (out_cache_loc).
    - ``kv_indices``: ``LongTensor[prefix_len + extend_len]``, the slots of ALL the request's
      tokens in order; its tail equals ``new_slots``. A view of the request's table row, valid
      until ``process_results`` of this batch.
    - ``samples``: True when the last token's logits pick the request's next token; False for a
      non-final prefill chunk (its sampled token is ignored).
    - ``is_prefill``: True for a prefill (or a chunk of one), False for a decode.
    """

    req: Req
    input_ids: list[int]
    prefix_len: int
    new_slots: torch.Tensor
    kv_indices: torch.Tensor
    samples: bool
    is_prefill: bool

    @property
    def extend_len(self) -> int:
        return len(self.input_ids)


@dataclass(slots=True)
class ScheduleBatch:
    """The plan: prefill entries first (continuing chunks, then new admissions), then decodes.

    ``process_results`` expects one next-token id per entry, in this order.
    """

    reqs: list[ScheduledReq]

    def __len__(self) -> int:
        return len(self.reqs)

    @property
    def extend_lens(self) -> list[int]:
        return [len(e.input_ids) for e in self.reqs]

    @property
    def prefix_lens(self) -> list[int]:
        return [e.prefix_len for e in self.reqs]

    @property
    def kv_indices(self) -> list[torch.Tensor]:
        return [e.kv_indices for e in self.reqs]

    @property
    def input_ids(self) -> list[int]:
        """All new tokens, request-major."""
        return [t for e in self.reqs for t in e.input_ids]

    @property
    def positions(self) -> list[int]:
        """Each new token's position in its sequence, request-major."""
        return [p for e in self.reqs for p in range(e.prefix_len, e.prefix_len + len(e.input_ids))]

    @property
    def out_cache_loc(self) -> torch.Tensor:
        """The new tokens' slots, request-major."""
        return torch.cat([e.new_slots for e in self.reqs])

    @property
    def num_tokens(self) -> int:
        return sum(len(e.input_ids) for e in self.reqs)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(len(e.input_ids) for e in self.reqs if e.is_prefill)

    @property
    def num_prefills(self) -> int:
        return sum(1 for e in self.reqs if e.is_prefill)
