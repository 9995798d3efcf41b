"""A gen's continuation (issue 28, precompute; sglc/executor/continuation.py): the text the program
appends after the gen's output before its next call, sent with the gen when the executor knows it.

The property every case checks: the next call's prompt starts with the gen's prompt + its output +
the continuation it was sent with, so what the runtime precomputes is what the next call reads.
The executor's output is recorded by the Backend subclass of the hint tests.
"""
from __future__ import annotations

import pytest
from test_executor_support import default_reply
from test_program_hints_executor import RecordingBackend, chain, multi_turn

import sglc as sgl
from sglc.wire.backend import GenParams, Prompt
from sglc.wire.program_hint import MAX_CONTINUATION_CHARS, NEVER, ProgramHint


@sgl.function
def fstring(s, q, n):
    s += "Q: " + q + sgl.gen("x", max_tokens=3)
    s += f"\nAgain, {q} (try {n}):" + sgl.gen("y", max_tokens=3)


@sgl.function
def uses_its_own_output(s, q):
    s += "Q: " + q + sgl.gen("x", max_tokens=3)
    s += "\nYou said" + s["x"] + ". More:" + sgl.gen("y", max_tokens=3)


@sgl.function
def in_a_loop(s, items):
    for it in items:
        s += "Item " + it + ":" + sgl.gen("a", max_tokens=3) + "\n"
    s += "Summary:" + sgl.gen("z", max_tokens=3)


@sgl.function
def branch(s, q):
    s += q + sgl.gen("g", max_tokens=3)
    s += sgl.select("kind", choices=["math", "chat"])
    if s["kind"] == "math":
        s += "Compute:" + sgl.gen("m", max_tokens=3)
    else:
        s += "Talk:" + sgl.gen("c", max_tokens=3)


class Recorder(RecordingBackend):
    def reply_of(self, prompt_text: str) -> str:
        """The output the scripted backend gave a gen with this prompt."""
        return default_reply(Prompt(text=prompt_text), GenParams())


def run(fn, **arguments) -> Recorder:
    backend = Recorder()
    fn.compile().run(backend=backend, **arguments)
    return backend


def gens(backend: Recorder) -> list[tuple[str, ProgramHint]]:
    return [(text, hint) for kind, text, hint in backend.hints if kind == "gen"]


def check_extended(backend: Recorder) -> list[str]:
    """Every continuation sent is what the next call's prompt holds after the gen's output; returns them."""
    sent = []
    for k, (kind, text, hint) in enumerate(backend.hints):
        if kind != "gen" or not hint.continuation:
            continue
        output = backend.reply_of(text)
        later = [t for _, t, _ in backend.hints[k + 1:]]
        assert any(t.startswith(text + output + hint.continuation) for t in later), (text, hint.continuation, later)
        sent.append(hint.continuation)
    return sent


def test_constant_text_after_a_gen_is_its_continuation():
    backend = run(chain, q="2+2?")
    assert check_extended(backend) == ["\nAnswer:"]
    assert gens(backend)[1][1].continuation == ""  # NOTE: the last gen: nothing reads on


def test_chat_role_markers_and_the_next_user_turn_are_known():
    """After the first answer: the assistant's end, the user's turn with its argument, the assistant's start."""
    backend = run(multi_turn, q1="Hi", q2="Bye")
    assert check_extended(backend) == ["<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"]


def test_an_fstring_of_arguments_is_rendered():
    backend = run(fstring, q="why", n=3)
    assert check_extended(backend) == ["\nAgain, why (try 3):"]


def test_text_that_reads_the_gen_output_ends_the_known_part():
    """``s["x"]`` is the gen's own output: only the constant before it is sent."""
    backend = run(uses_its_own_output, q="why")
    assert check_extended(backend) == ["\nYou said"]


def test_a_loop_item_ends_the_known_part_and_the_loop_end_stops_the_walk():
    """Inside a loop the text after the gen up to the body's end is known; the next item's text is not
    walked into (a loop boundary), and every continuation sent is still what the next call reads."""
    backend = run(in_a_loop, items=["x", "y"])
    sent = check_extended(backend)
    assert sent == ["\n", "\n"]


def test_a_guarded_node_after_the_gen_stops_the_walk():
    """The gen before a select: the select is the next call (no text between); the cases' gens end the
    program (NEVER): no continuation anywhere."""
    backend = run(branch, q="2+2?")
    assert check_extended(backend) == []
    assert all(h.next_use == NEVER or h.continuation == "" for _, h in gens(backend))


def test_without_program_hints_nothing_is_sent():
    backend = Recorder()
    chain.compile().run(q="x", backend=backend, program_hints=False)
    assert all(h is None for _, _, h in backend.hints)


def test_a_long_argument_is_cut_at_the_limit():
    backend = run(fstring, q="w" * (MAX_CONTINUATION_CHARS * 2), n=1)
    [(_, first), _] = gens(backend)
    assert len(first.continuation) == MAX_CONTINUATION_CHARS and first.continuation.startswith("\nAgain, www")


def test_the_hint_carries_its_continuation_on_every_wire():
    from sglc.wire.proto import runtime_pb2
    hint = ProgramHint("p:1", 0, 5, continuation="\nAnswer:")
    assert ProgramHint.from_json(hint.to_json()) == hint
    message = runtime_pb2.ProgramHint()
    hint.to_pb(message)
    assert ProgramHint.from_pb(message) == hint
    # behind sglang-router the request id carries it verbatim after the program id
    for text in ("\nAnswer:", "a/b/c\n\tü €", "/", "x" * MAX_CONTINUATION_CHARS):
        with_text = ProgramHint("p:1", 0, 5, continuation=text)
        rid = with_text.to_rid("n1")
        assert ProgramHint.from_rid(rid) == with_text and ProgramHint.rid_head(rid) == "sglc-ph/0/5/n1/p:1"
    assert ProgramHint.from_rid(ProgramHint("p:1", 0, 5).to_rid("n1")) == ProgramHint("p:1", 0, 5)
    with pytest.raises(ValueError, match="rid .*continuation has 4097 characters"):
        ProgramHint.from_rid("sglc-ph/0/0/n1/p/" + "x" * (MAX_CONTINUATION_CHARS + 1))
    long_tail = "sglc-ph/0/0/n1/p/" + "x" * (MAX_CONTINUATION_CHARS + 1)
    assert ProgramHint.rid_head(long_tail) == long_tail and ProgramHint.rid_head("req-1") == "req-1"
    with pytest.raises(ValueError, match="continuation has 4097 characters"):
        ProgramHint("p", 0, continuation="x" * (MAX_CONTINUATION_CHARS + 1))
    with pytest.raises(TypeError, match="continuation must be a string"):
        ProgramHint.from_json({"program_id": "p", "continuation": 3})
