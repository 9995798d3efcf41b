"""The Theorem 3.1 hit-rate bound (bench/suite/hit_rate.py): hand-computed cases, agreement with
a naive set-of-prefixes reference, and the real engine's traces never beating the bound.

The engine tests load the model once per module (``share_model_with`` for the FCFS engine).
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.suite.hit_rate import HitRateBound, achieved_hit_rate, optimal_hit_rate


def req(prompt, output=(), cached=0, forced=0):
    return SimpleNamespace(prompt_ids=tuple(prompt), output_ids=tuple(output), cached_tokens=cached,
                           forced_tokens=forced)


def naive_min_computed(requests) -> int:
    """The bound's definition, spelled out over explicit prefix tuples."""
    nodes = {tuple(r.prompt_ids[:k]) for r in requests for k in range(1, len(r.prompt_ids) + 1)}
    ends: dict[tuple, int] = {}
    for r in requests:
        if r.forced_tokens == 0:
            ends[tuple(r.prompt_ids)] = ends.get(tuple(r.prompt_ids), 0) + 1
    decoded = set()
    for r in requests:
        full = tuple(r.prompt_ids) + tuple(r.output_ids)
        decoded |= {full[:k] for k in range(len(r.prompt_ids) + 1, len(full))}
    return sum(ends[v] if v in ends else (0 if v in decoded else 1) for v in nodes)


# --- hand-computed -------------------------------------------------------------------------
def test_two_prompts_sharing_a_prefix_compute_it_once():
    """[1,2,3,4] and [1,2,3,5]: nodes 1,2,3 once + two ends = 5 of 8 tokens."""
    assert optimal_hit_rate([req([1, 2, 3, 4]), req([1, 2, 3, 5])]) == HitRateBound(8, 5, 3 / 8)


def test_identical_prompts_each_compute_their_last_token():
    """Two copies of [1,2,3]: 1,2 once, the last token by both (admission matches fill[:-1])."""
    assert optimal_hit_rate([req([1, 2, 3]), req([1, 2, 3])]) == HitRateBound(6, 4, 2 / 6)


def test_prompt_that_is_a_prefix_of_another():
    """[1,2] and [1,2,3]: 1 once, 2 by its ending request, 3 by the longer one = 3 of 5."""
    assert optimal_hit_rate([req([1, 2]), req([1, 2, 3])]) == HitRateBound(5, 3, 2 / 5)


def test_follow_up_reuses_decoded_tokens_but_not_the_last_output_token():
    """P1=[1,2,3], O1=[7,8,9]; P2 = P1+O1+[4]: 7 and 8 have decode KV (free), 9 never got KV.
    Cost: 1,2,3 (end of P1) + 9 + 4 = 5 of 10 prompt tokens."""
    bound = optimal_hit_rate([req([1, 2, 3], [7, 8, 9]), req([1, 2, 3, 7, 8, 9, 4])])
    assert bound == HitRateBound(10, 5, 0.5)


def test_forced_request_may_take_its_last_prompt_token_from_the_cache():
    """A request admitted with forced output tokens does not have to compute its last prompt token."""
    plain = optimal_hit_rate([req([1, 2, 3]), req([1, 2, 3])])
    forced = optimal_hit_rate([req([1, 2, 3]), req([1, 2, 3], [5, 6], forced=1)])
    assert (plain.min_computed_tokens, forced.min_computed_tokens) == (4, 3)


def test_empty_trace_and_empty_prompt():
    """No requests: zero everything; an empty prompt is an error naming the request."""
    assert optimal_hit_rate([]) == HitRateBound(0, 0, 0.0)
    assert achieved_hit_rate([]) == 0.0
    with pytest.raises(ValueError, match="empty prompt"):
        optimal_hit_rate([SimpleNamespace(rid="r7", prompt_ids=(), output_ids=())])


def test_achieved_hit_rate_is_cached_over_prompt_tokens():
    """achieved = sum cached / sum prompt."""
    assert achieved_hit_rate([req([1, 2, 3], cached=0), req([1, 2, 3, 4, 5], cached=2)]) == 2 / 8


