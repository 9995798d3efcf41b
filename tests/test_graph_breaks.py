"""Graph breaks: prog.compile() of a program that runs Python on generated text runs compiled
segments with that Python between them (torch.compile's graph breaks); the result is the eager
run's; `explain()` and `sglc inspect program.py` list the breaks; `sglc compile` keeps refusing
the program at the line, saying why.
"""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from test_executor_support import ScriptedBackend

import sglc as sgl

PROGRAM = '''import sglc as sgl


@sgl.function
def calculator(s, question):
    s += sgl.system("You compute.")
    s += "Question: " + question + "\\nExpression: " + sgl.gen("expr", max_tokens=8, stop="\\n")
    expression = s["expr"].strip()  # @break-1
    allowed = set("0123456789+-*/(). ")
    value = eval(expression) if expression and set(expression) <= allowed else "unknown"
    s += f"\\nTool result: {value}\\n"
    if value == "unknown":
        s += "The tool could not help."
        return None
    checks = s.fork(2)
    for i, c in enumerate(checks):
        c += f"Check {i}: is {value} right?" + sgl.gen("check", max_tokens=3)
    checks.join()
    s += "Final answer:" + sgl.gen("answer", max_tokens=4, stop="\\n")
    return s["answer"].strip()  # @break-2


@sgl.function
def react(s, task):
    s += "Task: " + task + "\\n"
    for step in range(4):
        s += f"Thought {step}:" + sgl.gen("thought", max_tokens=4, stop="\\n") + "\\n"
        s += f"Action {step}:" + sgl.gen("action", max_tokens=3, stop="\\n") + "\\n"
        if "finish" in s["action"]:  # @break-react
            break
        s += f"Observation {step}: {len(s['action'])} characters\\n"
    s += "Done."
'''


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.splitlines(), 1) if line.rstrip().endswith(f"# @{marker}"))


@pytest.fixture()
def module(tmp_path):
    path = tmp_path / "tool_programs.py"
    path.write_text(PROGRAM)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_tool_programs_{abs(hash(tmp_path))}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    mod.path = path
    return mod


def calculator_reply(prompt, params):
    if prompt.text.endswith("Expression: "):
        return " 6*7" if "six" in prompt.text else " bananas"
    return " 42" if prompt.text.endswith("Final answer:") else " yes"


def react_reply(prompt, params):
    if prompt.text.rstrip().endswith(("Action 0:", "Action 1:")):
        return " search"
    return " finish" if "Action" in prompt.text.splitlines()[-1] else " think more"


def prompts(backend):
    return sorted(text for kind, text in backend.calls)


def test_compile_runs_python_on_generated_text_between_compiled_segments(module):
    """prog.compile() of a tool-using program no longer raises: each input's text, variables, prompts and
    return value are the eager run's, through both branches of its Python."""
    compiled = module.calculator.compile()
    for question in ("What is six times seven?", "What is a fruit?"):
        eager_backend, compiled_backend = ScriptedBackend(reply=calculator_reply), ScriptedBackend(reply=calculator_reply)
        eager = module.calculator.run(question=question, backend=eager_backend)
        state = compiled.run(question=question, backend=compiled_backend)
        assert state.text() == eager.text() and state.variables() == eager.variables()
        assert state.ret_value == eager.ret_value and state.messages() == eager.messages()
        assert [t for k, t in compiled_backend.calls if k != "cache_prefix"] == [t for k, t in eager_backend.calls]
    assert compiled.run(question="six", backend=ScriptedBackend(reply=calculator_reply)).ret_value == "42"


