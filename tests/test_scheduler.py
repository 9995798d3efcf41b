"""Scheduler policy tests, driven without the model.

``SlotCheckingRunner`` stands in for the model runner: it records which (token, position) each
KV slot holds and asserts that every planned entry reads slots holding exactly its own sequence,
so a cache or slot bookkeeping bug shows up as a wrong read. Its "next token" is a fixed
function of the sequence, so runs with different policies or the cache off must agree.
"""
import random

import pytest
import torch

from sglc_runtime.sampling.sampling_params import SamplingParams
from sglc_runtime.scheduling.request import Req, ReqStatus
from sglc_runtime.scheduling.scheduler import Scheduler
from sglc_runtime.scheduling.scheduler_config import SchedulerConfig

VOCAB = 50


class SlotCheckingRunner:
    def __init__(self):
        self.kv: dict[int, tuple[int, int]] = {}

    def __call__(self, batch) -> list[int]:
        for e in batch.reqs:
            fill = e.req.fill_ids
            assert e.input_ids == fill[e.prefix_len : e.prefix_len + e.extend_len]
            assert e.kv_indices.numel() == e.prefix_len + e.extend_len
            assert torch.equal(e.kv_indices[e.prefix_len :], e.new_slots)
            for j, s in enumerate(e.kv_indices[: e.prefix_len].tolist()):
                assert self.kv.get(s) == (fill[j], j), f"{e.req.rid}: slot {s} does not hold token {j}"
            for j, s in enumerate(e.new_slots.tolist()):
                self.kv[s] = (e.input_ids[j], e.prefix_len + j)
        return [next_token(e.req.fill_ids) if e.samples else -1 for e in batch.reqs]


def next_token(seq: list[int]) -> int:
    return (sum(seq) * 31 + len(seq) * 7) % (VOCAB - 1) + 1  # never 0 (used as eos below)


def make_sched(num_kv_slots=512, **kw) -> Scheduler:
    kw.setdefault("max_context", 256)
    kw.setdefault("max_running", 8)
    return Scheduler(SchedulerConfig(num_kv_slots=num_kv_slots, debug=True, **kw))


def req(rid: str, ids: list[int], max_new: int = 4, **sp) -> Req:
    return Req(rid, ids, SamplingParams(max_new_tokens=max_new, **sp))


def toks(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, VOCAB) for _ in range(n)]


def step(s: Scheduler, runner: SlotCheckingRunner):
    batch = s.schedule()
    assert batch is not None
    return batch, s.process_results(batch, runner(batch))


def drain(s: Scheduler, runner: SlotCheckingRunner | None = None, max_steps: int = 5000) -> list:
    runner = runner or SlotCheckingRunner()
    batches = []
    while s.has_work():
        assert len(batches) < max_steps, f"no progress: {s.stats()}"
        batches.append(step(s, runner)[0])
    s.check_integrity()
    return batches


def assert_all_free_after_flush(s: Scheduler) -> None:
    assert s.flush_cache()
    s.check_integrity()
    assert s.pool.num_free == s.pool.num_slots and s.table.num_used_rows == 0


# --- continuous batching and ordering ------------------------------------------------------
def test_new_prefill_joins_running_decodes():
    """A request arriving while another decodes is prefilled in the same batch as that decode."""
    s, run = make_sched(), SlotCheckingRunner()
    s.add_request(req("a", toks(1, 10), max_new=8))
    step(s, run)
    s.add_request(req("b", toks(2, 10), max_new=8))
    batch, _ = step(s, run)
    kinds = {(e.req.rid, e.is_prefill) for e in batch.reqs}
    assert kinds == {("a", False), ("b", True)}
    assert [e.is_prefill for e in batch.reqs] == [True, False]  # prefills first, then decodes
    drain(s, run)
    assert_all_free_after_flush(s)


def test_decode_entries_feed_the_last_sampled_token():
    """A decode entry feeds one token (the last output) at position seq_len - 1."""
    s, run = make_sched(), SlotCheckingRunner()
    s.add_request(req("a", toks(1, 5), max_new=3))
    step(s, run)
    batch = s.schedule()
    (e,) = batch.reqs
    assert e.input_ids == [e.req.output_ids[-1]] and e.prefix_len == 5 and batch.positions == [5]
    s.process_results(batch, run(batch))


