"""RequestSlots: a native-engine request's KV slots, from admission to release.

A request's positions live in slots of the engine's ``KVSlotPool``. The leading ones come from the
radix cache (the longest cached prefix of its prompt, locked while the request runs), the rest are
reserved from the pool at admission, whole (prompt + max_new_tokens: an admitted request always
finishes). Once its prompt is prefilled the prompt is cached (the lock moves to where it ends), and
at its end its computed tokens are inserted, with its program hint, and every slot it did not
hand to the tree goes back. The torch engine's ``cache_unfinished_req`` / ``cache_finished_req``
rules, over the numpy slot arrays; the engine (native_engine.py) decides who is admitted when.
"""
from __future__ import annotations

import numpy as np

from ..cache.kv_pool import KVSlotPool
from ..cache.radix_cache import MatchResult, RadixCache
from .native_step import NativeRequest


class RequestSlots:
    """Slots of running requests over one pool and its radix cache."""

    def __init__(self, pool: KVSlotPool, tree: RadixCache) -> None:
        self.pool = pool
        self.tree = tree

    def reusable_prefix(self, req: NativeRequest) -> list[int]:
        """The prompt tokens ``req`` may take from the cache: all but the last (its row samples),
        and none whose row gives a prompt logprob."""
        usable = req.num_prompt - 1 if req.prompt_logprobs is None else min(req.num_prompt - 1, req.logprob_rows[0])
        return req.tokens[:usable]

    def lock_prefix(self, prefix: list[int]) -> MatchResult:
        """The cached part of ``prefix``, locked (``take`` keeps or drops the lock)."""
        match = self.tree.match_prefix(prefix)
        self.tree.inc_lock(match.last_node)
        return match

    def room(self) -> int:
        """Slots a request could get now: free ones plus unlocked cached ones."""
        return self.pool.num_free + self.tree.evictable_size()

    def take(self, req: NativeRequest, match: MatchResult, need: int, room: int) -> bool:
        """Give ``req`` the locked ``match`` and ``need`` new slots, evicting unlocked cached
        prefixes for them (in the hints' order) while ``need`` fits ``room`` (``room()`` less what
        the caller holds back). False, the lock dropped and nothing else changed, when it does not."""
        if need <= room and need > self.pool.num_free:
            self.tree.evict(need - self.pool.num_free)
        if need > min(room, self.pool.num_free):
            self.tree.dec_lock(match.last_node)
            return False
        req.slots = match.slots.tolist() + self.pool.alloc(need).tolist()
        req.computed = req.cached = req.locked = match.prefix_len
        req.last_node = match.last_node
        return True

    def cache_prompt(self, req: NativeRequest) -> None:
        """``req``'s prompt is prefilled: cache it now, while it decodes (the torch engine's
        ``cache_unfinished_req``): insert it, give back the slots the tree already held, take the
        tree's slots for them and move the lock to where the prompt ends."""
        n = req.num_prompt
        slots = np.asarray(req.slots[:n], np.int64)
        present = self.tree.insert(req.tokens[:n], slots)
        assert present >= req.locked, f"{req.rid}: its locked prefix left the tree"
        self.pool.free(slots[req.locked:present])
        match = self.tree.match_prefix(req.tokens[:n])
        assert match.prefix_len == n, f"{req.rid}: re-match found {match.prefix_len}/{n}"
        req.slots[req.locked:n] = match.slots[req.locked:n].tolist()
        self.tree.inc_lock(match.last_node)
        self.tree.dec_lock(req.last_node)
        req.locked, req.last_node = n, match.last_node

    def release(self, req: NativeRequest, keep_kv: bool) -> None:
        """The radix cache's rule (``cache_finished_req``): insert the computed tokens, free the
        request's own duplicates of what was already cached and every slot it did not use.
        ``keep_kv``: its K/V are whole (not after a failed step)."""
        slots = np.asarray(req.slots, np.int64)
        kept = req.computed if keep_kv else req.locked
        # NOTE: a failed or aborted call's text is not what its program will extend: no hint for it
        hint = req.hint if keep_kv and not req.aborted else None
        present = self.tree.insert(req.tokens[:kept], slots[:kept], hint=hint, rank=req.program_rank) if kept else 0
        assert present >= req.locked, f"{req.rid}: its locked prefix left the tree"
        self.pool.free(np.concatenate([slots[req.locked:present], slots[kept:]]))
        self.tree.dec_lock(req.last_node)
        req.slots, req.last_node = [], None
