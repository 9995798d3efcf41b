"""Engine request traces, the engine-wide jump-forward switch and Engine.score's cache counts,
on the real default model (one model per module; other engines share it).
"""
from __future__ import annotations

import re

import pytest
import torch

from sglc_runtime.engine import Engine
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.engine.request_trace import RequestTrace, TracedRequest

GREEDY = {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 3}
SHARED = list(range(400, 440))  # 40 shared prompt tokens
# Forced text at the start and in the middle: jump-forward has something to append.
FORCED_REGEX = r'\{"answer": "(yes|no)", "reason": "[a-z ]{1,12}"\}'


def test_config_disable_jump_forward_must_be_a_bool():
    """EngineConfig rejects a non-bool disable_jump_forward, naming the field."""
    assert EngineConfig(disable_jump_forward=True).disable_jump_forward is True
    with pytest.raises(TypeError, match="disable_jump_forward"):
        EngineConfig(disable_jump_forward="yes")


@pytest.fixture(scope="module")
def engine():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # NOTE: spinning intra-op threads slow small batches on 2 cores
    yield Engine(dtype="float32")
    torch.set_num_threads(threads)


@pytest.fixture()
def fresh(engine):
    """The module engine, idle with an empty cache and no trace on."""
    engine.flush_cache()
    yield engine
    try:
        engine.stop_trace()
    except RuntimeError:  # the test stopped it already
        pass


def chat(engine: Engine, question: str) -> str:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)


@pytest.mark.model
def test_trace_records_only_requests_finished_while_on(fresh):
    """Requests before start_trace and after stop_trace are not recorded; the stopped trace is frozen."""
    fresh.generate([SHARED + [1]], GREEDY)
    trace = fresh.start_trace()
    outs = fresh.generate([SHARED + [2], SHARED + [3]], GREEDY)
    assert fresh.stop_trace() is trace and not trace.active
    fresh.generate([SHARED + [4]], GREEDY)
    assert [r.prompt_ids for r in trace] == [tuple(SHARED + [2]), tuple(SHARED + [3])]
    by_rid = {r.rid: r for r in trace}
    for o in outs:
        assert by_rid[o.rid].output_ids == tuple(o.token_ids) and by_rid[o.rid].cached_tokens == o.cached_tokens
    assert all(isinstance(r, TracedRequest) and r.forced_tokens == 0 for r in trace)


@pytest.mark.model
def test_start_twice_or_stop_without_start_raises(fresh):
    """One trace at a time; stopping when none is on is an error."""
    with pytest.raises(RuntimeError, match="no trace is on"):
        fresh.stop_trace()
    assert isinstance(fresh.start_trace(), RequestTrace)
    with pytest.raises(RuntimeError, match="already on"):
        fresh.start_trace()


@pytest.mark.model
def test_trace_excludes_aborted_requests(fresh):
    """A request aborted in the queue or mid-run is not in the trace; the others are."""
    trace = fresh.start_trace()
    running = fresh.submit(SHARED + [5], {**GREEDY, "max_new_tokens": 8})
    fresh.step()  # its prefill: now running
    queued = fresh.submit(SHARED + [6], GREEDY)
    kept = fresh.submit(SHARED + [7], GREEDY)
    assert fresh.abort(running) and fresh.abort(queued)
    fresh.wait(kept)
    for rid in (running, queued):
        assert fresh.wait(rid).finish_reason["type"] == "abort"
    assert fresh.stop_trace() is trace and [r.rid for r in trace] == [kept]


@pytest.mark.model
def test_traced_cached_tokens_sum_to_the_stats_delta(fresh):
    """Per-request cached/prompt tokens of a two-round workload add up to the stats counters."""
    before = fresh.stats()
    trace = fresh.start_trace()
    first = fresh.generate([SHARED + [8], list(range(900, 930))], GREEDY)
    follow = [SHARED + [8] + first[0].token_ids + [9, 10], SHARED + [11], list(range(900, 925))]
    fresh.generate(follow, GREEDY)
    fresh.stop_trace()
    after = fresh.stats()
    assert len(trace) == 5
    assert trace.cached_tokens == after.cached_tokens - before.cached_tokens > 0
    assert trace.prompt_tokens == after.prompt_tokens - before.prompt_tokens


@pytest.mark.model
def test_disable_jump_forward_never_jumps_and_both_outputs_match(engine):
    """disable_jump_forward=True: zero jumps; False: some; both outputs fullmatch the regex."""
    prompt = chat(engine, "Is the sky blue? Answer in JSON.")
    params = {"regex": FORCED_REGEX, "temperature": 0.0, "max_new_tokens": 40}
    counts, texts, forced = {}, {}, {}
    for disable in (True, False):
        eng = Engine(share_model_with=engine, disable_jump_forward=disable)
        eng.start_trace()
        texts[disable] = eng.generate(prompt, params)[0].text
        counts[disable] = dict(eng.jump_counts)
        forced[disable] = eng.stop_trace().requests[0].forced_tokens
    print(f"\njump counts: disabled {counts[True]}, enabled {counts[False]}")
    assert counts[True] == {"jumps": 0, "tokens": 0, "requeued": 0}
    assert counts[False]["jumps"] > 0
    assert forced[True] == 0 and forced[False] > 0  # '{"answer": "' is forced at submit
    for text in texts.values():
        assert re.fullmatch(FORCED_REGEX, text), text


@pytest.mark.model
def test_score_reports_the_prompts_cached_tokens(fresh):
    """The first score of a prompt from an empty cache has 0 cached tokens; scoring it again
    serves all but its last token from the cache. Select's meta shows the same counts."""
    prompt = "The capital of France is"
    n = len(fresh.tokenizer.encode(prompt))
    first = fresh.score(prompt, [" Paris", " London"])
    second = fresh.score(prompt, [" Paris", " London"])
    assert [(s.prompt_tokens, s.cached_tokens) for s in first] == [(n, 0)] * 2
    assert [(s.prompt_tokens, s.cached_tokens) for s in second] == [(n, n - 1)] * 2
    assert [s.total for s in first] == pytest.approx([s.total for s in second], abs=1e-4)

    from sglc.wire.backend import Prompt
    from sglc_runtime.server.engine_backend import EngineBackend

    eng = Engine(share_model_with=fresh)
    backend = EngineBackend(eng)
    try:
        backend.score(Prompt(prompt), [" Paris", " London"])
        meta = backend.score(Prompt(prompt), [" Paris", " London"]).meta
    finally:
        eng.shutdown()
    assert (meta.prompt_tokens, meta.cached_tokens) == (n, n - 1)
