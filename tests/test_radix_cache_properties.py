"""Stateful property test: random insert/match/lock/unlock/evict and request lifecycles
against an independent model of the cache (prefix -> slot) and of the allocator (free set).

After every step: check_integrity() holds, the pool's free set equals the model's, every
match agrees with the model, and locked prefixes survive eviction. At teardown, unlocking and
evicting everything returns every slot to the pool.
"""
from types import SimpleNamespace

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sglc_runtime.cache.kv_pool import KVSlotPool
from sglc_runtime.cache.radix_cache import RadixCache
from sglc_runtime.cache.req_slot_table import ReqSlotTable
from sglc_runtime.scheduling.request import Req

NUM_SLOTS = 48
tokens = st.lists(st.integers(0, 3), min_size=1, max_size=9)


class RadixCacheMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.pool = KVSlotPool(NUM_SLOTS, debug=True)
        self.cache = RadixCache(self.pool)
        self.table = ReqSlotTable(4, 32)
        self.model: dict[tuple[int, ...], int] = {}  # cached prefix -> slot of its last token
        self.free: set[int] = set(range(NUM_SLOTS))  # the allocator model
        self.locks: list[tuple[object, list[int]]] = []  # (node, ids) of test-held locks
        self.reqs: dict[str, tuple[Req, list[int]]] = {}  # rid -> (req, model of its row)
        self.next_rid = 0

    # --- model helpers -------------------------------------------------------------------------
    def model_match(self, ids: list[int]) -> list[int]:
        out = []
        for i in range(len(ids)):
            slot = self.model.get(tuple(ids[: i + 1]))
            if slot is None:
                break
            out.append(slot)
        return out

    def alloc(self, n: int) -> list[int] | None:
        if not self.pool.can_alloc(n):
            self.evict_tracked(n - self.pool.num_free)
        if not self.pool.can_alloc(n):
            return None
        got = self.pool.alloc(n).tolist()
        assert set(got) <= self.free, "alloc handed out a slot the model thinks is used"
        self.free -= set(got)
        return got

    def evict_tracked(self, n: int) -> None:
        before = set(self.cache.all_slots().tolist())
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(n)
        gone = before - set(self.cache.all_slots().tolist())
        assert len(gone) == freed >= min(n, evictable)
        assert not gone & self.free, "evict freed a slot that was already free"
        self.free |= gone
        self.model = {k: v for k, v in self.model.items() if v not in gone}
        for node, ids in self.locks:
            assert len(self.model_match(ids)) == len(ids), "a locked prefix was evicted"
        for req, row in self.reqs.values():
            p = req.prefix_indices.numel()
            assert self.model_match(req.fill_ids[:p]) == row[:p], "a request's locked prefix was evicted"

    def settle_request_tokens(self, req: Req, row: list[int]) -> None:
        """Model of insert + free duplicates for a request's computed tokens."""
        ids = req.fill_ids[: req.kv_len]
        for i in range(req.prefix_indices.numel(), req.kv_len):
            key = tuple(ids[: i + 1])
            if key in self.model:
                self.free.add(row[i])
                row[i] = self.model[key]
            else:
                self.model[key] = row[i]

    # --- rules -----------------------------------------------------------------------------------
    @rule(ids=tokens)
    def insert(self, ids):
        slots = self.alloc(len(ids))
        if slots is None:
            return
        expected_present = len(self.model_match(ids))
        present = self.cache.insert(ids, self.pool_tensor(slots))
        assert present == expected_present
        self.pool.free(self.pool_tensor(slots[:present]))
        self.free |= set(slots[:present])
        for i in range(present, len(ids)):
            self.model[tuple(ids[: i + 1])] = slots[i]

    @rule(ids=tokens)
    def match(self, ids):
        m = self.cache.match_prefix(ids)
        assert m.slots.tolist() == self.model_match(ids)

    @rule(ids=tokens)
    def lock(self, ids):
        m = self.cache.match_prefix(ids)
        self.cache.inc_lock(m.last_node)
        self.locks.append((m.last_node, ids[: m.prefix_len]))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        i = data.draw(st.integers(0, len(self.locks) - 1))
        node, _ = self.locks.pop(i)
        self.cache.dec_lock(node)

    @rule(n=st.integers(0, NUM_SLOTS))
    def evict(self, n):
        self.evict_tracked(n)

    @precondition(lambda self: self.table.can_alloc_row())
    @rule(ids=tokens)
    def start_request(self, ids):
        req = Req(f"r{self.next_rid}", ids, SimpleNamespace(max_new_tokens=8, ignore_eos=False))
        self.next_rid += 1
        m = self.cache.match_prefix(ids)
        self.cache.inc_lock(m.last_node)
        new = self.alloc(len(ids) - m.prefix_len)
        if new is None:
            self.cache.dec_lock(m.last_node)
            return
        req.req_row = self.table.alloc_row()
        self.table.write(req.req_row, 0, m.slots)
        self.table.write(req.req_row, m.prefix_len, self.pool_tensor(new))
        req.prefix_indices, req.last_node, req.kv_len = m.slots, m.last_node, len(ids)
        self.reqs[req.rid] = (req, m.slots.tolist() + new)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), extra=tokens)
    def extend_request(self, data, extra):
        req, row = self.reqs[data.draw(st.sampled_from(sorted(self.reqs)))]
        if req.kv_len + len(extra) > self.table.max_context:
            return
        new = self.alloc(len(extra))
        if new is None:
            return
        self.table.write(req.req_row, req.kv_len, self.pool_tensor(new))
        req.output_ids.extend(extra)
        req.kv_len += len(extra)
        row.extend(new)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def cache_unfinished(self, data):
        req, row = self.reqs[data.draw(st.sampled_from(sorted(self.reqs)))]
        self.settle_request_tokens(req, row)
        self.cache.cache_unfinished_req(req, self.table)
        assert req.prefix_indices.tolist() == row
        assert self.table.read(req.req_row, 0, req.kv_len).tolist() == row

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def finish_request(self, data):
        rid = data.draw(st.sampled_from(sorted(self.reqs)))
        req, row = self.reqs.pop(rid)
        self.settle_request_tokens(req, row)
        self.cache.cache_finished_req(req, self.table)
        assert req.req_row is None

    # --- invariants --------------------------------------------------------------------------------
    @invariant()
    def consistent(self):
        self.cache.check_integrity()
        self.pool.check_integrity()
        assert set(self.pool._stack[: self.pool._top].tolist()) == self.free
        assert set(self.cache.all_slots().tolist()) == set(self.model.values())
        owned = [s for req, row in self.reqs.values() for s in row[req.prefix_indices.numel():]]
        assert len(owned) == len(set(owned)) and not set(owned) & (self.free | set(self.model.values()))
        assert len(owned) + len(self.model) + len(self.free) == NUM_SLOTS, "a slot leaked"
        for req, row in self.reqs.values():
            assert self.table.read(req.req_row, 0, req.kv_len).tolist() == row

    def teardown(self):
        for node, _ in self.locks:
            self.cache.dec_lock(node)
        self.locks.clear()
        for rid in sorted(self.reqs):
            req, row = self.reqs.pop(rid)
            self.settle_request_tokens(req, row)
            self.cache.cache_finished_req(req, self.table)
        assert self.cache.protected_size() == 0
        self.evict_tracked(NUM_SLOTS)
        assert self.cache.total_size() == 0
        assert self.pool.num_free == NUM_SLOTS and self.free == set(range(NUM_SLOTS))
        self.pool.check_integrity()

    @staticmethod
    def pool_tensor(slots: list[int]):
        import torch

        return torch.tensor(slots, dtype=torch.int64)


RadixCacheMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_radix_cache_state_machine = RadixCacheMachine.TestCase
