"""Waiting-queue policies: which waiting requests the scheduler tries to admit first.

- ``lpm``: longest cached prefix first (ties keep queue order), with in-batch prefix dedup.
  Above ``lpm_max_queue`` waiting requests it falls back to queue order (matching every request
  every step would cost more than it saves).
- ``fcfs``: queue order (retracted requests are put back at the front).
- ``random``: a seeded shuffle, a baseline for comparisons.
"""
from __future__ import annotations

import random
from typing import Sequence

from ..cache.radix_cache import RadixCache
from ..cache.token_prefix import common_prefix_len
from .request import Req

POLICIES = ("lpm", "fcfs", "random")


class SchedulePolicy:
    """Orders the waiting queue; never changes the cache's contents or locks."""

    def __init__(self, name: str, tree_cache: RadixCache, seed: int = 0, lpm_max_queue: int = 128):
        if name not in POLICIES:
            raise ValueError(f"unknown schedule policy {name!r}; choose one of {POLICIES}")
        self.name = name
        self.tree_cache = tree_cache
        self.lpm_max_queue = lpm_max_queue
        self._rng = random.Random(seed)

    @property
    def dedups_in_batch(self) -> bool:
        """Whether admission should hold back requests whose prefix is computed this step."""
        return self.name == "lpm" and not self.tree_cache.disable

    def order(self, waiting: Sequence[Req]) -> list[Req]:
        """The waiting requests in the order admission should try them."""
        if self.name == "random":
            out = list(waiting)
            self._rng.shuffle(out)
            return out
        if self.name == "fcfs" or self.tree_cache.disable or len(waiting) > self.lpm_max_queue:
            return list(waiting)
        lens = {id(r): self.tree_cache.peek_prefix_len(r.fill_ids) for r in waiting}
        return sorted(waiting, key=lambda r: -lens[id(r)])  # NOTE: sorted() is stable


class InBatchPrefixDedup:
    """Tracks the token sequences this step will compute.

    A candidate is held back when it shares at least ``threshold`` tokens beyond its own cached
    prefix with a sequence already being computed: once that request has inserted its prefix,
    the candidate gets those tokens from the cache instead of computing them a second time.
    """

    __slots__ = ("threshold", "_seqs")

    def __init__(self, threshold: int):
        self.threshold = threshold
        self._seqs: list[list[int]] = []

    def add(self, token_ids: list[int]) -> None:
        self._seqs.append(token_ids)

    def should_hold(self, token_ids: list[int], cached_len: int) -> bool:
        return any(
            common_prefix_len(token_ids, s) - cached_len >= self.threshold for s in self._seqs
        )
