"""A program that calls another without passing its state (`d = expand_tip(topic=t, tip=s["tip_1"])`,
then `s += d["detail"]`): eagerly a separate run on the caller's backend (SGLang's semantics);
compiled, the callee is its own stream of the caller's graph — starting empty, waiting only for
the values passed in, running in parallel with the other calls. Eager and compiled agree
(test_eager.py, and on the real model test_compiled_program.py, run `tips_with_details`)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from test_executor_support import ScriptedBackend, expand_tip, tips_with_details

import sglc as sgl
from sglc.cli import main
from sglc.ir import Op
from sglc.ir.serialize import decode, encode
from sglc.ir.verify import verify


@pytest.fixture(autouse=True)
def no_default_backend():
    sgl.set_default_backend(None)
    yield
    sgl.set_default_backend(None)


def test_each_call_is_a_program_stream_that_reads_only_what_is_passed():
    """Two calls: two FORK(n=1, program=expand_tip) streams; each reads its tip by a VARIABLE node,
    and the caller reads each `detail` back the same way. The graph verifies and survives graph.pb."""
    graph = tips_with_details.compile().graph
    forks = [n for n in graph.nodes if n.op is Op.FORK]
    assert [(f.attrs["n"], f.attrs.get("program")) for f in forks] == [(1, "expand_tip")] * 2
    reads = [(n.stream, n.attrs["name"]) for n in graph.nodes if n.op is Op.VARIABLE]
    callee_streams = sorted({s for s, name in reads if name.startswith("tip_")})
    assert len(callee_streams) == 2 and [name for s, name in reads if s == 0] == ["detail", "detail"]
    verify(graph)
    assert decode(encode(graph)) == graph
    assert not [n for n in graph.nodes if n.op is Op.CACHE_PREFIX and n.stream in callee_streams]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_callee_prompt_starts_empty_and_its_result_reaches_the_caller(compiled):
    """The callee's gen sees only its own text; the caller's text holds both details."""
    backend = ScriptedBackend()
    prog = tips_with_details.compile() if compiled else tips_with_details
    state = prog.run(topic="tea", backend=backend)  # NOTE: no default backend: the call inherits this one
    callee_prompts = [text for kind, text in backend.calls if kind == "gen" and "Explain" in text]
    assert len(callee_prompts) == 2 and all(p.startswith("Topic: tea\nTip: ") for p in callee_prompts)
    assert state.error() is None and state.text().count("\n- ") == 2
    assert "detail" not in state.result.variables  # the callee's variables stay in its own state


def test_compiled_calls_run_in_parallel():
    """Both callee gens are in flight at once (each waits for the other at a barrier)."""
    barrier = threading.Barrier(2, timeout=20)

    def meet(kind, prompt):
        if "Explain" in prompt.text:
            barrier.wait()

    state = tips_with_details.compile().run(topic="tea", backend=ScriptedBackend(on_call=meet))
    assert state.error() is None


def test_sglc_compile_accepts_a_program_calling_a_program(tmp_path, capsys):
    """`sglc compile file.py:caller` writes the graph (it used to refuse the call)."""
    program = tmp_path / "tips.py"
    program.write_text(Path(__file__).with_name("test_executor_support.py").read_text())
    assert main(["compile", f"{program}:tips_with_details", "-o", str(tmp_path / "g.pb")]) == 0
    assert "3 streams" in capsys.readouterr().out


def test_appending_to_a_called_programs_state_is_refused_while_tracing():
    """The returned state is finished: appending to it names the program and what to do instead."""
    @sgl.function
    def caller(s, topic):
        d = expand_tip(topic=topic, tip="Steep it briefly.")
        d += "more"

    with pytest.raises(sgl.TraceError, match="cannot append to the state program expand_tip returned"):
        caller.trace()


def test_a_call_with_wrong_arguments_names_the_program():
    """A missing argument is a trace error naming the called program."""
    @sgl.function
    def caller(s, topic):
        expand_tip(topic=topic)

    with pytest.raises(sgl.TraceError, match="calling program expand_tip: missing a required argument: 'tip'"):
        caller.trace()