def test_lpm_admits_the_longest_cached_prefix_first():
    """With room for one request, lpm picks the one sharing a cached prefix; fcfs the oldest."""
    shared = toks(3, 40)
    admitted = {}
    for policy in ("lpm", "fcfs"):
        s, run = make_sched(policy=policy, max_running=1), SlotCheckingRunner()
        s.add_request(req("warm", shared + [1], max_new=1))
        drain(s, run)
        s.add_request(req("cold", toks(4, 30)))
        s.add_request(req("hot", shared + toks(5, 5)))
        batch, _ = step(s, run)
        admitted[policy] = [e.req.rid for e in batch.reqs]
        if policy == "lpm":
            assert batch.reqs[0].prefix_len == 40
        drain(s, run)
    assert admitted == {"lpm": ["hot"], "fcfs": ["cold"]}


def test_in_batch_dedup_holds_back_a_shared_uncached_prefix():
    """Two queued requests sharing an uncached prefix: lpm computes it once (second request
    waits one step and then hits the cache); fcfs computes it twice in one batch."""
    shared = toks(6, 48)
    first_batch, computed = {}, {}
    for policy in ("lpm", "fcfs"):
        s, run = make_sched(policy=policy, in_batch_prefix_threshold=8), SlotCheckingRunner()
        s.add_request(req("x", shared + toks(7, 4)))
        s.add_request(req("y", shared + toks(8, 4)))
        batch, _ = step(s, run)
        first_batch[policy] = [e.req.rid for e in batch.reqs]
        batches = [batch] + drain(s, run)
        if policy == "lpm":
            y_prefill = next(e for b in batches for e in b.reqs if e.req.rid == "y")
            assert y_prefill.prefix_len >= 48
        computed[policy] = s.stats().computed_prefill_tokens
    assert first_batch == {"lpm": ["x"], "fcfs": ["x", "y"]}
    assert computed["lpm"] <= computed["fcfs"] - 48


def test_random_policy_is_reproducible_with_a_seed():
    """The random policy admits in the same order for the same seed."""
    orders = []
    for _ in range(2):
        s = make_sched(policy="random", seed=3, max_running=3)
        for i in range(8):
            s.add_request(req(f"r{i}", toks(i, 5)))
        orders.append([e.req.rid for e in s.schedule().reqs])
    assert orders[0] == orders[1] and len(orders[0]) == 3


# --- budgets and chunking -------------------------------------------------------------------
@pytest.mark.parametrize("chunk_size", [16, None])
def test_prefill_token_budget_is_respected(chunk_size):
    """No step prefills more than the budget (without chunking, an over-long prompt runs alone)."""
    s, run = make_sched(max_prefill_tokens=40, chunk_size=chunk_size), SlotCheckingRunner()
    lens = [12, 30, 7, 25, 60, 9, 18]
    for i, n in enumerate(lens):
        s.add_request(req(f"r{i}", toks(10 + i, n)))
    for batch in drain(s, run):
        limit = 16 if chunk_size else 40
        over_long = batch.num_prefills == 1 and batch.num_prefill_tokens == 60
        assert batch.num_prefill_tokens <= limit or (chunk_size is None and over_long)
    assert_all_free_after_flush(s)


def test_chunked_prefill_splits_a_long_prompt_into_ceil_n_over_chunk_steps():
    """A 100-token prompt with chunk 32 takes 4 prefill steps; only the last one samples, and
    between chunks the computed part is cached and locked."""
    s, run = make_sched(chunk_size=32), SlotCheckingRunner()
    s.add_request(req("long", toks(20, 100), max_new=2))
    plan = []
    for _ in range(4):
        batch, _ = step(s, run)
        (e,) = batch.reqs
        plan.append((e.prefix_len, e.extend_len, e.samples))
        r = e.req
        if not e.samples:
            assert s.tree_cache.protected_size() == r.kv_len == r.prefix_indices.numel()
    assert plan == [(0, 32, False), (32, 32, False), (64, 32, False), (96, 4, True)]
    drain(s, run)
    assert_all_free_after_flush(s)


def test_kv_budget_limits_admission_by_estimated_decode_growth():
    """Admission reserves prompt + ratio * max_new_tokens per request, so a pool of 200 slots
    admits only as many 20-token, 100-new-token requests as fit that estimate."""
    s = make_sched(num_kv_slots=200, init_new_token_ratio=1.0, max_prefill_tokens=1000)
    for i in range(5):
        s.add_request(req(f"r{i}", toks(30 + i, 20), max_new=80))
    batch = s.schedule()
    assert batch.num_prefills == 2  # 2 * (20 + 80) = 200
    s.process_results(batch, SlotCheckingRunner()(batch))


