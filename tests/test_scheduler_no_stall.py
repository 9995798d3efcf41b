"""No request holds the scheduler: with chunked prefill every step's prefill stays within the
budget, a short request is admitted beside a long prompt's chunks instead of after all of them,
the long prompt keeps at least half of every step, and an abort ends a chunked prefill at the
next chunk boundary. Driven without the model (see test_scheduler.py's SlotCheckingRunner).
"""
from __future__ import annotations

import pytest

from test_scheduler import SlotCheckingRunner, assert_all_free_after_flush, drain, make_sched, req, step, toks

CHUNK = 32


def _prefill_tokens(batch, rid: str) -> int:
    return sum(e.extend_len for e in batch.reqs if e.req.rid == rid and e.is_prefill)


@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_a_short_request_is_admitted_beside_a_long_prompts_chunks(policy):
    """A 2-token request queued after the first chunk of a 200-token prompt finishes in the next
    step, while the long prompt still gets half the budget in that step."""
    s, run = make_sched(chunk_size=CHUNK, policy=policy), SlotCheckingRunner()
    s.add_request(req("long", toks(1, 200), max_new=1))
    first, _ = step(s, run)
    assert _prefill_tokens(first, "long") == CHUNK
    s.add_request(req("short", toks(2, 2), max_new=1))
    batch, finished = step(s, run)
    assert [r.rid for r in finished] == ["short"]
    assert _prefill_tokens(batch, "long") == CHUNK - 2 and batch.num_prefill_tokens == CHUNK
    drain(s, run)
    assert_all_free_after_flush(s)


def test_a_long_prompt_keeps_half_of_every_step_under_a_stream_of_short_requests():
    """Short requests arriving every step never take more than half the budget from a chunked
    prompt, so it finishes in at most twice its unshared number of steps."""
    s, run = make_sched(chunk_size=CHUNK, max_running=64, num_kv_slots=2048), SlotCheckingRunner()
    s.add_request(req("long", toks(3, 160), max_new=1))
    steps = 0
    while s.get_request("long") is not None:
        for k in range(3):  # 3 x 10 tokens offered per step: more than the half left to them
            s.add_request(req(f"s{steps}-{k}", toks(100 + 3 * steps + k, 10), max_new=1))
        batch, _ = step(s, run)
        steps += 1
        assert _prefill_tokens(batch, "long") >= CHUNK // 2 or s.get_request("long") is None
        assert batch.num_prefill_tokens <= CHUNK
    assert steps <= 2 * 160 // CHUNK
    drain(s, run)
    assert_all_free_after_flush(s)


def test_requests_too_long_for_the_lane_wait_and_only_one_prompt_is_chunked_at_a_time():
    """Beside a chunked prompt only requests that fit whole into half the budget are admitted;
    a second long prompt waits, so at most one prefill is partial after any step."""
    s, run = make_sched(chunk_size=CHUNK, policy="fcfs"), SlotCheckingRunner()
    s.add_request(req("long", toks(4, 100), max_new=1))
    step(s, run)
    s.add_request(req("long2", toks(5, 100), max_new=1))
    s.add_request(req("short", toks(6, 3), max_new=1))
    while s.has_work():
        batch, _ = step(s, run)
        partial = [r for r in s.running if not r.prefill_done]
        assert len(partial) <= 1, partial
        assert batch.num_prefill_tokens <= CHUNK
    assert_all_free_after_flush(s)


def test_many_long_prefill_only_requests_leave_room_for_a_short_one():
    """Score-like work (8 prefill-only 150-token requests, queued first) never prefills more
    than one budget per step, and a 1-token request queued behind all of them is admitted
    within two steps instead of after the whole queue."""
    s, run = make_sched(chunk_size=CHUNK, max_running=16, num_kv_slots=4096), SlotCheckingRunner()
    prompt = toks(7, 20)
    for i in range(8):
        s.add_request(req(f"choice{i}", prompt + toks(200 + i, 130), max_new=0))
    step(s, run)
    s.add_request(req("short", toks(8, 1), max_new=1))
    steps_to_short = 0
    while s.get_request("short") is not None:
        batch, _ = step(s, run)
        steps_to_short += 1
        assert batch.num_prefill_tokens <= CHUNK
    assert steps_to_short <= 2
    assert sum(1 for i in range(8) if s.get_request(f"choice{i}") is not None) >= 6
    for batch in drain(s, run):
        assert batch.num_prefill_tokens <= CHUNK
    assert_all_free_after_flush(s)


def test_an_abort_during_a_chunk_ends_the_prefill_at_that_chunk_boundary():
    """A long prompt aborted while its second chunk is in flight finishes with that batch's
    results: no further chunk of it is planned or computed."""
    s, run = make_sched(chunk_size=CHUNK), SlotCheckingRunner()
    s.add_request(req("long", toks(9, 200), max_new=4))
    step(s, run)
    batch = s.schedule()
    assert s.abort("long")  # in flight: takes effect at process_results
    finished = s.process_results(batch, run(batch))
    assert [(r.rid, r.finished_reason) for r in finished] == [("long", "abort")]
    assert s.stats().computed_prefill_tokens == 2 * CHUNK
    assert s.schedule() is None
    assert_all_free_after_flush(s)
