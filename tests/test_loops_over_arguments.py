"""Loops over list arguments compile once (a loop region: loop_begin, body, loop_end) and run for any
length with the eager run's prompts, text and variables, in Python and through `sglc compile` +
`sglc run`; Python state carried across iterations, break, comprehensions and the like are refused
at the user's line; prefix hoisting and fork hints still apply around and inside them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_executor_support import ScriptedBackend

import sglc as sgl
from sglc.executor.compiled import CompiledProgram
from sglc.frontend.errors import TraceError
from sglc.ir.ops import Op
from sglc.ir.serialize import decode, encode
from sglc.ir.verify import verify

HERE = Path(__file__).name


@sgl.function
def rag(s, question, docs):
    s += sgl.system("Answer from the documents.")
    s += f"You have {len(docs)} documents.\n"
    for i, doc in enumerate(docs, 1):
        s += f"Document {i}: {doc}\n"
    s += "Question: " + question + "\nAnswer:" + sgl.gen("answer", max_tokens=5, stop="\n")


@sgl.function
def few_shot_chat(s, examples, question):
    for ex in examples:
        s += sgl.user(ex["q"])
        s += sgl.assistant(ex["a"])
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=4))


@sgl.function
def summarize_each(s, items):
    s += "Summaries:\n"
    for item in items:
        s += "- " + item + ": " + sgl.gen("summary", max_tokens=3, stop="\n") + "\n"
    s += "Overall:" + sgl.gen("overall", max_tokens=3, stop="\n")


@sgl.function
def nested_groups(s, groups):
    for gi, group in enumerate(groups):
        s += f"Group {gi}: {group['name']}\n"
        for j in range(len(group["items"])):
            s += f"  {j + 1}) {group['items'][j]}\n"
    s += "Pick one:" + sgl.gen("pick", max_tokens=3)


@sgl.function
def tools_joined(s, tools, task):
    s += "Tools: " + ", ".join(tools) + f" ({len(tools)})\nTask: {task}\n"
    s += "Tool:" + sgl.select("tool", choices=tools)


PROGRAMS = {
    "rag": (rag, lambda n: {"question": "What is up?", "docs": [f"doc {k} text" for k in range(n)]}),
    "few_shot_chat": (few_shot_chat, lambda n: {"examples": [{"q": f"{k}+{k}?", "a": str(2 * k)} for k in range(n)],
                                                "question": "5+5?"}),
    "summarize_each": (summarize_each, lambda n: {"items": [f"item{k}" for k in range(n)]}),
    "nested_groups": (nested_groups, lambda n: {"groups": [{"name": f"g{k}", "items": [f"x{k}{m}" for m in range(k + n)]}
                                                           for k in range(n)]}),
    "tools_joined": (tools_joined, lambda n: {"tools": [f"tool{k}" for k in range(max(n, 1))], "task": "go"}),
}


def prompts(backend: ScriptedBackend) -> list[str]:
    return [text for _, text in backend.calls]


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_loop_program_compiles_once_and_runs_for_any_length_like_eager(name):
    """One compiled graph (one loop body, whatever the input) gives, for lists of 0, 1, 2 and 5 items,
    exactly the eager run's prompts, text, variables and messages; a graph.pb round trip too."""
    prog, make = PROGRAMS[name]
    compiled = prog.compile()
    verify(compiled.graph)
    loaded = CompiledProgram(decode(encode(compiled.graph)))
    for n in (0, 1, 2, 5):
        if name == "summarize_each" and n == 0:
            continue  # NOTE: reads no variable after the loop, but Overall still runs: kept simple
        arguments = make(n)
        eager_backend, compiled_backend = ScriptedBackend(), ScriptedBackend()
        eager = prog.run(backend=eager_backend, **arguments)
        for program in (compiled, loaded):
            compiled_backend.calls.clear()
            state = program.run(backend=compiled_backend, **arguments)
            assert prompts(compiled_backend) == prompts(eager_backend), (name, n)
            assert state.text() == eager.text() and state.variables() == eager.variables(), (name, n)
            assert state.messages() == eager.messages()


def test_the_graph_holds_the_loop_once():
    """rag's graph has one loop_begin / loop_end pair and one copy of the body's text, for any length."""
    graph = rag.compile().graph
    ops = [n.op for n in graph.nodes]
    assert ops.count(Op.LOOP_BEGIN) == ops.count(Op.LOOP_END) == 1
    assert [n.attrs["text"] for n in graph.nodes if n.op is Op.CONSTANT_TEXT].count("Document ") == 1
    assert any(n.op is Op.LOOP_INDEX and n.attrs == {"start": 1} for n in graph.nodes)
    assert "loop_begin(%docs)" in str(graph)


