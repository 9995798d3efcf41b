"""SGLang's Runtime API on the embedded runtime (`sgl.Runtime()`): `.get_tokenizer()`,
`.endpoint`, `.shutdown()`, `sgl.flush_cache()`, `sgl.get_server_info()`, and programs using
SGLang's regex constants, eager and compiled, identical under greedy sampling."""
from __future__ import annotations

import re

import pytest

import sglc as sgl
from sglc.lang.ir import REGEX_FLOAT, REGEX_INT, REGEX_STR

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def runtime():
    rt = sgl.Runtime()
    yield rt
    rt.shutdown()


@sgl.function
def typed_record(s, city):
    s += "City: " + city + "\nPopulation in millions: " + sgl.gen("population", regex=REGEX_FLOAT, max_tokens=6)
    s += "\nFounded (year): " + sgl.gen("year", regex=REGEX_INT, max_tokens=5)
    s += '\nNickname: ' + sgl.gen("nickname", regex=REGEX_STR, max_tokens=10)


def test_runtime_api_as_sglang(runtime):
    """get_tokenizer round-trips text; endpoint is the backend to call; the cache flushes when idle;
    get_server_info names the model."""
    tokenizer = runtime.get_tokenizer()
    assert tokenizer.decode(tokenizer.encode("Hello world", add_special_tokens=False)) == "Hello world"
    assert runtime.endpoint is runtime
    sgl.set_default_backend(runtime)
    try:
        assert sgl.flush_cache() is True
        info = sgl.get_server_info()
    finally:
        sgl.set_default_backend(None)
    assert "SmolLM2" in info["model_path"] and info["context_length"] > 0


def test_regex_constant_program_is_identical_eager_and_compiled(runtime):
    """Greedy: REGEX_INT/FLOAT/STR gens give the same strings eager and compiled, and match."""
    eager = typed_record.run(city="Lisbon", temperature=0, backend=runtime)
    compiled = typed_record.compile().run(city="Lisbon", temperature=0, backend=runtime)
    assert compiled.result.variables == eager.result.variables and compiled.text() == eager.text()
    assert re.fullmatch(REGEX_FLOAT, eager["population"]) and re.fullmatch(REGEX_INT, eager["year"])
    assert re.fullmatch(REGEX_STR, eager["nickname"])
