"""The slot pool and the radix cache over numpy arrays (the torch-free engine's) behave exactly as
over torch tensors (the torch engine's, whose own tests cover the rules): a random workload of
matches, locks, inserts, evictions and frees driven on both gives the same slots, the same
matches and the same counts at every step, and both pass their integrity checks."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from sglc_runtime.cache.kv_pool import KVSlotPool
from sglc_runtime.cache.radix_cache import RadixCache
from sglc_runtime.cache.slot_arrays import NumpySlots, TorchSlots


def both(n: int):
    return [RadixCache(KVSlotPool(n, debug=True, arrays=a)) for a in (TorchSlots(), NumpySlots())]


def as_list(slots) -> list[int]:
    return [int(s) for s in slots.tolist()]


@pytest.mark.parametrize("seed", range(4))
def test_numpy_and_torch_slots_run_the_same_workload_alike(seed):
    rng = random.Random(seed)
    caches = both(96)
    held: list[tuple[list, list[int]]] = []  # per running request: (locked node per cache, its own slots)
    for step in range(300):
        action = rng.random()
        if action < 0.55:  # a request: match, lock, take slots for the rest, insert when done
            ids = [rng.randrange(6) for _ in range(rng.randrange(1, 14))]
            matches = [c.match_prefix(ids) for c in caches]
            assert len({m.prefix_len for m in matches}) == 1
            assert as_list(matches[0].slots) == as_list(matches[1].slots)
            need = len(ids) - matches[0].prefix_len
            for c in caches:
                if c.pool.num_free < need:
                    c.evict(need - c.pool.num_free)
            if caches[0].pool.num_free < need:
                assert caches[1].pool.num_free < need
                continue
            nodes = []
            own = [c.pool.alloc(need) for c in caches]
            assert as_list(own[0]) == as_list(own[1])
            for c, m, o in zip(caches, matches, own):
                c.inc_lock(m.last_node)
                full = c.arrays.cat([m.slots, o])
                present = c.insert(ids, full)
                c.pool.free(full[matches[0].prefix_len:present])
                nodes.append(m.last_node)
            held.append((nodes, ids))
        elif held and action < 0.85:  # a request leaves
            nodes, _ = held.pop(rng.randrange(len(held)))
            for c, node in zip(caches, nodes):
                c.dec_lock(node)
        else:
            n = rng.randrange(1, 30)
            assert caches[0].evict(n) == caches[1].evict(n)
        assert caches[0].pool.num_free == caches[1].pool.num_free
        assert caches[0].evictable_size() == caches[1].evictable_size()
        assert sorted(as_list(caches[0].all_slots())) == sorted(as_list(caches[1].all_slots()))
        for c in caches:
            c.check_integrity()
            c.pool.check_integrity()
    assert isinstance(caches[1].all_slots(), np.ndarray) and isinstance(caches[0].all_slots(), torch.Tensor)


def test_numpy_pool_checks_frees_as_the_torch_one():
    pool = KVSlotPool(8, debug=True, arrays=NumpySlots())
    slots = pool.alloc(3)
    assert isinstance(slots, np.ndarray) and slots.dtype == np.int64
    with pytest.raises(ValueError, match="twice"):
        pool.free(np.array([slots[0], slots[0]]))
    pool.free(slots)
    with pytest.raises(ValueError, match="double free"):
        pool.free(slots[:1])
    pool.check_integrity()