def test_a_variable_set_in_the_loop_is_read_after_it_as_the_last_iteration_left_it():
    """s["summary"] after the loop is the last item's gen (a VARIABLE of the loop_end); with an empty
    list and nothing set before, compiled fails like eager (no such variable)."""
    @sgl.function
    def prog(s, items):
        for item in items:
            s += item + ":" + sgl.gen("summary", max_tokens=2) + "\n"
        s += "Last: " + s["summary"]

    backend = ScriptedBackend()
    for items in (["a"], ["a", "b", "c"]):
        eager, compiled = prog.run(items=items, backend=backend), prog.compile().run(items=items, backend=backend)
        assert compiled.text() == eager.text() and compiled["summary"] == eager["summary"]
    with pytest.raises(Exception, match="summary"):
        prog.run(items=[], backend=backend)
    assert "was never set" in prog.compile().run_batch([{"items": []}], backend=backend)[0].error()


def test_a_program_that_fails_for_an_empty_list_fails_compiled_too():
    """Eager Python raises for an empty list (None appended): the loop records it, and a compiled run
    with an empty list fails with that message; non-empty lists run."""
    @sgl.function
    def prog(s, docs):
        last = None
        for d in docs:
            last = "seen"
        s += last + sgl.gen("x", max_tokens=2)

    compiled = prog.compile()
    begin = next(n for n in compiled.graph.nodes if n.op is Op.LOOP_BEGIN)
    assert "fails when the list of the loop at" in begin.attrs["empty_error"]
    assert compiled.run(docs=["a"], backend=ScriptedBackend()).text().startswith("seen")
    error = compiled.run_batch([{"docs": []}], backend=ScriptedBackend())[0].error()
    assert "cannot append None" in error


# ----- what is refused, and where -----

