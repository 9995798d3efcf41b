"""Program hints in the cache and the scheduler (issue 28), without the model.

Retention (runtime/cache/retention.py): eviction order under hints, leases, the capacity a
hostile client cannot pass, program end. Scheduling (runtime/scheduling/program_table.py):
in-flight programs' calls first, new programs kept off in-flight programs' texts. The runner is
test_scheduler's SlotCheckingRunner (every read slot must hold its own sequence's token), so a
bookkeeping bug shows as a wrong read, and hints must never change any output.
"""
import random

import pytest
import torch

from sglc.wire.program_hint import NEVER, ProgramHint
from sglc_runtime.cache.kv_pool import KVSlotPool
from sglc_runtime.cache.radix_cache import RadixCache
from sglc_runtime.cache.retention import RetentionTable
from sglc_runtime.scheduling.program_table import ProgramTable
from test_scheduler import SlotCheckingRunner, drain, make_sched, req, toks


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Finished:
    """What cache_finished_req reads of a request: its row, tokens, prefix lock and hint."""

    def __init__(self, ids, hint=None):
        self.req_row, self.kv_len, self.hint = None, len(ids), hint
        self.prefix_indices, self.last_node = torch.empty(0, dtype=torch.int64), None
        self._ids = list(ids)

    @property
    def fill_ids(self):
        return self._ids


