"""gen(min_tokens=N) (SGLang's name; the runtime's min_new_tokens): the runtime ignores a stop that
would end the output earlier until N tokens exist; the program's text is then cut at the first stop
match, as SGLang's frontend gets it (its detokenizer trims at the first match), eagerly and compiled alike."""
from __future__ import annotations

import pytest

import sglc as sgl
from sglc_runtime.server.engine_backend import EngineBackend

MIN_TOKENS = 8
PROMPT = "Count from one to twenty: one, two, three,"


@sgl.function
def count_until_comma(s):
    s += PROMPT + sgl.gen("more", max_tokens=24, stop=",", temperature=0)


@sgl.function
def count_at_least(s):
    s += PROMPT + sgl.gen("more", max_tokens=24, min_tokens=MIN_TOKENS, stop=",", temperature=0)


def test_min_tokens_is_checked_at_the_users_line_and_stored_on_the_gen():
    """min_tokens is an int in [0, 2**20]; the gen stores it under the one inside name,
    min_new_tokens."""
    assert sgl.gen("x", min_tokens=3).attrs["min_new_tokens"] == 3
    with pytest.raises(ValueError, match="min_tokens"):
        sgl.gen("x", min_tokens=-1)


@pytest.fixture(scope="module")
def backend():
    be = EngineBackend()
    yield be
    be.close()


@pytest.mark.model
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_stop_before_min_tokens_does_not_end_the_gen(backend, mode):
    """Greedy: without min_tokens the stop ends the gen within a few tokens; with it, the runtime
    generates at least MIN_TOKENS tokens, and the variable is still the text before the first stop
    (SGLang's trim_matched_stop: output[:output.find(stop)])."""
    def run(prog):
        return (prog.run(backend=backend) if mode == "eager" else prog.compile().run(backend=backend))

    plain, padded = run(count_until_comma), run(count_at_least)
    short = plain.get_meta_info("more")["completion_tokens"]
    assert short < MIN_TOKENS, f"the stop must fire before {MIN_TOKENS} tokens for this test to mean something"
    assert padded.get_meta_info("more")["completion_tokens"] >= MIN_TOKENS
    assert padded["more"] == plain["more"] and "," not in padded["more"]
