"""gen(stop_regex=...) (SGLang's gen keyword; one row of sglc.wire.sampling_table): the output ends
once a match of the pattern ends in it (the matched text stays, as in SGLang), eagerly and
compiled (over gRPC: tests/test_srt_backend.py)."""
from __future__ import annotations

import re

import pytest

import sglc as sgl
from sglc_runtime.server.engine_backend import EngineBackend

PROMPT = "Count from one to twenty: one, two, three,"
PATTERN = r"f[a-z]+,"


@sgl.function
def count(s):
    s += PROMPT + sgl.gen("more", max_tokens=24, temperature=0)


@sgl.function
def count_to_an_f_word(s):
    s += PROMPT + sgl.gen("more", max_tokens=24, stop_regex=PATTERN, temperature=0)


def test_stop_regex_is_checked_at_the_users_line_and_stored_as_a_list():
    assert sgl.gen("x", stop_regex="a+").attrs["stop_regex"] == ["a+"]
    assert sgl.gen("x", stop_regex=["a", "b"]).attrs["stop_regex"] == ["a", "b"]
    with pytest.raises(TypeError, match="stop_regex"):
        sgl.gen("x", stop_regex=5)
    graph = count_to_an_f_word.compile().graph
    assert "stop_regex=['f[a-z]+,']" in str(graph)


@pytest.fixture(scope="module")
def backend():
    be = EngineBackend()
    yield be
    be.close()


def ends_at_first_match(text: str) -> bool:
    match = re.search(PATTERN, text)
    return match is not None and match.end() == len(text)


@pytest.mark.model
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_the_gen_ends_where_the_first_match_ends(backend, mode):
    """Greedy: the run without stop_regex goes past an f-word; with it, the text is that run's
    text up to the end of the first match."""
    def run(prog):
        return prog.run(backend=backend) if mode == "eager" else prog.compile().run(backend=backend)

    plain, stopped = run(count)["more"], run(count_to_an_f_word)["more"]
    first = re.search(PATTERN, plain)
    assert first is not None and first.end() < len(plain), f"the plain run must pass an f-word: {plain!r}"
    assert stopped == plain[:first.end()]
    assert ends_at_first_match(stopped)


@pytest.mark.model
def test_run_level_stop_regex_is_a_default_for_every_gen(backend):
    """SGLang's run(stop_regex=...) applies to gens that set none (a str is a one-item list)."""
    state = count.run(backend=backend, stop_regex=PATTERN)
    assert ends_at_first_match(state["more"])