def test_learned_ratio_drops_toward_observed_output_lengths():
    """Requests that stop early (eos) pull the decode-growth ratio down, but not below the
    learned floor; a retraction pushes it back up."""
    s = make_sched(eos_token_ids=(0,), init_new_token_ratio=0.9)
    run = SlotCheckingRunner()
    for i in range(6):
        s.add_request(req(f"r{i}", toks(40 + i, 6), max_new=100))
    steps = 0
    while s.has_work():
        batch = s.schedule()
        ids = run(batch)
        ids = [0 if e.samples and len(e.req.output_ids) >= 4 else t for e, t in zip(batch.reqs, ids)]
        s.process_results(batch, ids)
        steps += 1
    g = s.growth
    assert g.observed == pytest.approx(0.05) and g.ratio >= g.floor
    before = g.ratio
    for _ in range(2000):
        g.on_decode_step()
    assert g.ratio == pytest.approx(g.floor) and g.ratio < before
    g.on_retract()
    assert g.ratio > g.floor


# --- retraction -----------------------------------------------------------------------------
def test_retraction_under_a_tiny_pool_lets_every_request_finish():
    """An over-committed tiny pool retracts the youngest requests; all still finish with the
    same outputs as an unconstrained run, and no slot leaks."""
    prompts = [toks(50 + i, 10 + 3 * i) for i in range(6)]

    def run_all(num_slots):
        s = make_sched(num_kv_slots=num_slots, init_new_token_ratio=0.1, min_new_token_ratio=0.1)
        for i, p in enumerate(prompts):
            s.add_request(req(f"r{i}", p, max_new=30))
        reqs = list(s.waiting)
        drain(s)
        assert all(r.finished and r.finished_reason == "length" for r in reqs)
        assert reqs[0].num_retractions == 0  # the oldest is never the victim
        assert_all_free_after_flush(s)
        return {r.rid: r.output_ids for r in reqs}, s.stats().num_retractions

    outputs_small, retractions = run_all(100)
    outputs_big, no_retractions = run_all(2000)
    assert retractions > 0 and no_retractions == 0
    assert outputs_small == outputs_big


def test_retracted_request_resumes_through_the_cache():
    """A retracted request goes back to the front of the queue and its computed tokens stay in
    the cache (unlocked), so its re-prefill reuses them when nothing evicted them."""
    s, run = make_sched(num_kv_slots=400), SlotCheckingRunner()
    s.add_request(req("old", toks(60, 20), max_new=50))
    s.add_request(req("young", toks(61, 20), max_new=50))
    for _ in range(5):
        step(s, run)
    young = s.get_request("young")
    kv_before = young.kv_len
    s._retract(young)
    s.check_integrity()
    assert s.waiting[0] is young and young.status is ReqStatus.WAITING and young.req_row is None
    assert s.tree_cache.peek_prefix_len(young.fill_ids) == kv_before
    batch, _ = step(s, run)
    e = next(e for e in batch.reqs if e.req is young)
    assert e.prefix_len == kv_before and e.extend_len == 1
    drain(s, run)
    assert_all_free_after_flush(s)


def test_tokens_appended_between_steps_are_fed_in_one_step():
    """Extending output_ids between steps (jump-forward) makes the next step feed all of them."""
    s, run = make_sched(), SlotCheckingRunner()
    s.add_request(req("a", toks(62, 6), max_new=20))
    step(s, run)
    a = s.get_request("a")
    a.output_ids.extend([5, 6])
    batch, _ = step(s, run)
    (e,) = batch.reqs
    assert e.input_ids == a.fill_ids[6:9] and e.prefix_len == 6 and not e.is_prefill
    drain(s, run)
    assert_all_free_after_flush(s)


def test_rewrite_output_requeues_and_reuses_the_unchanged_prefix():
    """rewrite_output puts the request back at the front; its re-prefill hits the cache up to
    the first changed token."""
    s, run = make_sched(), SlotCheckingRunner()
    s.add_request(req("a", toks(63, 10), max_new=20))
    for _ in range(4):
        step(s, run)
    a = s.get_request("a")
    assert a.kv_len == 13
    s.rewrite_output(a, a.output_ids[:2] + [7, 7, 7])
    assert s.waiting == [a] and a.num_retractions == 0
    batch, _ = step(s, run)
    (e,) = batch.reqs
    assert e.prefix_len == 12 and e.input_ids == [7, 7, 7]
    drain(s, run)
    assert_all_free_after_flush(s)
    assert s.stats().prompt_tokens == 10  # counted once


