"""`prog.run(..., stream=True)`, `state.text_iter(var)` / `text_iter()` / `text_async_iter(var)`,
eager and compiled: pieces arrive while the gen still runs, and they add up to the final values.

The backend here streams a fixed reply in pieces and holds the last one until the test releases
it (a test double for the executor's plumbing); the real engine and the gRPC server stream in
tests/test_streaming_backends.py.
"""
from __future__ import annotations

import asyncio
import threading

import pytest
from test_executor_support import ScriptedBackend

import sglc as sgl
from sglc.wire.backend import GenResult


class PiecewiseBackend(ScriptedBackend):
    """Streams each reply as words; before the last word of gen "story" it waits for `release`."""

    def __init__(self) -> None:
        super().__init__(reply=lambda prompt, params: " once upon a time" if prompt.text.endswith("Story:") else " done")
        self.release = threading.Event()

    def generate_stream(self, prompt, params, on_text):
        result = self.generate(prompt, params)
        words = result.text.split(" ")[1:]
        for k, word in enumerate(words):
            if k == len(words) - 1 and prompt.text.endswith("Story:"):
                assert self.release.wait(30), "the test never released the last piece"
            on_text(" " + word)
        return GenResult(result.text, result.meta)


@sgl.function
def story(s, topic):
    s += "Topic: " + topic + "\nStory:" + sgl.gen("story", max_tokens=8)
    s += "\nMoral:" + sgl.gen("moral", max_tokens=4)


def _run(compiled: bool, backend, **kwargs):
    prog = story.compile() if compiled else story
    return prog.run(topic="a fox", stream=True, backend=backend, **kwargs)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_text_iter_of_a_variable_yields_pieces_before_the_gen_ends(compiled):
    """The first pieces of "story" arrive while its last piece is held back; together they are the value."""
    backend = PiecewiseBackend()
    state = _run(compiled, backend)
    pieces = state.text_iter("story")
    seen = ""
    while seen != " once upon a":  # NOTE: pieces that arrive together are yielded as one
        seen += next(pieces)
        assert " once upon a".startswith(seen)
    assert not backend.release.is_set()
    backend.release.set()
    assert seen + "".join(pieces) == " once upon a time" == state["story"]
    assert state.error() is None and state["moral"] == " done"


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_text_iter_of_the_state_adds_up_to_the_final_text(compiled):
    """text_iter() yields the whole prompt state in order; joined, it is state.text()."""
    backend = PiecewiseBackend()
    backend.release.set()
    state = _run(compiled, backend)
    assert "".join(state.text_iter()) == state.text() == "Topic: a fox\nStory: once upon a time\nMoral: done"


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_text_async_iter_streams_under_asyncio(compiled):
    """text_async_iter("story") gives the same pieces as text_iter, without blocking the loop."""
    backend = PiecewiseBackend()
    backend.release.set()

    async def collect():
        state = _run(compiled, backend)
        return [piece async for piece in state.text_async_iter("story")], state

    pieces, state = asyncio.run(collect())
    assert pieces and "".join(pieces) == state["story"] == " once upon a time"


def test_stream_is_a_run_keyword_not_a_program_argument():
    """run(stream=False) is SGLang's keyword: the program does not receive it (it has no such parameter)."""
    state = story.run(topic="a fox", stream=False, backend=ScriptedBackend())
    assert state.error() is None and list(state.text_iter("story")) == [state["story"]]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_failing_streamed_program_ends_its_iterators_and_reports_the_error(compiled):
    """A backend failure: text_iter stops, error() names the gen; nothing raises in the reader."""
    def fail(kind, prompt):
        raise RuntimeError("the model went away")

    state = _run(compiled, ScriptedBackend(on_call=fail))
    assert list(state.text_iter("story")) == []
    assert "the model went away" in state.error() and "story" in state.error()


def test_text_iter_while_tracing_is_refused():
    """Tracing a program that iterates its own text fails naming text_iter."""
    @sgl.function
    def reads_itself(s):
        s += "Hi" + sgl.gen("x", max_tokens=2)
        for _ in s.text_iter():
            pass

    with pytest.raises(sgl.TraceError, match="text_iter"):
        reads_itself.trace()