def test_explain_lists_the_breaks_and_sglc_compile_refuses_at_the_line(module, tmp_path, capsys):
    """explain(): the first break (found compiling) and the ones runs met, each at its line with the value
    and construct; `sglc compile` exits 2 naming the first line and why; `sglc inspect program.py` explains."""
    from sglc.cli import main
    from sglc.executor.compiled import GraphBreakError

    compiled = module.calculator.compile()
    first = f"tool_programs.py:{line_of('break-1')}"
    assert [str(b) for b in compiled.breaks] == [f'{first}: the result of gen("expr") with .strip '
                                                 "(string methods need the value)"]
    compiled.run(question="What is six times seven?", backend=ScriptedBackend(reply=calculator_reply))
    assert [b.source for b in compiled.breaks] == [first, f"tool_programs.py:{line_of('break-2')}"]
    text = str(compiled.explain())
    assert "2 graph break(s)" in text and f"break 1: {first}" in text and "%expr : str = gen" in text
    with pytest.raises(GraphBreakError, match="graph breaks"):
        compiled.save(tmp_path / "x.pb")

    assert main(["compile", f"{module.path}:calculator", "-o", str(tmp_path / "c.pb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sglc: error: {first}: cannot use the result of gen(\"expr\") with .strip")
    assert "prog.compile() compiles around it (a graph break)" in err and err.count("\n") == 1
    assert main(["inspect", f"{module.path}:calculator"]) == 0
    out = capsys.readouterr().out
    assert f"break 1: {first}" in out and "graph traced before the first break:" in out


def test_a_program_without_breaks_explains_as_one_graph():
    """explain() of a fully compiled program: no graph breaks, one graph (what sglc compile writes)."""
    @sgl.function
    def plain(s, q):
        s += f"Q: {q}\nA:" + sgl.gen("a", max_tokens=2)

    explanation = plain.compile().explain()
    assert explanation.num_breaks == 0 and "no graph breaks: one graph of" in str(explanation)


def test_a_python_loop_with_a_break_on_generated_text_runs_like_eager(module):
    """ReAct: a Python loop whose exit depends on each action's text; every segment (one per step) runs
    compiled; the text and variables are the eager run's, and explain lists the break once."""
    compiled = module.react.compile()
    eager_backend, compiled_backend = ScriptedBackend(reply=react_reply), ScriptedBackend(reply=react_reply)
    eager = module.react.run(task="find x", backend=eager_backend)
    state = compiled.run(task="find x", backend=compiled_backend)
    assert state.text() == eager.text() and state.variables() == eager.variables()
    assert "Observation 1" in state.text() and "Action 2: finish" in state.text()
    assert [b.source for b in compiled.breaks] == [f"tool_programs.py:{line_of('break-react')}"]


def test_segments_are_compiled_graphs_forks_run_in_parallel_with_their_hint(module):
    """The segment after a break is a compiled graph: its fork gets a fork hint (cache_prefix) and the
    two checks run at the same time (a barrier of 2 would time out otherwise)."""
    barrier = threading.Barrier(2, timeout=20)

    def reply(prompt, params):
        if "Check" in prompt.text.splitlines()[-1]:
            barrier.wait()
        return calculator_reply(prompt, params)

    backend = ScriptedBackend(reply=reply)
    state = module.calculator.compile().run(question="six times seven", backend=backend)
    assert state.error() is None and backend.max_in_flight >= 2
    assert "cache_prefix" in backend.kinds()


def test_run_batch_with_breaks_keeps_input_order_and_failures_apart(module):
    """run_batch over a program with breaks: states in input order; a backend failure is that input's error."""
    def reply(prompt, params):
        if "boom" in prompt.text:
            raise RuntimeError("backend down")
        return calculator_reply(prompt, params)

    inputs = [{"question": "six times seven"}, {"question": "boom"}, {"question": "a fruit"}]
    states = module.calculator.compile().run_batch(inputs, backend=ScriptedBackend(reply=reply), num_threads=3)
    assert [s.result.arguments["question"] for s in states] == [i["question"] for i in inputs]
    assert states[0].error() is None and states[2].error() is None and states[0].ret_value == "42"
    assert "backend down" in states[1].error()


def test_a_break_inside_an_open_fork_or_role_is_refused_at_the_line():
    """A segment must be a graph of its own: a break while a fork is unjoined (or a role is open) is a
    TraceError at that line saying what to close first."""
    @sgl.function
    def in_fork(s):
        forks = s.fork(2)
        forks += sgl.gen("x", max_tokens=2)
        if "yes" in forks[0]["x"]:
            s += "y"
        forks.join()

    @sgl.function
    def in_role(s):
        s += sgl.assistant_begin() + sgl.gen("x", max_tokens=2)
        if "yes" in s["x"]:
            s += "y"
        s += sgl.assistant_end()

    backend = ScriptedBackend()
    with pytest.raises(Exception, match=r"test_graph_breaks.py:\d+: cannot break the graph here .* the fork at "
                                        r"test_graph_breaks.py:\d+ is not joined yet"):
        in_fork.compile().run(backend=backend)
    with pytest.raises(Exception, match=r"cannot break the graph here .* the assistant role is open"):
        in_role.compile().run(backend=backend)


def test_meta_info_and_messages_read_between_segments():
    """s.get_meta_info(x) and s.messages() in the program's Python are a break: they read the run so far."""
    @sgl.function
    def prog(s):
        s += sgl.user("Hi") + sgl.assistant(sgl.gen("x", max_tokens=2))
        tokens = s.get_meta_info("x")["completion_tokens"]
        s += sgl.user(f"{tokens} tokens, {len(s.messages())} messages")

    backend = ScriptedBackend()
    eager, compiled = prog.run(backend=backend), prog.compile().run(backend=backend)
    assert compiled.text() == eager.text() and "2 messages" in compiled.text()


def test_select_comparisons_and_typed_values_work_between_segments():
    """Once a program has breaks, a select compared with its choice and int() of a typed gen are plain
    Python on the run's values, as eagerly."""
    @sgl.function
    def prog(s):
        s += "Pick:" + sgl.select("mood", choices=["happy", "sad"])
        s += " Count:" + sgl.gen("n", dtype=int, max_tokens=3)
        total = int(s["n"]) + 1
        if s["mood"] == "happy":
            s += f" Plus one: {total}."
        return total

    backend = ScriptedBackend()
    eager, compiled = prog.run(backend=backend), prog.compile().run(backend=backend)
    assert compiled.text() == eager.text() and compiled.ret_value == eager.ret_value


# ----- on the real model -----

@pytest.mark.model
def test_a_tool_program_with_breaks_gives_the_eager_greedy_text_on_the_embedded_runtime(module):
    """Greedy on the embedded runtime: the calculator compiled with its graph breaks gives the eager text."""
    backend = sgl.Runtime()
    try:
        for question in ("What is 6 times 7? Write it as an expression like 2*3.",):
            eager = module.calculator.run(question=question, temperature=0, backend=backend)
            compiled = module.calculator.compile().run(question=question, temperature=0, backend=backend)
            assert compiled.text() == eager.text() and compiled.variables() == eager.variables()
    finally:
        backend.shutdown()