def make_cache(slots=256, capacity=None, clock=None):
    pool = KVSlotPool(slots, debug=True)
    retention = RetentionTable(slots // 2 if capacity is None else capacity, clock=clock or FakeClock())
    return RadixCache(pool, retention=retention)


def finish(cache, table, ids, hint=None, rank=0):
    """A request computed ``ids`` (fresh slots, nothing cached before) and leaves with ``hint``."""
    r = Finished(ids, hint)
    r.program_rank = rank
    match = cache.match_prefix(ids)
    cache.inc_lock(match.last_node)
    r.prefix_indices, r.last_node = match.slots, match.last_node
    r.req_row = table.alloc_row()
    table.write(r.req_row, 0, match.slots)
    table.write(r.req_row, match.prefix_len, cache.pool.alloc(len(ids) - match.prefix_len))
    cache.cache_finished_req(r, table)


def cached(cache, ids) -> int:
    return cache.peek_prefix_len(ids)


@pytest.fixture
def table():
    from sglc_runtime.cache.req_slot_table import ReqSlotTable
    return ReqSlotTable(8, 256)


def seqs(n, length=10):
    # NOTE: distinct first tokens, so each is its own leaf under the root
    return [[i + 1] + toks(100 + i, length - 1) for i in range(n)]


def test_eviction_order_never_then_lru_unhinted_then_farthest_hint(table):
    cache = make_cache()
    a, b, c, d, e = seqs(5)
    finish(cache, table, a)  # unhinted, oldest
    finish(cache, table, b, ProgramHint("p1", next_use=0))
    finish(cache, table, c, ProgramHint("p2", next_use=5))
    finish(cache, table, d, ProgramHint("p3", next_use=NEVER))
    finish(cache, table, e)  # unhinted, newest
    order = []
    for _ in range(5):
        cache.evict(1)
        order.append(next(name for name, s in zip("abcde", (a, b, c, d, e)) if name not in order and cached(cache, s) == 0))
    assert order == ["d", "a", "e", "c", "b"]  # never-again, LRU among unhinted, farthest hint, nearest last
    cache.check_integrity()


def test_hinted_prefix_outlives_more_recent_unhinted_ones(table):
    cache = make_cache(slots=200)
    kept = seqs(1, 20)[0]
    finish(cache, table, kept, ProgramHint("agent", next_use=1))
    others = [[50 + i] + toks(i, 19) for i in range(8)]
    for s in others:  # all more recently used than `kept`
        finish(cache, table, s)
    cache.evict(8 * 20)
    assert cached(cache, kept) == 20
    assert all(cached(cache, s) == 0 for s in others)
    assert cache.retention.counts["evicted"] == 0


def test_expired_lease_is_plain_lru(table):
    clock = FakeClock()
    cache = make_cache(clock=clock)
    old, new = seqs(2)
    finish(cache, table, old, ProgramHint("p", next_use=0, lease_ms=1000))
    finish(cache, table, new)
    clock.now += 0.5
    cache.evict(1)
    assert cached(cache, old) == 10 and cached(cache, new) == 0  # lease running: the unhinted one goes
    finish(cache, table, new)
    clock.now += 1.0  # the lease ran out: `old` is the least recently used text now
    cache.evict(1)
    assert cached(cache, old) == 0 and cached(cache, new) == 10
    assert cache.retention.counts["evicted"] == 0  # not counted: its lease had ended
    assert cache.retention.pinned_tokens() == 0


def test_default_and_capped_leases():
    clock = FakeClock()
    table_ = RetentionTable(1000, default_lease_s=5, max_lease_s=20, clock=clock)
    cache = RadixCache(KVSlotPool(100), retention=table_)
    from sglc_runtime.cache.req_slot_table import ReqSlotTable
    t = ReqSlotTable(4, 64)
    a, b = seqs(2)
    finish(cache, t, a, ProgramHint("p", next_use=0))  # default lease: 5 s
    finish(cache, t, b, ProgramHint("q", next_use=0, lease_ms=10**6))  # asks 1000 s, gets 20 s
    clock.now += 6
    assert table_.pinned_tokens() == 10  # only q's text is still hinted
    clock.now += 15
    assert table_.pinned_tokens() == 0


def test_capacity_holds_against_many_hints_and_demotes_the_farthest(table):
    cache = make_cache(slots=400, capacity=50)
    rng = random.Random(0)
    uses = [rng.randrange(0, 100) for _ in range(30)]
    for i, use in enumerate(uses):
        finish(cache, table, [i + 1] + toks(i, 9), ProgramHint(f"p{i}", next_use=use))
        assert cache.retention.pinned_tokens() <= 50
        cache.check_integrity()
    assert cache.retention.pinned_tokens() == 50  # five 10-token texts
    kept = sorted(e.next_use for e in cache.retention._live.values() if e.protected)
    assert kept == sorted(uses)[:5]  # the nearest next uses win
    assert cache.retention.counts["capped"] == 25


def test_hints_over_the_capacity_go_before_unhinted_texts(table):
    """A client cannot take memory from clients without hints by sending more hints than fit."""
    cache = make_cache(slots=400, capacity=10)
    over, kept, plain = seqs(3)
    finish(cache, table, over, ProgramHint("a", next_use=0))
    finish(cache, table, plain)
    finish(cache, table, kept, ProgramHint("b", next_use=0))  # over the capacity: the older hint is demoted
    cache.evict(1)
    assert cached(cache, over) == 0 and cached(cache, plain) == 10 and cached(cache, kept) == 10
    cache.evict(1)
    assert cached(cache, plain) == 0 and cached(cache, kept) == 10


def test_shared_prefix_counts_once_towards_the_capacity(table):
    cache = make_cache(slots=400, capacity=40)
    shared = toks(7, 30)
    for i in range(5):  # five programs, one 30-token shared prefix + 2 tokens each
        finish(cache, table, shared + [i + 1, i + 2], ProgramHint(f"p{i}", next_use=0))
    assert cache.retention.pinned_tokens() == 30 + 5 * 2
    assert cache.retention.counts["capped"] == 0


def test_end_program_releases_and_sends_its_texts_first(table):
    cache = make_cache()
    a, b, c = seqs(3)
    finish(cache, table, a, ProgramHint("done", next_use=0))
    finish(cache, table, b, ProgramHint("done", next_use=2))
    finish(cache, table, c)  # unhinted, most recent... but the ended program's texts go first
    assert cache.retention.end_program("done") == 20
    assert cache.retention.end_program("done") == 0 and cache.retention.end_program("unknown") == 0
    cache.evict(20)
    assert cached(cache, a) == cached(cache, b) == 0 and cached(cache, c) == 10


def test_a_program_keeps_only_its_newest_text_on_one_path(table):
    """A chain (each call extends the last, the last never extended): one live hint at a time, and
    ending the program releases it all (the newest text replacing the program's only older one
    once lost the program's record, so end_program released nothing)."""
    cache = make_cache()
    first = toks(1, 10)
    finish(cache, table, first, ProgramHint("p", next_use=0))
    finish(cache, table, first + toks(2, 10), ProgramHint("p", next_use=0))
    assert len(cache.retention) == 1 and cache.retention.pinned_tokens() == 20
    finish(cache, table, first + toks(2, 10) + toks(3, 5), ProgramHint("p", next_use=NEVER))
    assert cache.retention.end_program("p") == 20
    assert cache.retention.pinned_tokens() == 0 and len(cache.retention) == 0


def test_hints_survive_splits_and_random_churn(table):
    """Random hinted and unhinted texts with shared prefixes, evictions and program ends: the
    tree stays consistent and the pinned tokens stay under the capacity."""
    rng = random.Random(3)
    cache = make_cache(slots=300, capacity=120)
    stems = [toks(s, 12) for s in range(4)]
    live = [f"p{i}" for i in range(6)]
    for it in range(300):
        ids = rng.choice(stems)[: rng.randrange(1, 12)] + toks(1000 + it, rng.randrange(1, 10))
        need = len(ids) - cache.peek_prefix_len(ids)
        if cache.pool.num_free < need:
            cache.evict(need - cache.pool.num_free)
        if cache.pool.num_free < need:
            continue
        hint = None if rng.random() < 0.3 else ProgramHint(rng.choice(live), next_use=rng.choice([NEVER, 0, 1, 3, 9]))
        finish(cache, table, ids, hint)
        if rng.random() < 0.05:
            cache.retention.end_program(rng.choice(live))
        assert cache.retention.pinned_tokens() <= 120
        cache.check_integrity()


# --- scheduling by program ----------------------------------------------------------------------
def hinted(rid, ids, pid, next_use=0, max_new=4):
    r = req(rid, ids, max_new)
    r.hint = ProgramHint(pid, next_use=next_use)
    return r


def test_in_flight_program_goes_before_new_programs():
    s = make_sched(max_running=1, policy="fcfs")
    runner = SlotCheckingRunner()
    s.add_request(hinted("a1", toks(1, 20), "A"))
    drain(s, runner)
    # B's first call queued before A's second one; A is in flight, so A goes first
    s.add_request(hinted("b1", toks(2, 20), "B"))
    s.add_request(hinted("a2", toks(1, 20) + toks(3, 5), "A"))
    batch = s.schedule()
    assert [e.req.rid for e in batch.reqs] == ["a2"]
    s.process_results(batch, runner(batch))
    drain(s, runner)


def test_without_hints_the_queue_policy_is_unchanged():
    table = ProgramTable()
    waiting = [req(f"r{i}", toks(i, 5)) for i in range(4)]
    assert table.order(waiting, list) == waiting


def test_new_program_does_not_take_in_flight_programs_texts():
    """A pool where program A's kept text leaves no room for B's first call while A runs."""
    s = make_sched(num_kv_slots=100, max_running=4, policy="fcfs", max_context=100)
    runner = SlotCheckingRunner()
    a_text = toks(1, 40)
    s.add_request(hinted("a1", a_text, "A", next_use=0, max_new=2))
    drain(s, runner)  # A's 41 tokens are cached and hinted
    s.add_request(hinted("c1", toks(9, 10), "C", max_new=2))  # a small call of another program: runs
    batch = s.schedule()
    assert [e.req.rid for e in batch.reqs] == ["c1"]
    s.process_results(batch, runner(batch))
    s.add_request(hinted("b1", toks(2, 50), "B", max_new=2))  # needs A's room while C runs: waits
    while s.running:
        batch = s.schedule()
        assert "b1" not in [e.req.rid for e in batch.reqs]
        s.process_results(batch, runner(batch))
    drain(s, runner)  # nothing running: B may take it now
    assert s.get_request("b1") is None


def test_end_program_forgets_the_program():
    s = make_sched()
    runner = SlotCheckingRunner()
    s.add_request(hinted("a1", toks(1, 20), "A"))
    drain(s, runner)
    assert "A" in s.programs and s.stats().hinted_tokens > 0
    assert s.end_program("A") > 0
    assert "A" not in s.programs and s.stats().hinted_tokens == 0


def test_program_table_is_bounded():
    clock = FakeClock()
    table = ProgramTable(max_programs=3, idle_s=10, clock=clock)
    for i in range(5):
        table.on_admitted(hinted(f"r{i}", [1], f"p{i}"), 5, 0)
    assert len(table) == 3 and "p0" not in table and "p4" in table
    clock.now += 11
    table.on_admitted(hinted("late", [1], "new"), 5, 0)
    assert len(table) == 1


def test_hints_never_change_outputs_under_memory_pressure():
    """Multi-step programs over a pool too small for all of them: the same tokens with and
    without hints (the runner's next token is a function of the sequence)."""
    def run(with_hints: bool):
        s = make_sched(num_kv_slots=160, max_running=4, max_context=160)
        runner = SlotCheckingRunner()
        texts = {p: toks(p, 30) for p in range(6)}
        outs = {}
        for step_no in range(3):
            for p in range(6):
                r = req(f"{p}-{step_no}", texts[p], max_new=5)
                if with_hints:
                    r.hint = ProgramHint(f"prog{p}", next_use=0 if step_no < 2 else NEVER)
                s.add_request(r)
            live = {f"{p}-{step_no}": p for p in range(6)}
            while s.has_work():
                batch = s.schedule()
                for r in s.process_results(batch, runner(batch)):
                    outs[r.rid] = list(r.output_ids)
                    texts[live[r.rid]] = r.fill_ids + toks(step_no * 10 + live[r.rid], 3)
            s.check_integrity()
        if with_hints:
            for p in range(6):
                s.end_program(f"prog{p}")
        return outs
    assert run(True) == run(False)


def test_equal_next_use_evicts_the_least_recently_used_text_first(table):
    cache = make_cache()
    first, second, third = seqs(3)
    for i, ids in enumerate((first, second, third)):
        finish(cache, table, ids, ProgramHint(f"p{i}", next_use=0))
    cache.match_prefix(first)
    cache.evict(1)
    assert cached(cache, second) == 0 and cached(cache, first) == cached(cache, third) == 10


def test_a_waiting_calls_text_goes_last(table):
    cache = make_cache()
    waiting, other, plain = seqs(3)
    finish(cache, table, waiting, ProgramHint("w", next_use=3))
    finish(cache, table, other, ProgramHint("o", next_use=0))
    finish(cache, table, plain)
    cache.retention.set_waiting(frozenset({"w"}))  # w's next call is queued right now
    cache.evict(20)
    assert cached(cache, waiting) == 10 and cached(cache, other) == cached(cache, plain) == 0


def test_a_late_call_of_an_ended_program_runs_unhinted():
    s = make_sched()
    runner = SlotCheckingRunner()
    s.add_request(hinted("a1", toks(1, 20), "A"))
    drain(s, runner)
    s.end_program("A")
    s.add_request(hinted("late", toks(1, 20) + toks(5, 4), "A"))  # in flight when its run timed out
    drain(s, runner)
    assert "A" not in s.programs and s.stats().hinted_tokens == 0


def test_families_learn_footprints_and_new_programs_wait_while_memory_is_tight():
    """After one run of a family grew from 22 tokens to 90, a pool of 200 slots runs two such
    programs at once; a third waits for one of them to end (while anything runs)."""
    s = make_sched(num_kv_slots=200, max_running=8, policy="fcfs", max_context=200)
    runner = SlotCheckingRunner()
    s.add_request(hinted("warm1", toks(50, 20), "agent:warm", max_new=2))
    drain(s, runner)
    s.add_request(hinted("warm2", toks(50, 80), "agent:warm", max_new=10))
    drain(s, runner)
    s.end_program("agent:warm")
    assert s.programs.family_growth("agent:x") == 68
    for p in "abc":
        s.add_request(hinted(f"{p}1", toks(ord(p), 20), f"agent:{p}", max_new=2))
    batch = s.schedule()
    assert sorted(e.req.rid for e in batch.reqs) == ["a1", "b1"]  # 2 x (22 + 68) <= 0.9 x 200 < 3 x 90
    s.process_results(batch, runner(batch))
    while s.running:
        batch = s.schedule()
        assert "c1" not in [e.req.rid for e in batch.reqs]
        s.process_results(batch, runner(batch))
    s.end_program("agent:a")
    drain(s, runner)
    assert s.get_request("c1") is None


def test_a_hostile_client_cannot_starve_unhinted_requests():
    """Hinted programs that pin as much as they may and never end: an unhinted request still
    runs, and the pinned share never passes the capacity."""
    s = make_sched(num_kv_slots=300, max_running=8, policy="fcfs", max_context=300)
    runner = SlotCheckingRunner()
    for i in range(12):
        s.add_request(hinted(f"h{i}", [i + 1] + toks(i, 39), f"hostile:{i}", next_use=0, max_new=2))
    drain(s, runner)
    assert s.stats().hinted_tokens <= s.tree_cache.retention.capacity == 150
    s.add_request(req("plain", toks(99, 120), max_new=4))
    for i in range(12, 20):  # more hostile programs queued beside it
        s.add_request(hinted(f"h{i}", [i + 1] + toks(i, 39), f"hostile:{i}", next_use=0, max_new=2))
    drain(s, runner)
    assert s.get_request("plain") is None and s.stats().hinted_tokens <= 150


def test_programs_that_never_end_stop_holding_new_ones_back():
    clock = FakeClock()
    s = make_sched(num_kv_slots=200, max_running=8, policy="fcfs", max_context=200)
    s.programs = ProgramTable(idle_s=10, clock=clock)
    runner = SlotCheckingRunner()
    s.add_request(hinted("a1", toks(1, 150), "greedy:a", max_new=10))  # never ended by its client
    drain(s, runner)
    s.add_request(hinted("keep-busy", toks(3, 10), "greedy:a", max_new=30))
    s.add_request(hinted("b1", toks(2, 60), "other:b", max_new=2))
    batch = s.schedule()  # a's 160 tokens in flight leave no room for b while a runs
    assert [e.req.rid for e in batch.reqs] == ["keep-busy"]
    s.process_results(batch, runner(batch))
    clock.now += 11  # a was idle past idle_s: it no longer counts
    batch = s.schedule()
    assert "b1" in [e.req.rid for e in batch.reqs]
    s.process_results(batch, runner(batch))
    drain(s, runner)


# --- provisional programs: an idle engine starts a held program off committed programs' texts ---
def test_provisional_texts_go_first_and_pin_nothing(table):
    cache = make_cache(capacity=15)
    committed, farther, provisional, plain = seqs(4)
    finish(cache, table, committed, ProgramHint("c", next_use=0))
    finish(cache, table, farther, ProgramHint("o", next_use=5))  # past the capacity: demoted
    finish(cache, table, plain)
    cache.retention.set_provisional(frozenset({"p"}))
    finish(cache, table, provisional, ProgramHint("p", next_use=0))
    assert cache.retention.pinned_tokens() == 10  # the provisional text protects nothing
    order = []
    for _ in range(4):
        cache.evict(10)
        order.append(next(name for name, ids in (("p", provisional), ("o", farther), ("plain", plain), ("c", committed))
                          if name not in order and cached(cache, ids) == 0))
    assert order == ["p", "o", "plain", "c"]


def test_a_promoted_programs_texts_count_towards_the_capacity(table):
    cache = make_cache(capacity=15)
    first, second = seqs(2)
    finish(cache, table, first, ProgramHint("c", next_use=0))
    cache.retention.set_provisional(frozenset({"p"}))
    finish(cache, table, second, ProgramHint("p", next_use=0))
    assert cache.retention.pinned_tokens() == 10
    cache.retention.set_provisional(frozenset())  # promoted: 20 protected tokens would pass 15
    assert cache.retention.pinned_tokens() == 10 and cache.retention.counts["capped"] == 1


def test_program_table_orders_committed_before_provisional_and_promotes_in_start_order():
    t = ProgramTable()
    t.on_admitted(hinted("a1", [1], "a:0"), 50, 0)
    t.on_admitted(hinted("p1", [1], "p:0"), 40, 0, provisional=True)
    t.on_admitted(hinted("q1", [1], "q:0"), 45, 0, provisional=True)
    waiting = [hinted("q2", [1], "q:0"), req("new", [2]), hinted("p2", [1], "p:0"), hinted("a2", [1], "a:0")]
    assert [r.rid for r in t.order(waiting, list)] == ["a2", "p2", "q2", "new"]
    assert t.provisional_ids == {"p:0", "q:0"} and t.is_provisional(waiting[0])
    assert t.promote(80) == 0  # 50 + 40 > 80: p waits, and q behind it
    assert t.promote(95) == 1 and t.provisional_ids == {"q:0"}  # 90 fits; 135 does not
    t.end("a:0")
    t.end("p:0")
    assert t.promote(10) == 1 and not t.provisional_ids  # nothing committed: the oldest goes anyway
    t.on_admitted(hinted("r1", [1], "r:0"), 5, 0, provisional=True)
    t.end("r:0")
    assert not t.provisional_ids and t.counts == {"provisional": 3, "promoted": 2}


def test_idle_engine_starts_a_held_program_provisional_and_keeps_committed_texts():
    """Programs a and b wait on tools with their texts cached; c's first call would pass the
    memory rule, but nothing runs: it starts provisional. When a's next call needs memory, c's
    text goes before b's; once a and b end, c is promoted."""
    s = make_sched(num_kv_slots=200, max_running=8, policy="fcfs", max_context=200)
    runner = SlotCheckingRunner()
    s.add_request(hinted("warm1", toks(50, 20), "agent:warm", max_new=2))
    drain(s, runner)
    s.add_request(hinted("warm2", toks(50, 80), "agent:warm", max_new=10))
    drain(s, runner)
    s.end_program("agent:warm")  # the family's runs grow 68 tokens after a 22-token first call
    s.tree_cache.evict(s.tree_cache.evictable_size())
    texts = {p: toks(ord(p), 20) for p in "abc"}
    for p in "ab":
        s.add_request(hinted(f"{p}1", texts[p], f"agent:{p}", max_new=2))
    drain(s, runner)
    c1 = hinted("c1", texts["c"], "agent:c", max_new=2)
    s.add_request(c1)
    batch = s.schedule()  # 3 x (22 + 68) > 0.9 x 200, but the engine would idle: c starts provisional
    assert [e.req.rid for e in batch.reqs] == ["c1"] and s.programs.is_provisional(c1)
    s.process_results(batch, runner(batch))
    drain(s, runner)
    assert s.stats().provisional_programs == 1
    s.add_request(hinted("a2", texts["a"] + [5, 6] + toks(7, 140), "agent:a", max_new=2))
    drain(s, runner)  # a2 needs ~164 slots of 200: c's text goes, b's stays
    assert cached(s.tree_cache, texts["c"]) == 0 and cached(s.tree_cache, texts["b"]) == 20
    s.end_program("agent:a")
    s.end_program("agent:b")
    assert s.schedule() is None and not s.programs.is_provisional(c1)
    assert s.stats().promoted_programs == 1
