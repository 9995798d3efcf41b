"""The eager interpreter: same semantics as the graph executor, plus programs the tracer refuses.

Most tests use the scripted backend of test_executor_support.py (a test double for the
executor's own logic); the model-marked test runs a tool-using program on the real engine.
"""
from __future__ import annotations

import threading

import pytest
from test_executor_support import EQUIVALENCE_CASES, ScriptedBackend

import sglc as sgl
from sglc.errors import SglcError
from sglc.executor.errors import ExecutionError
from sglc.executor.graph_executor import GraphExecutor


@pytest.fixture(autouse=True)
def no_default_backend():
    sgl.set_default_backend(None)
    yield
    sgl.set_default_backend(None)


def compiled_result(prog, backend, **arguments):
    executor = GraphExecutor(prog.compile().graph, backend)
    try:
        return executor.run(arguments)
    finally:
        executor.close()


@pytest.mark.parametrize("prog,arguments", EQUIVALENCE_CASES, ids=[p.name for p, _ in EQUIVALENCE_CASES])
def test_eager_and_compiled_agree_on_variables_text_and_messages(prog, arguments):
    """Same program, same deterministic backend: identical variables, final text and messages."""
    backend = ScriptedBackend()
    eager = prog.run(backend=backend, **arguments)
    compiled = compiled_result(prog, backend, **arguments)
    assert compiled.error is None
    assert eager.result.variables == compiled.variables
    assert eager.text() == compiled.text
    assert eager.messages() == compiled.messages


@sgl.function
def calculator_agent(s, question):
    s += "Question: " + question + "\nExpression: " + sgl.gen("expr", max_tokens=8, stop="\n")
    expression = s["expr"].strip()
    allowed = set("0123456789+-*/(). ")
    value = eval(expression) if expression and set(expression) <= allowed else "unknown"  # noqa: S307 - digits only
    s += "\nTool result: " + str(value) + "\n"
    if "unknown" in str(value):
        s += "The tool could not help."
    else:
        s += "Final answer:" + sgl.gen("answer", max_tokens=4, stop="\n")


def test_programs_the_tracer_refuses_run_eagerly():
    """Python code on generated text (a tool call, `in` on a result) fails to trace but runs eagerly."""
    with pytest.raises(sgl.TraceError, match="calculator_agent|test_eager.py"):
        calculator_agent.trace()
    backend = ScriptedBackend(reply=lambda prompt, params: " 6*7" if prompt.text.endswith("Expression: ") else " 42")
    state = calculator_agent.run(question="What is six times seven?", backend=backend)
    assert state["expr"] == " 6*7"
    assert "Tool result: 42\nFinal answer: 42" in state.text()
    assert state.error() is None


def test_eager_fork_branches_run_concurrently():
    """Children of an eager fork call the backend at the same time (a barrier of 3 would break)."""
    barrier = threading.Barrier(3, timeout=20)

    @sgl.function
    def prog(s):
        s += "Go."
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += f" part {i}:" + sgl.gen("part", max_tokens=2)
        forks.join()

    backend = ScriptedBackend(on_call=lambda kind, prompt: barrier.wait() if kind == "gen" else None)
    state = prog.run(backend=backend)
    assert len(state["part"]) == 3 and backend.max_in_flight == 3


def test_eager_errors_name_the_primitive_and_the_users_line():
    """A failing gen raises ExecutionError: 'while executing %name (gen) at test_eager.py:LINE: ...'."""
    @sgl.function
    def prog(s):
        s += "x" + sgl.gen("broken", max_tokens=2)

    def boom(kind, prompt):
        raise ConnectionError("no runtime")

    with pytest.raises(ExecutionError) as info:
        prog.run(backend=ScriptedBackend(on_call=boom))
    line = prog.func.__code__.co_firstlineno + 2
    assert str(info.value) == f"while executing %broken (gen) at test_eager.py:{line}: ConnectionError: no runtime"


def test_nested_roles_fail_at_the_users_line_before_running():
    """Opening a role inside an open role is reported at submission, like the tracer does."""
    @sgl.function
    def prog(s):
        s += sgl.user_begin()
        s += sgl.assistant_begin()

    with pytest.raises(ValueError, match=r"test_eager.py:\d+: cannot begin the assistant role inside the open user"):
        prog.run(backend=ScriptedBackend())


def test_run_batch_returns_states_in_order_and_keeps_failures_separate():
    """A failing input gives a state with .error(); the others have their variables."""
    @sgl.function
    def prog(s, q):
        s += "Q: " + q + "\nA:" + sgl.gen("a", max_tokens=2)

    def hook(kind, prompt):
        if "bad" in prompt.text:
            raise RuntimeError("refused")

    states = prog.run_batch([{"q": "one"}, {"q": "bad"}, {"q": "three"}], backend=ScriptedBackend(on_call=hook),
                            num_threads=3)
    assert [s.result.arguments["q"] for s in states] == ["one", "bad", "three"]
    assert states[0].error() is None and states[2].error() is None
    assert "while executing %a (gen)" in states[1].error() and "refused" in states[1].error()
    assert states[0]["a"] and states[2]["a"]


def test_the_default_backend_is_used_and_run_sampling_keywords_apply():
    """sgl.set_default_backend makes run() work without backend=; run(temperature=0) reaches the gen."""
    @sgl.function
    def prog(s):
        s += "Hi" + sgl.gen("x")

    backend = ScriptedBackend()
    sgl.set_default_backend(backend)
    state = prog.run(temperature=0, max_new_tokens=7)
    assert state["x"] and (backend.params[0].temperature, backend.params[0].max_new_tokens) == (0, 7)


def test_finished_state_reads_meta_info_and_refuses_appends():
    """get_meta_info gives the call's token counts; appending to a finished state is an error."""
    @sgl.function
    def prog(s):
        s += "Hi" + sgl.gen("x", max_tokens=2)

    state = prog.run(backend=ScriptedBackend())
    assert state.get_meta_info("x")["prompt_tokens"] == 2
    with pytest.raises(SglcError, match="finished"):
        state += "more"


@pytest.mark.model
def test_tool_use_program_runs_eagerly_on_the_embedded_runtime():
    """A program that parses a generated expression in Python runs end to end on the real engine."""
    backend = sgl.Runtime()
    try:
        state = calculator_agent.run(question="What is 6 times 7? Write it as an expression like 2*3.",
                                     backend=backend, temperature=0)
        assert isinstance(state["expr"], str)
        assert "Tool result: " in state.text()
        assert state.result.calls and all(c.prompt_tokens > 0 for c in state.result.calls)
    finally:
        backend.close()
