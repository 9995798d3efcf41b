"""ScoreJob (Engine.score as abortable engine requests) on the real default model: windowed waves
give the same scores, and an abort from another thread stops the job and leaves the engine clean."""
from __future__ import annotations

import threading
import time

import pytest

from sglc_runtime.engine import Engine
from sglc_runtime.engine.score_job import ScoreAborted, ScoreJob

pytestmark = pytest.mark.model

PROMPT = "Question: which word names a color? Answer:"
CHOICES = [f" choice number {i} of the list" for i in range(24)]


@pytest.fixture(scope="module")
def engine():
    eng = Engine(num_kv_slots=4096)
    eng.start()
    yield eng
    eng.shutdown()


def assert_engine_clean(engine: Engine) -> None:
    stats = engine.stats()
    assert stats.num_running == 0 and stats.num_waiting == 0
    assert not engine._results, "the engine keeps outputs nobody will collect"


def test_windowed_waves_score_like_one_wave(engine):
    """Scores do not depend on how many continuations are in flight at once."""
    one_wave = ScoreJob(engine, PROMPT, CHOICES, window=len(CHOICES)).results()
    waves = ScoreJob(engine, PROMPT, CHOICES, window=5).results()
    for a, b in zip(one_wave, waves):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=2e-3)
    assert_engine_clean(engine)


def test_abort_from_another_thread_stops_the_job_and_collects_its_requests(engine):
    """abort() makes results() raise ScoreAborted with the reason; nothing stays queued or kept."""
    job = ScoreJob(engine, PROMPT + " (again)", CHOICES * 8, window=2)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            job.results()
        except BaseException as err:
            failure.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not job._in_flight and time.monotonic() < deadline:  # NOTE: abort mid-job, not before it
        time.sleep(0.005)
    assert job.abort("the client went away")
    thread.join(60)
    assert not thread.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], ScoreAborted), failure
    assert "the client went away" in str(failure[0])
    assert not job.abort("twice"), "a second abort is a no-op"
    assert_engine_clean(engine)


def test_a_choice_past_the_context_is_refused_before_any_engine_work(engine):
    """Validation (context length) raises at construction, before anything is submitted."""
    before = engine.stats().num_finished
    with pytest.raises(ValueError, match="choice 1"):
        ScoreJob(engine, "Hi", [" a", " word" * (engine.max_context + 10)])
    assert engine.stats().num_finished == before


def test_a_choice_that_merges_into_a_one_token_prompt_is_refused(engine):
    """'}' + '\\\\' is one token: nothing after the prompt's first token is left to score, which
    is a ValueError naming the choice (not a result with no tokens and a None logprob)."""
    assert len(engine.tokenizer.encode("}\\")) == 1
    with pytest.raises(ValueError, match="adds no token to score"):
        ScoreJob(engine, "}", [" ok", "\\"])
