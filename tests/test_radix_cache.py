"""RadixCache unit tests: match/split, insert, locks, LRU eviction, reset, disable, lifecycle."""
from types import SimpleNamespace

import pytest
import torch

from sglc_runtime.cache.kv_pool import KVSlotPool
from sglc_runtime.cache.radix_cache import RadixCache
from sglc_runtime.cache.token_prefix import common_prefix_len
from sglc_runtime.cache.req_slot_table import ReqSlotTable
from sglc_runtime.scheduling.request import Req


def make_cache(num_slots: int = 64, disable: bool = False) -> RadixCache:
    return RadixCache(KVSlotPool(num_slots, debug=True), disable=disable)


def put(cache: RadixCache, ids: list[int]) -> torch.Tensor:
    """Insert ids with fresh slots the way a request would; returns the slots now cached."""
    slots = cache.pool.alloc(len(ids))
    present = cache.insert(ids, slots)
    cache.pool.free(slots[:present])
    cache.check_integrity()
    return cache.match_prefix(ids).slots


def test_common_prefix_len_matches_naive_loop():
    """common_prefix_len equals a plain element-by-element scan."""
    cases = [([], [1]), ([1, 2, 3], [1, 2, 3]), ([1, 2, 3], [1, 2, 4]), ([5], [6]),
             (list(range(100)), list(range(57)) + [0] * 10), ([1, 2], [1, 2, 3])]
    for a, b in cases:
        naive = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert common_prefix_len(a, b) == naive


def test_match_on_empty_cache_returns_nothing_at_root():
    """An empty cache matches zero tokens and ends at the root."""
    cache = make_cache()
    m = cache.match_prefix([1, 2, 3])
    assert m.prefix_len == 0 and m.last_node is cache.root


def test_insert_then_match_returns_the_inserted_slots():
    """A full match returns exactly the slots inserted, in order."""
    cache = make_cache()
    slots = cache.pool.alloc(4)
    assert cache.insert([1, 2, 3, 4], slots) == 0
    m = cache.match_prefix([1, 2, 3, 4, 9])
    assert m.slots.tolist() == slots.tolist()
    assert cache.total_size() == cache.evictable_size() == 4
    cache.check_integrity()


def test_match_ending_mid_edge_splits_the_node():
    """A match that ends inside an edge splits it, so last_node ends exactly at the match."""
    cache = make_cache()
    slots = put(cache, [1, 2, 3, 4, 5])
    m = cache.match_prefix([1, 2, 3, 7])
    assert m.slots.tolist() == slots[:3].tolist()
    assert m.last_node.key == [1, 2, 3] and list(m.last_node.children) == [4]
    assert m.last_node.children[4].key == [4, 5]
    assert cache.total_size() == 5  # splitting moves no tokens
    cache.check_integrity()


def test_insert_returns_the_already_present_length():
    """insert returns how many leading tokens were cached; only the rest is added."""
    cache = make_cache()
    put(cache, [1, 2, 3, 4])
    slots = cache.pool.alloc(6)
    assert cache.insert([1, 2, 3, 9, 9, 9], slots) == 3
    assert cache.total_size() == 7
    cache.pool.free(slots[:3])  # the caller's duplicates
    assert cache.match_prefix([1, 2, 3, 9, 9, 9]).slots[3:].tolist() == slots[3:].tolist()
    cache.check_integrity()


def test_insert_of_cached_sequence_adds_nothing():
    """Re-inserting a fully cached sequence returns its full length and changes no size."""
    cache = make_cache()
    put(cache, [1, 2, 3])
    slots = cache.pool.alloc(2)
    assert cache.insert([1, 2], slots) == 2
    cache.pool.free(slots)
    assert cache.total_size() == 3
    cache.check_integrity()


def test_peek_prefix_len_changes_nothing():
    """peek_prefix_len reports the match length without splitting any node."""
    cache = make_cache()
    put(cache, [1, 2, 3, 4])
    assert cache.peek_prefix_len([1, 2, 9]) == 2 and cache.peek_prefix_len([1, 2, 3, 4, 5]) == 4
    assert list(cache.root.children[1].children) == []  # still one unsplit edge


def test_lock_moves_tokens_from_evictable_to_protected():
    """inc_lock protects the whole path to the root; dec_lock undoes it."""
    cache = make_cache()
    put(cache, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2, 3, 4])
    put(cache, [1, 2, 7])  # splits after [1, 2]: the locked path now has two nodes
    cache.inc_lock(m.last_node)
    assert cache.protected_size() == 4 and cache.evictable_size() == 1
    cache.check_integrity()
    cache.dec_lock(m.last_node)
    assert cache.protected_size() == 0 and cache.evictable_size() == 5
    with pytest.raises(RuntimeError, match="unbalanced"):
        cache.dec_lock(m.last_node)


def test_evict_frees_least_recently_used_leaves_first():
    """evict removes the leaf touched longest ago and returns its slots to the pool."""
    cache = make_cache()
    a = put(cache, [1, 1, 1])
    b = put(cache, [2, 2, 2])
    put(cache, [3, 3, 3])
    cache.match_prefix([1, 1, 1])  # a is now more recent than b
    free_before = cache.pool.num_free
    assert cache.evict(1) == 3  # a whole leaf goes
    assert cache.peek_prefix_len([2, 2, 2]) == 0  # b was evicted
    assert cache.peek_prefix_len([1, 1, 1]) == 3
    assert cache.pool.num_free == free_before + 3
    assert not cache.pool.is_used(b).any() and cache.pool.is_used(a).all()
    cache.check_integrity()


