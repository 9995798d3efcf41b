"""Precompute (issue 28; runtime/engine/precompute.py): when a call whose hint carries a
continuation ends, the engine prefills prompt + output + continuation at once, so the program's
next call finds its whole prompt cached; outputs never change; a precompute the next call (or the
program's end) overtakes is withdrawn. Both engines, the real default model (SmolLM2-135M GGUF).
"""
from __future__ import annotations

import pytest

from sglc.wire.program_hint import NEVER, ProgramHint

pytestmark = pytest.mark.model

PROMPT = "Question: what is the capital of France?\nThink step by step:"
CONTINUATION = "\nSo the answer, in one word, is:"
FIRST = {"max_new_tokens": 6, "temperature": 0}
NEXT = {"max_new_tokens": 5, "temperature": 0}


@pytest.fixture(scope="module", params=["native", "torch"])
def engine(request):
    if request.param == "native":
        from sglc_runtime.engine.native_engine import NativeEngine

        e = NativeEngine(model="default", num_kv_slots=2048)
    else:
        from sglc_runtime.engine.engine import Engine

        e = Engine(dtype="float32", num_kv_slots=2048, max_running_requests=8)
    yield e
    e.shutdown()


def drain(e) -> None:
    """Step a thread-less engine until nothing is queued or running."""
    while e.stats().num_waiting or e.stats().num_running:
        e.step()


def first_call(e, program_id: str, continuation: str = CONTINUATION, prompt=PROMPT):
    assert e.flush_cache()
    hint = ProgramHint(program_id, 0, continuation=continuation)
    return e.wait(e.submit(prompt, FIRST, hint=hint))


def test_the_next_prompt_is_cached_when_the_call_ends_and_outputs_are_unchanged(engine):
    e = engine
    before = e.stats()
    out = first_call(e, "p:cached")
    after = e.stats()
    assert after.precomputes == before.precomputes + 1 and after.num_waiting == 1  # queued as the call ended
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
    rid = e.submit(next_prompt, NEXT, hint=ProgramHint("p:overtaken", NEVER))  # before any step
    after = e.stats()
    assert after.precomputes_withdrawn == before.precomputes_withdrawn + 1 and after.num_waiting == 1
    assert e.wait(rid).text
    e.end_program("p:overtaken")


def test_the_end_of_a_program_withdraws_its_precompute(engine):
    e = engine
    before = e.stats()
    first_call(e, "p:ended")
    e.end_program("p:ended")
    after = e.stats()
    assert after.precomputes_withdrawn == before.precomputes_withdrawn + 1
    assert after.num_waiting == 0 and after.num_running == 0


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
    assert e.stats().precomputes == before and e.stats().num_waiting == 0


def test_a_client_cannot_use_a_precompute_request_id(engine):
    with pytest.raises(ValueError, match="the runtime's own"):
        engine.submit(PROMPT, FIRST, rid="sglc-precompute/1/p:x")
