"""Precompute (issue 28; runtime/engine/precompute.py): when a call whose hint carries a
continuation ends, the engine prefills prompt + output + continuation at once, so the program's
next call finds its whole prompt cached; outputs never change; a precompute the next call (or the
program's end) overtakes is withdrawn. Both engines, the real default model (SmolLM2-135M GGUF).
"""
from __future__ import annotations

import time

import pytest

from sglc.wire.program_hint import NEVER, ProgramHint
from sglc_runtime.engine.precompute import Precomputes

PROMPT = "Question: what is the capital of France?\nThink step by step:"
CONTINUATION = "\nSo the answer, in one word, is:"
FIRST = {"max_new_tokens": 6, "temperature": 0}
NEXT = {"max_new_tokens": 5, "temperature": 0}


@pytest.fixture(scope="module", params=[pytest.param("native", marks=pytest.mark.model),
                                        pytest.param("torch", marks=pytest.mark.model)])
def engine(request):
    if request.param == "native":
        from sglc_runtime.engine.native_engine import NativeEngine

        e = NativeEngine(model="default", num_kv_slots=2048)
    else:
        from sglc_runtime.engine.engine import Engine

        e = Engine(dtype="float32", num_kv_slots=2048, max_running_requests=8)
    yield e
    e.shutdown()


def busy(e) -> bool:
    stats = e.stats()
    return bool(stats.num_waiting or stats.num_running)


def drain(e) -> None:
    """Step a thread-less engine until nothing is held, queued or running (an idle engine takes a
    held precompute once it has been held about a step)."""
    deadline = time.monotonic() + 60
    while (e.precomputes.num_held or busy(e)) and time.monotonic() < deadline:
        if not busy(e):
            time.sleep(0.002)
        e.step()
    assert not e.precomputes.num_held and not busy(e)


def first_call(e, program_id: str, continuation: str = CONTINUATION, prompt=PROMPT):
    assert e.flush_cache()
    hint = ProgramHint(program_id, 0, continuation=continuation)
    return e.wait(e.submit(prompt, FIRST, hint=hint))


def test_the_next_prompt_is_cached_when_the_call_ends_and_outputs_are_unchanged(engine):
    e = engine
    before = e.stats()
    out = first_call(e, "p:cached")
    after = e.stats()
    # NOTE: held as the call ended: an idle engine waits a step for the next call before it runs it
    assert after.precomputes == before.precomputes + 1 and e.precomputes.num_held == 1 and not busy(e)
    drain(e)
    next_prompt = PROMPT + out.text + CONTINUATION
    ids = e.tokenizer.encode(next_prompt)
    hinted = e.wait(e.submit(next_prompt, NEXT, hint=ProgramHint("p:cached", NEVER)))
    assert hinted.cached_tokens == len(ids) - 1  # all but its last token: that row samples
    assert e.stats().prompt_tokens - after.prompt_tokens == len(ids)  # the precompute is not a client's prompt
    e.end_program("p:cached")
    assert e.flush_cache()
    plain = e.wait(e.submit(next_prompt, NEXT))
    assert plain.cached_tokens == 0 and hinted.token_ids == plain.token_ids


def test_a_precompute_the_next_call_overtakes_is_withdrawn(engine):
    e = engine
    before = e.stats()
    out = first_call(e, "p:overtaken")
    next_prompt = PROMPT + out.text + CONTINUATION
    rid = e.submit(next_prompt, NEXT, hint=ProgramHint("p:overtaken", NEVER))  # within the step it waits
    after = e.stats()
    assert after.precomputes_withdrawn == before.precomputes_withdrawn + 1 and after.num_waiting == 1
    assert not e.precomputes.num_held
    assert e.wait(rid).text
    e.end_program("p:overtaken")


def test_the_end_of_a_program_withdraws_its_precompute(engine):
    e = engine
    before = e.stats()
    first_call(e, "p:ended")
    e.end_program("p:ended")
    after = e.stats()
    assert after.precomputes_withdrawn == before.precomputes_withdrawn + 1
    assert after.num_waiting == 0 and after.num_running == 0 and not e.precomputes.num_held