# --- property: the trie agrees with the definition ----------------------------------------
token_seqs = st.lists(st.integers(0, 3), min_size=1, max_size=7)
requests_st = st.lists(
    st.builds(req, token_seqs, st.lists(st.integers(0, 3), max_size=4), st.just(0), st.sampled_from([0, 0, 0, 1])),
    min_size=1, max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(requests_st)
def test_trie_matches_the_naive_definition(requests):
    """min_computed equals the per-node definition; 0 <= optimal < 1 (some token is computed)."""
    bound = optimal_hit_rate(requests)
    assert bound.min_computed_tokens == naive_min_computed(requests)
    assert bound.prompt_tokens == sum(len(r.prompt_ids) for r in requests)
    assert 0.0 <= bound.optimal_hit_rate < 1.0


# --- the real engine ----------------------------------------------------------------------
GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine():
    import torch

    from sglc_runtime.engine import Engine

    # NOTE: one intra-op thread: on the shared 2-core box torch's spinning threads slow small
    # batches down many times (nothing here measures time).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Engine(dtype="float32")
    torch.set_num_threads(threads)


def run_traced(engine, groups):
    """Run groups of (prompt builder, max_new_tokens) one group after another from an empty
    cache; builders see the earlier outputs. Returns (trace, stats before, stats after)."""
    engine.flush_cache()
    before = engine.stats()
    trace = engine.start_trace()
    done: list[tuple[list[int], list[int]]] = []
    try:
        for group in groups:
            prompts = [build(done) for build, _ in group]
            rids = [engine.submit(p, {**GREEDY, "max_new_tokens": n}) for p, (_, n) in zip(prompts, group)]
            done += [(p, engine.wait(r).token_ids) for p, r in zip(prompts, rids)]
    finally:
        engine.stop_trace()
    return trace, before, engine.stats()


@st.composite
def workloads(draw):
    """Groups of requests over 2-3 shared prefixes; a request is fresh (prefix + suffix) or a
    follow-up of an earlier group's request (its prompt + output + suffix)."""
    toks = st.integers(300, 3000)
    prefixes = draw(st.lists(st.lists(toks, min_size=3, max_size=12), min_size=2, max_size=3))
    groups, earlier = [], 0
    for _ in range(draw(st.integers(2, 4))):
        group = []
        for _ in range(draw(st.integers(2, 3))):
            suffix = draw(st.lists(toks, max_size=5))
            n = draw(st.integers(1, 4))
            if earlier and draw(st.booleans()):
                j = draw(st.integers(0, earlier - 1))
                group.append((lambda done, j=j, s=suffix: done[j][0] + done[j][1] + s, n))
            else:
                p = draw(st.sampled_from(prefixes)) + (suffix or [300])
                group.append((lambda done, p=p: p, n))
        groups.append(group)
        earlier += len(group)
    return groups


@pytest.mark.model
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_engine_trace_agrees_with_stats_and_never_beats_the_bound(engine, groups):
    """Traced cached/prompt tokens equal the stats delta, and achieved <= optimal."""
    trace, before, after = run_traced(engine, groups)
    assert trace.prompt_tokens == after.prompt_tokens - before.prompt_tokens
    assert trace.cached_tokens == after.cached_tokens - before.cached_tokens
    assert achieved_hit_rate(trace) <= optimal_hit_rate(trace).optimal_hit_rate + 1e-9


@pytest.mark.model
def test_fcfs_on_interleaved_prefixes_falls_short_of_the_optimum(engine):
    """Four 40-token prefixes interleaved, all queued at once: FCFS admits them together (no reuse
    in the batch) so it stays below the optimum; LPM (with in-batch dedup) is printed alongside."""
    from sglc_runtime.engine import Engine

    rng = random.Random(7)
    prefixes = [[rng.randrange(300, 3000) for _ in range(40)] for _ in range(4)]
    prompts = [prefixes[i % 4] + [rng.randrange(300, 3000) for _ in range(4)] for i in range(16)]
    group = [[(lambda done, p=p: p, 1) for p in prompts]]
    fcfs = Engine(share_model_with=engine, schedule_policy="fcfs")
    rates = {}
    for name, eng in (("lpm", engine), ("fcfs", fcfs)):
        trace, _, _ = run_traced(eng, group)
        rates[name] = achieved_hit_rate(trace)
        bound = optimal_hit_rate(trace)
    print(f"\nhit rate: optimal {bound.optimal_hit_rate:.3f}, lpm {rates['lpm']:.3f}, fcfs {rates['fcfs']:.3f}")
    assert rates["fcfs"] < bound.optimal_hit_rate - 0.1
    assert rates["lpm"] <= bound.optimal_hit_rate + 1e-9