REFUSED = {
    "counter": ('''
    n = 0
    for d in docs:
        n += 1
        s += str(n) + ". " + d''', "traces differently in its second iteration"),
    "flag": ('''
    first = True
    for d in docs:
        if first:
            s += "First: "
            first = False
        s += d''', "traces differently in its second iteration"),
    "count_after": ('''
    n = 0
    for d in docs:
        n += 1
        s += d
    s += f"{n} docs"''', "traces differently"),
    "collected": ('''
    seen = []
    for d in docs:
        seen.append(d)
    s += "|".join(seen)''', "after that loop ended"),
    "break": ('''
    for d in docs:
        s += d
        break
    s += "end"''', "was left before it ended (break or return inside it)"),
    "comprehension": ('''
    s += "\\n".join(f"- {d}" for d in docs)''', "only a `for` statement over it compiles"),
    "unpack": ('''
    a, b = docs
    s += a''', "only a `for` statement over it compiles"),
    "unnamed_gen": ('''
    for d in docs:
        s += d + sgl.gen(max_tokens=2)''', "give this gen a name"),
    "fork_in_body": ('''
    for d in docs:
        f = s.fork(2)
        f.join()''', "cannot fork or call a program inside the loop"),
    "branch_in_body": ('''
    for d in docs:
        s += sgl.select("x", choices=["y", "n"])
        if s["x"] == "y":
            s += d''', "cannot branch on a select inside the loop"),
    "generated_list": ('''
    s += sgl.gen("x", max_tokens=3)
    for c in s["x"]:
        s += c''', "iter()"),
    "return_in_body": ('''
    for d in docs:
        return d''', "returned inside the loop"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_loops_one_body_cannot_stand_for_are_refused_at_the_users_line(tmp_path, name):
    """Each shape raises a one-line TraceError at a line of the program, saying why (`sglc compile`'s
    trace; prog.compile() runs a loop over generated text with a graph break instead)."""
    body, reason = REFUSED[name]
    path = tmp_path / f"loop_{name}.py"
    path.write_text(f"import sglc as sgl\n\n@sgl.function\ndef prog(s, docs):{body}\n")
    module = _load(path)
    with pytest.raises(TraceError) as err:
        module.prog.trace()
    message = str(err.value)
    assert message.startswith(f"loop_{name}.py:") and "\n" not in message and reason in message, message


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_loops_{path.stem}_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ----- the paper's passes still apply -----

@sgl.function
def judge_with_criteria(s, essay, criteria):
    s += sgl.system("You are a strict judge.")
    s += "Essay: " + essay + "\nCriteria:\n"
    for c in criteria:
        s += f"- {c}\n"
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += "Evaluate it strictly, aspect " + str(i) + ":"
        for c in criteria:
            f += f" [{c}]"
        f += sgl.gen("verdict", max_tokens=3)
    forks.join()
    s += "Final:" + sgl.gen("final", max_tokens=3)


def test_prefix_hoisting_and_fork_hints_still_apply_around_loops():
    """The batch hint covers the constant prefix before the loop; the fork after a loop gets its hint
    and its children's shared words are hoisted; each child's own loop runs; compiled == eager."""
    from sglc.passes import default_pipeline

    pipeline = default_pipeline()
    graph = pipeline.run(judge_with_criteria.trace()).graph
    assert {"prefix_hoisting", "fork_hints"} <= set(pipeline.changed_by)
    hints = [n.attrs.get("scope") for n in graph.nodes if n.op is Op.CACHE_PREFIX]
    assert "batch" in hints and "fork" in hints
    assert any(n.op is Op.FORK and n.attrs.get("hoisted") for n in graph.nodes)
    assert sum(n.op is Op.LOOP_BEGIN for n in graph.nodes) == 3
    for criteria in ([], ["clarity"], ["clarity", "evidence", "style"]):
        eager_backend, compiled_backend = ScriptedBackend(), ScriptedBackend()
        eager = judge_with_criteria.run(essay="Cats.", criteria=criteria, backend=eager_backend)
        state = CompiledProgram(graph).run(essay="Cats.", criteria=criteria, backend=compiled_backend)
        assert state.text() == eager.text() and state.variables() == eager.variables()
        assert sorted(p for k, p in compiled_backend.calls if k == "gen") == sorted(prompts(eager_backend))


# ----- through the command line -----

CLI_PROGRAM = '''import sglc as sgl

@sgl.function
def rag(s, question, docs):
    s += sgl.system("Answer from the documents.")
    for i, doc in enumerate(docs, 1):
        s += f"Document {i}: {doc}\\n"
    s += f"Question: {question} ({len(docs)} documents)\\nAnswer:" + sgl.gen("answer", max_tokens=5, stop="\\n")
'''


def test_sglc_compile_then_sglc_run_gives_the_eager_results_for_every_length(tmp_path, monkeypatch):
    """`sglc compile` once, `sglc run` over inputs of 0, 1 and 4 documents (a deterministic backend in
    place of the embedded runtime): each line equals the eager run."""
    from sglc import cli_run
    from sglc.cli import main

    program = tmp_path / "rag_cli.py"
    program.write_text(CLI_PROGRAM)
    graph, args, out = tmp_path / "rag.pb", tmp_path / "args.jsonl", tmp_path / "out.jsonl"
    assert main(["compile", str(program), "-o", str(graph)]) == 0
    inputs = [{"question": "Why?", "docs": [f"d{k}" for k in range(n)]} for n in (0, 1, 4)]
    args.write_text("".join(json.dumps(a) + "\n" for a in inputs))
    monkeypatch.setattr(cli_run, "_make_backend", lambda a: ScriptedBackend())
    assert main(["run", str(graph), "--input", str(args), "--output", str(out), "--no-progress"]) == 0
    module = _load(program)
    for arguments, line in zip(inputs, out.read_text().splitlines()):
        result = json.loads(line)
        eager = module.rag.run(backend=ScriptedBackend(), **arguments)
        assert result["error"] is None and result["text"] == eager.text() and result["variables"] == eager.variables()


# ----- on the real model -----

@pytest.mark.model
def test_fstrings_and_loops_give_the_eager_greedy_text_on_the_embedded_runtime(tmp_path, capsys):
    """Greedy on the embedded runtime: for 0 and 2 documents, prog.compile().run and `sglc compile` +
    `sglc run` give exactly the eager text and variables (prompts built from f-strings and a loop)."""
    from sglc.cli import main

    program = tmp_path / "rag_model.py"
    program.write_text(CLI_PROGRAM)
    module = _load(program)
    inputs = [{"question": "What color is the sky?", "docs": [f"Fact {k}: the sky is blue." for k in range(n)]}
              for n in (0, 2)]
    graph, args, out = tmp_path / "rag.pb", tmp_path / "args.jsonl", tmp_path / "out.jsonl"
    assert main(["compile", str(program), "-o", str(graph)]) == 0
    args.write_text("".join(json.dumps(a) + "\n" for a in inputs))
    assert main(["run", str(graph), "--input", str(args), "--output", str(out), "--no-progress",
                 "--temperature", "0"]) == 0
    cli = [json.loads(line) for line in out.read_text().splitlines()]
    backend = sgl.Runtime()
    try:
        compiled = module.rag.compile()
        for arguments, line in zip(inputs, cli):
            eager = module.rag.run(backend=backend, temperature=0, **arguments)
            state = compiled.run(backend=backend, temperature=0, **arguments)
            assert state.text() == eager.text() == line["text"]
            assert state.variables() == eager.variables() == line["variables"]
    finally:
        backend.shutdown()
