"""Bad input fails at submit/construct time with a clear error; aborts and failures affect only
the requests concerned, and the engine keeps serving everything else (real default model)."""
from __future__ import annotations

import pytest

from sglc_runtime.engine import Engine
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.sampling.sampling_params import SamplingParams

pytestmark = pytest.mark.model

PROMPTS = ["Once upon a time", "The three primary colors are", "def fibonacci(n):", "Paris is the capital of"]
PARAMS = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(max_running_requests=16, max_context=256)


@pytest.fixture(scope="module")
def expected(engine) -> list[list[int]]:
    return [o.token_ids for o in engine.generate(PROMPTS, PARAMS)]


def _assert_serves(engine: Engine, expected: list[list[int]]) -> None:
    assert [o.token_ids for o in engine.generate(PROMPTS, PARAMS)] == expected


def test_unknown_model_path_fails_at_construction():
    """A model path that does not exist raises FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match="no/such/model"):
        Engine(model="/no/such/model")


def test_bad_engine_config_names_the_field():
    """Invalid engine settings raise before anything is loaded."""
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="int8")
    with pytest.raises(ValueError, match="chunked_prefill_size"):
        EngineConfig(chunked_prefill_size=0)


def test_prompt_longer_than_context_is_rejected_at_submit(engine, expected):
    """A prompt that cannot fit the context raises ValueError at submit; serving continues."""
    with pytest.raises(ValueError, match="context"):
        engine.submit("word " * 300, PARAMS)
    with pytest.raises(ValueError, match="context"):
        engine.submit("hello", SamplingParams(max_new_tokens=1000))
    _assert_serves(engine, expected)


@pytest.mark.parametrize("params,exc,match", [
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
    ({"stop": 5}, TypeError, "stop.*int"),
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"no_such_field": 1}, TypeError, "no_such_field"),
    (SamplingParams(stop_token_ids=[10**6]), ValueError, "stop_token_ids"),
    ("greedy", TypeError, "str"),
])
def test_bad_sampling_params_are_rejected_at_submit(engine, params, exc, match):
    """Invalid sampling parameters (as a dict or object) raise at submit, naming the problem."""
    with pytest.raises(exc, match=match):
        engine.submit("hello", params)
    assert engine.stats().num_waiting == 0


@pytest.mark.parametrize("prompt,exc", [("", ValueError), ([], ValueError), ([1, -5], ValueError),
                                         ([10**7], ValueError), (3.5, TypeError)])
def test_bad_prompts_are_rejected(engine, prompt, exc):
    """Empty prompts, out-of-vocabulary ids and non-prompt types raise at submit."""
    with pytest.raises(exc):
        engine.submit(prompt, PARAMS)


def test_duplicate_request_id_is_rejected(engine):
    """A request id already in use raises; the first request still completes."""
    rid = engine.submit(PROMPTS[0], PARAMS, rid="dup")
    with pytest.raises(ValueError, match="dup"):
        engine.submit(PROMPTS[1], PARAMS, rid="dup")
    assert len(engine.wait(rid).token_ids) == PARAMS.max_new_tokens


def test_generate_with_one_bad_prompt_submits_nothing(engine, expected):
    """generate() validates all prompts; a bad one leaves no half-submitted siblings behind."""
    with pytest.raises(ValueError):
        engine.generate(PROMPTS[:2] + [""], PARAMS)
    s = engine.stats()
    assert s.num_waiting == s.num_running == 0
    _assert_serves(engine, expected)


def test_abort_mid_decode_leaves_others_intact(engine, expected):
    """Aborting one request during decode finishes it as aborted; the rest match the reference."""
    rids = [engine.submit(p, PARAMS) for p in PROMPTS]
    for _ in range(4):
        engine.step()
    assert engine.abort(rids[1], "user cancelled")
    outs = [engine.wait(r) for r in rids]
    assert outs[1].finish_reason == {"type": "abort", "message": "user cancelled"}
    assert 0 < len(outs[1].token_ids) < PARAMS.max_new_tokens
    assert outs[1].token_ids == expected[1][: len(outs[1].token_ids)]
    assert [outs[i].token_ids for i in (0, 2, 3)] == [expected[i] for i in (0, 2, 3)]
    assert not engine.abort(rids[1]) and not engine.abort("never-submitted")
    engine.scheduler.check_integrity()


def test_abort_while_waiting(engine, expected):
    """A request aborted before it ever ran finishes with no tokens."""
    rid = engine.submit(PROMPTS[0], PARAMS)
    engine.abort(rid)
    out = engine.wait(rid)
    assert out.token_ids == [] and out.finish_reason["type"] == "abort"
    _assert_serves(engine, expected)


def test_closing_a_stream_early_aborts_the_request(engine, expected):
    """A consumer that stops iterating a stream aborts its request and frees its slots."""
    it = engine.stream(PROMPTS[2], PARAMS)
    next(it)
    it.close()
    s = engine.stats()
    assert s.num_running == s.num_waiting == 0
    engine.scheduler.check_integrity()
    _assert_serves(engine, expected)


def test_constraint_allowing_nothing_aborts_only_that_request(engine, expected):
    """A constraint whose mask allows no token aborts its own request with a constraint error;
    requests batched with it finish with unchanged outputs."""

    class EmptyCursor:
        def allowed_mask(self):
            import torch
            return torch.zeros(engine.runner.vocab_size, dtype=torch.bool)

        def advance(self, token_id):
            pass

        def is_finished(self):
            return False

    class Broken:
        def new_cursor(self):
            return EmptyCursor()

    bad = engine.submit(PROMPTS[0], PARAMS.replace(constraint=Broken()))
    good = [engine.submit(p, PARAMS) for p in PROMPTS]
    out = engine.wait(bad)
    assert out.finish_reason["type"] == "abort" and "allows no next token" in out.finish_reason["message"]
    assert out.token_ids == []
    assert [engine.wait(r).token_ids for r in good] == expected


def test_callback_exceptions_do_not_break_the_engine(engine, expected):
    """A stream callback that raises is logged; the request and the engine carry on."""
    seen = []

    def callback(chunk):
        seen.append(chunk)
        raise RuntimeError("consumer bug")

    engine.submit(PROMPTS[3], PARAMS, callback=callback)
    _assert_serves(engine, expected)
    assert seen[-1].finished and seen[-1].output.token_ids == expected[3]


def test_a_token_that_fails_to_process_aborts_only_its_request(engine, expected):
    """An exception while one request takes its token (e.g. its constraint cursor refuses it)
    ends that request as an abort naming the error; requests batched with it are unchanged."""

    class RefusingCursor:
        def allowed_mask(self):
            import torch
            return torch.ones(engine.runner.vocab_size, dtype=torch.bool)

        def advance(self, token_id):
            raise ValueError(f"injected: token {token_id} refused")

        def is_finished(self):
            return False

    class Refusing:
        def new_cursor(self):
            return RefusingCursor()

    bad = engine.submit(PROMPTS[0], PARAMS.replace(constraint=Refusing()))
    good = [engine.submit(p, PARAMS) for p in PROMPTS]
    out = engine.wait(bad)
    assert out.finish_reason["type"] == "abort" and "injected" in out.finish_reason["message"]
    assert [engine.wait(r).token_ids for r in good] == expected
    engine.scheduler.check_integrity()


def test_a_step_that_fails_before_its_results_are_processed_does_not_wedge_the_engine(engine, expected):
    """A step that raises after scheduling (a bug) aborts its requests; the background engine then
    serves new requests with unchanged outputs instead of failing every later step."""
    eng = Engine(EngineConfig(max_running_requests=16, max_context=256), share_model_with=engine)
    original = eng.scheduler.process_results
    failures = []

    def fails_once(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("injected scheduler bug")
        return original(*args, **kwargs)

    eng.scheduler.process_results = fails_once
    eng.start()
    try:
        victim = eng.submit(PROMPTS[0], PARAMS)
        assert eng.wait(victim, timeout=120).finish_reason["type"] == "abort"
        rids = [eng.submit(p, PARAMS) for p in PROMPTS]
        assert [eng.wait(r, timeout=120).token_ids for r in rids] == expected
    finally:
        eng.shutdown()
