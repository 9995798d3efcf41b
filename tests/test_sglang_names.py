"""SGLang frontend names that programs use besides the DSL: `sgl.global_config`, the regex
constants of `sglang.lang.ir` (here `sglc.lang.ir`), `run_batch(generator_style=True)`,
`sgl.flush_cache()`, `sgl.get_server_info()` and `sgl.OpenAI(...)`'s arguments."""
from __future__ import annotations

import re
import threading
import types

import pytest
from test_executor_support import ScriptedBackend

import sglc as sgl
from sglc import fsm
from sglc.lang.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR


@pytest.fixture(autouse=True)
def no_default_backend():
    sgl.set_default_backend(None)
    yield
    sgl.set_default_backend(None)


@sgl.function
def qa(s, q):
    s += "Q: " + q + "\nA:" + sgl.gen("a", max_tokens=3)


def test_global_config_has_sglangs_fields_and_defaults():
    """The fields SGLang's GlobalConfig has, with its defaults."""
    c = sgl.global_config
    assert (c.verbosity, c.default_backend, c.skip_special_tokens_in_output, c.spaces_between_special_tokens_in_out,
            c.enable_precache_with_tracing, c.enable_parallel_encoding) == (0, None, True, True, True, True)


def test_default_backend_is_global_config_default_backend_both_ways():
    """set_default_backend writes global_config.default_backend; assigning the field is used by run()."""
    first, second = ScriptedBackend(), ScriptedBackend()
    sgl.set_default_backend(first)
    assert sgl.global_config.default_backend is first
    sgl.global_config.default_backend = second
    qa.run(q="Hi?")
    assert first.calls == [] and second.kinds() == ["gen"]


def test_a_default_backend_that_is_not_a_backend_is_named():
    """global_config.default_backend = "http://..." fails at run() saying what it must be."""
    sgl.global_config.default_backend = "http://127.0.0.1:30000"
    with pytest.raises(TypeError, match=r"default_backend\) must be an sglc backend .*got str"):
        qa.run(q="Hi?")


def test_verbosity_2_prints_the_finished_text(capsys):
    """SGLang's verbosity 2: each finished eager run prints its text."""
    sgl.global_config.verbosity = 2
    try:
        state = qa.run(q="Hi?", backend=ScriptedBackend())
    finally:
        sgl.global_config.verbosity = 0
    assert capsys.readouterr().out == state.text() + "\n"


def test_regex_constants_are_sglangs_and_compile():
    """sglc.lang.ir mirrors sglang.lang.ir: the same patterns, and each compiles to an FSM."""
    assert (REGEX_INT, REGEX_FLOAT, REGEX_BOOL, REGEX_STR) == (
        r"[-+]?[0-9]+[ \n]*", r"[-+]?[0-9]*\.?[0-9]+[ \n]*", r"(True|False)", r"\"[\w\d\s]*\"")
    for pattern, sample in [(REGEX_INT, "-42 "), (REGEX_FLOAT, "3.5"), (REGEX_BOOL, "True"), (REGEX_STR, '"hi there"')]:
        assert re.fullmatch(pattern, sample)
        assert fsm.compile_regex(pattern) is not None


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_run_batch_generator_style_yields_in_order_before_the_batch_ends(compiled):
    """generator_style=True: a generator; input 0's state arrives while input 2 is still running."""
    release = threading.Event()

    def hold_input_2(kind, prompt):
        if "third" in prompt.text:
            assert release.wait(30), "input 2 was never released"

    backend = ScriptedBackend(on_call=hold_input_2)
    prog = qa.compile() if compiled else qa
    inputs = [{"q": "first"}, {"q": "second"}, {"q": "third"}]
    states = prog.run_batch(inputs, backend=backend, generator_style=True, num_threads=3)
    assert isinstance(states, types.GeneratorType)
    first = next(states)
    assert first.result.arguments == {"q": "first"} and first.error() is None
    release.set()
    rest = list(states)
    assert [s.result.arguments["q"] for s in rest] == ["second", "third"]
    plain = prog.run_batch(inputs, backend=ScriptedBackend())
    assert [s.text() for s in [first, *rest]] == [s.text() for s in plain]


def test_flush_cache_and_server_info_without_a_backend_are_false_and_none():
    """As in SGLang: no default backend -> flush_cache() is False, get_server_info() is None."""
    assert sgl.flush_cache() is False and sgl.get_server_info() is None


def test_server_info_of_the_default_backend_names_the_model():
    """get_server_info() reads the default backend's model facts; a backend without a cache
    to flush answers False."""
    sgl.set_default_backend(ScriptedBackend())
    info = sgl.get_server_info()
    assert info["model_path"] == "scripted" and info["context_length"] == 4096
    assert sgl.flush_cache() is False


@pytest.mark.parametrize("kwargs, message", [
    ({"is_azure": True}, "Azure OpenAI is not supported"),
    ({"chat_template": object()}, r"chat_template=\.\.\.\) is not supported"),
])
def test_openai_options_sglc_cannot_honour_are_refused(kwargs, message):
    """sgl.OpenAI(is_azure=True / chat_template=...) raise naming the option, before any request."""
    with pytest.raises(ValueError, match=message):
        sgl.OpenAI("gpt-4o-mini", **kwargs)