def test_a_busy_engine_runs_a_precompute_beside_its_other_requests(engine):
    """Another request is decoding: the precompute joins the next step, without waiting."""
    e = engine
    assert e.flush_cache()
    other = e.submit("Write a long story about a cat:", {"max_new_tokens": 40, "temperature": 0})
    out = e.wait(e.submit(PROMPT, FIRST, hint=ProgramHint("p:busy", 0, continuation=CONTINUATION)))
    assert e.precomputes.num_held == 1 and e.stats().num_running == 1
    e.step()
    assert not e.precomputes.num_held
    drain(e)
    next_prompt = PROMPT + out.text + CONTINUATION
    hinted = e.wait(e.submit(next_prompt, NEXT, hint=ProgramHint("p:busy", NEVER)))
    assert hinted.cached_tokens == len(e.tokenizer.encode(next_prompt)) - 1
    assert e.wait(other).text
    e.end_program("p:busy")


@pytest.mark.parametrize("case", ["no continuation", "token ids", "aborted"])
def test_nothing_is_precomputed_without_a_text_to_extend(engine, case):
    e = engine
    before = e.stats().precomputes
    if case == "no continuation":
        first_call(e, "p:none", continuation="")
    elif case == "token ids":
        first_call(e, "p:ids", prompt=e.tokenizer.encode(PROMPT))
    else:
        rid = e.submit(PROMPT, FIRST, hint=ProgramHint("p:aborted", 0, continuation=CONTINUATION))
        e.abort(rid)
        assert e.wait(rid).finish_reason["type"] == "abort"
    assert e.stats().precomputes == before and e.stats().num_waiting == 0 and not e.precomputes.num_held


def test_a_client_cannot_use_a_precompute_request_id(engine):
    with pytest.raises(ValueError, match="the runtime's own"):
        engine.submit(PROMPT, FIRST, rid="sglc-precompute/1/p:x")


def test_the_bookkeeping_holds_releases_and_withdraws_one_per_program():
    """Precomputes alone (the engine's queue is a list here): held until due, one per program, the
    program's next call withdraws it held (here) or queued (names it for the engine), not once the
    engine has started it."""
    queue: list[str] = []

    def withdraw(rid: str) -> bool:  # NOTE: what each engine's _withdraw does with its queue
        if rid in queue:
            queue.remove(rid)
            return True
        return False

    def claim(p: Precomputes, program_id: str) -> None:
        p.claim(program_id, withdraw)

    p = Precomputes()
    p.step_s = 1.0  # NOTE: a held precompute waits about a step on an idle engine
    a1, b1 = p.new_rid("a"), p.new_rid("b")
    p.hold("a", a1, a1, now=0.0)
    p.hold("b", b1, b1, now=0.5)
    assert p.due(0.9, busy=False) == [] and p.wait_s(0.9) == pytest.approx(0.1)
    queue += p.due(1.0, busy=False)
    assert queue == [a1] and p.num_held == 1
    a2 = p.new_rid("a")
    claim(p, "a")  # a newer one for a: the queued one goes first
    p.hold("a", a2, a2, now=1.0)
    assert p.counts == {"submitted": 3, "withdrawn": 1}
    queue += p.due(1.0, busy=True)  # busy: everything held goes
    assert sorted(queue) == sorted([a2, b1]) and p.wait_s(1.0) is None
    queue.remove(b1)  # b's started: its next call withdraws nothing
    claim(p, "b")
    claim(p, "a")
    assert queue == [] and p.counts == {"submitted": 3, "withdrawn": 2}
    p.done(a2)
    claim(p, "a")
    assert p.counts["withdrawn"] == 2
    p.hold("c", "c1", "c1", now=2.0)
    claim(p, "c")  # held: dropped by the table itself
    assert p.num_held == 0 and p.counts["withdrawn"] == 3