def test_evict_climbs_to_parents_that_become_leaves():
    """After a leaf goes, its parent becomes an eviction candidate."""
    cache = make_cache()
    put(cache, [1, 2, 3])
    put(cache, [1, 2, 4])  # [1,2] -> {[3], [4]}
    assert cache.evict(100) == 4 and cache.total_size() == 0
    assert cache.pool.num_free == 64
    cache.check_integrity()


def test_locked_nodes_are_never_evicted():
    """evict skips locked paths, even when asked for more than is evictable."""
    cache = make_cache()
    put(cache, [1, 2, 3])
    put(cache, [5, 6])
    m = cache.match_prefix([1, 2, 3])
    cache.inc_lock(m.last_node)
    assert cache.evict(10) == 2
    assert cache.match_prefix([1, 2, 3]).prefix_len == 3
    assert cache.evict(10) == 0 and cache.evict(0) == 0
    cache.check_integrity()


def test_evict_keeps_a_locked_parent_of_an_evicted_leaf():
    """A leaf below a locked node is evictable; the locked node stays."""
    cache = make_cache()
    put(cache, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2])  # split: [1,2] -> [3,4]
    cache.inc_lock(m.last_node)
    assert cache.evictable_size() == 2 and cache.evict(2) == 2
    assert cache.peek_prefix_len([1, 2, 3, 4]) == 2
    cache.check_integrity()


def test_reset_frees_everything_but_refuses_while_locked():
    """reset() returns all cached slots to the pool; it raises while a lock is held."""
    cache = make_cache()
    put(cache, [1, 2, 3])
    m = cache.match_prefix([1, 2, 3])
    cache.inc_lock(m.last_node)
    with pytest.raises(RuntimeError, match="locked"):
        cache.reset()
    cache.dec_lock(m.last_node)
    cache.reset()
    assert cache.total_size() == 0 and cache.pool.num_free == cache.pool.num_slots
    cache.check_integrity()


def test_disabled_cache_stores_nothing():
    """With disable=True, match finds nothing and insert keeps no slots."""
    cache = make_cache(disable=True)
    slots = cache.pool.alloc(3)
    assert cache.insert([1, 2, 3], slots) == 0
    assert cache.match_prefix([1, 2, 3]).prefix_len == 0
    assert cache.total_size() == 0 and cache.evict(5) == 0
    cache.check_integrity()


# --- request lifecycle helpers ---------------------------------------------------------------
def running_req(cache: RadixCache, table: ReqSlotTable, ids: list[int], rid: str = "r") -> Req:
    """A request admitted the way the scheduler does it: matched, locked, rest allocated."""
    req = Req(rid, ids, SimpleNamespace(max_new_tokens=4, ignore_eos=False))
    m = cache.match_prefix(ids)
    cache.inc_lock(m.last_node)
    req.req_row = table.alloc_row()
    table.write(req.req_row, 0, m.slots)
    table.write(req.req_row, m.prefix_len, cache.pool.alloc(len(ids) - m.prefix_len))
    req.prefix_indices, req.last_node, req.kv_len = m.slots, m.last_node, len(ids)
    return req


def test_cache_finished_req_frees_duplicates_and_unlocks():
    """Finishing caches the request's tokens, frees its duplicate slots, leaves nothing locked."""
    cache, table = make_cache(), ReqSlotTable(4, 32)
    a = running_req(cache, table, [1, 2, 3, 4], "a")
    b = running_req(cache, table, [1, 2, 3, 4, 5, 6], "b")  # computed [1..4] a second time
    used = cache.pool.num_used
    cache.cache_finished_req(a, table)
    cache.cache_finished_req(b, table)
    assert cache.pool.num_used == used - 4  # b's copies of [1..4] were freed
    assert cache.total_size() == 6 and cache.protected_size() == 0
    assert table.num_used_rows == 0 and a.req_row is None
    cache.check_integrity()


def test_cache_unfinished_req_moves_lock_and_rewrites_row():
    """After caching an unfinished request, its row holds the tree's slots and its lock
    covers all its computed tokens."""
    cache, table = make_cache(), ReqSlotTable(4, 32)
    a = running_req(cache, table, [1, 2, 3], "a")
    cache.cache_finished_req(a, table)
    b = Req("b", [1, 2, 3, 4, 5], SimpleNamespace(max_new_tokens=4, ignore_eos=False))
    b.last_node, b.req_row, b.kv_len = cache.root, table.alloc_row(), 5
    table.write(b.req_row, 0, cache.pool.alloc(5))  # b did not use the cache: all fresh
    cache.cache_unfinished_req(b, table)
    m = cache.match_prefix([1, 2, 3, 4, 5])
    assert table.read(b.req_row, 0, 5).tolist() == m.slots.tolist()
    assert b.prefix_indices.tolist() == m.slots.tolist()
    assert cache.protected_size() == 5 and cache.pool.num_used == 5
    cache.check_integrity()
    cache.cache_finished_req(b, table)
    assert cache.protected_size() == 0 and cache.evictable_size() == 5
    cache.check_integrity()


def test_disabled_cache_finished_req_frees_all_slots():
    """With the cache off, a finished request gives every slot back to the pool."""
    cache, table = make_cache(disable=True), ReqSlotTable(2, 16)
    r = running_req(cache, table, [1, 2, 3])
    cache.cache_unfinished_req(r, table)  # a no-op when disabled
    cache.cache_finished_req(r, table)
    assert cache.pool.num_used == 0 and table.num_used_rows == 0