# --- finishing and aborting -----------------------------------------------------------------
def test_finish_reasons_eos_ignore_eos_and_engine_reason():
    """eos stops unless ignore_eos; an engine-given reason finishes the request at once."""
    s, run = make_sched(eos_token_ids=(0,)), SlotCheckingRunner()
    s.add_request(req("eos", toks(70, 5), max_new=10))
    s.add_request(req("ignore", toks(71, 5), max_new=3, ignore_eos=True))
    s.add_request(req("engine", toks(72, 5), max_new=10))
    batch = s.schedule()
    ids = [0] * len(batch.reqs)
    reasons = ["stop" if e.req.rid == "engine" else None for e in batch.reqs]
    run(batch)
    done = s.process_results(batch, ids, reasons)
    assert {r.rid: r.finished_reason for r in done} == {"eos": "stop", "engine": "stop"}
    drain(s, run)
    assert s.stats().num_finished == 3
    assert_all_free_after_flush(s)


def test_prefill_only_request_finishes_without_output():
    """max_new_tokens=0 prefills (and caches) the prompt and finishes with no tokens."""
    s, run = make_sched(), SlotCheckingRunner()
    r = req("score", toks(80, 12), max_new=0)
    s.add_request(r)
    drain(s, run)
    assert r.output_ids == [] and r.finished_reason == "length"
    assert s.tree_cache.peek_prefix_len(r.origin_input_ids) == 12


def test_abort_releases_waiting_running_and_in_flight_requests():
    """abort works for a queued request, a running one, and one in the batch in flight."""
    s, run = make_sched(max_running=2), SlotCheckingRunner()
    for rid in ("a", "b", "c"):
        s.add_request(req(rid, toks(ord(rid), 8), max_new=20))
    step(s, run)
    assert s.abort("c") and s.get_request("c") is None  # waiting
    assert s.abort("a")  # running, no batch in flight
    batch = s.schedule()
    assert s.abort("b")  # in flight: finished at process_results
    done = s.process_results(batch, run(batch))
    assert [r.rid for r in done] == ["b"] and done[0].finished_reason == "abort"
    assert not s.abort("zzz") and not s.has_work()
    assert_all_free_after_flush(s)


def test_cache_off_gives_same_outputs_and_computes_more():
    """Disabling the radix cache changes cost, never results."""
    shared = toks(90, 30)
    results = {}
    for disable in (False, True):
        s = make_sched(disable_radix_cache=disable, in_batch_prefix_threshold=8)
        reqs = [req(f"r{i}", shared + toks(91 + i, 5), max_new=6) for i in range(5)]
        for r in reqs:
            s.add_request(r)
        drain(s)
        results[disable] = ({r.rid: r.output_ids for r in reqs}, s.stats())
        assert_all_free_after_flush(s)
    assert results[False][0] == results[True][0]
    assert results[True][1].cached_tokens == 0 < results[False][1].cached_tokens
    assert results[True][1].computed_prefill_tokens > results[False][1].computed_prefill_tokens


def test_add_request_rejects_what_can_never_fit():
    """Prompts that cannot fit the context or the pool, and duplicate ids, fail at the edge."""
    s = make_sched(num_kv_slots=64, max_context=50)
    with pytest.raises(ValueError, match="max_context"):
        s.add_request(req("big", toks(1, 45), max_new=10))
    s.add_request(req("ok", toks(1, 10)))
    with pytest.raises(ValueError, match="already"):
        s.add_request(req("ok", toks(1, 10)))


def test_schedule_requires_results_of_the_previous_batch():
    """schedule() twice without process_results() is a caller bug and raises."""
    s = make_sched()
    s.add_request(req("a", toks(1, 4)))
    s.schedule()
    with pytest.raises(RuntimeError, match="process_results"):
        s.schedule()


def test_random_workload_keeps_integrity_and_frees_everything():
    """A mixed random workload (shared prefixes, eos, aborts, tiny pool, chunking) keeps every
    invariant at every step and ends with every slot free."""
    rng = random.Random(0)
    prefixes = [toks(100 + i, rng.randrange(5, 40)) for i in range(4)]
    for policy in ("lpm", "fcfs", "random"):
        s = make_sched(num_kv_slots=160, chunk_size=24, policy=policy, eos_token_ids=(0,),
                       in_batch_prefix_threshold=4)
        run, n = SlotCheckingRunner(), 0
        for _ in range(400):
            if rng.random() < 0.3 and n < 40:
                s.add_request(req(f"q{n}", rng.choice(prefixes) + toks(rng.random(), rng.randrange(1, 20)),
                                  max_new=rng.randrange(0, 40)))
                n += 1
            if rng.random() < 0.03 and s.running:
                s.abort(rng.choice(s.running).rid)
            if s.has_work():
                batch = s.schedule()
                ids = [0 if rng.random() < 0.05 else t for t in run(batch)]
                s.process_results(batch, ids)
        drain(s, run)
        assert_all_free_after_flush(s)
