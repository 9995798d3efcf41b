"""f-strings, str.format, % and + over program arguments (and generated text) compile to constant
text and FORMAT/APPEND nodes whose run-time text is Python's; compiled runs build byte-identical
prompts to eager runs for inputs of several shapes, in Python and through `sglc compile` + `sglc run`;
every other str operation on such text either gives the eager result or is refused at the user's line.
"""
from __future__ import annotations

import importlib.util
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


@sgl.function
def formatted_qa(s, question, n, tags=("a",)):
    s += sgl.system("You answer briefly.")
    s += sgl.user(f"Question: {question}\nAsked {n:>3} times, tags {tags!r}.")
    s += "Context: {} / {q!s:.5}".format(question, q=question) + " (%s, %4.1f%%)" % (question, n)
    s += sgl.assistant(sgl.gen("answer", max_tokens=6))
    s += f"\nSo the answer to {question!a} is {s['answer']}." + " Done: " + str(n) + "."
    return f"[{question}]"


INPUTS = [
    {"question": "Why is the sky blue?", "n": 3, "tags": ["sky", "light"]},
    {"question": "", "n": 12.5, "tags": []},
    {"question": "Ünïcödé {braces} %s and 'quotes'", "n": -1, "tags": None},
    {"question": "multi\nline\ttab", "n": True, "tags": {"k": 1}},
]


def prompts(backend: ScriptedBackend) -> list[str]:
    return [text for kind, text in backend.calls]


def test_formatted_arguments_trace_into_constant_text_and_format_nodes():
    """The f-string's constants are CONSTANT_TEXT (the batch prefix hint still covers the system prompt);
    argument references are FORMAT pieces (conversion, spec, printf kept); a gen's text is APPENDed;
    the graph verifies, prints and round-trips through graph.pb."""
    graph = formatted_qa.compile().graph
    verify(graph)
    assert decode(encode(graph)) == graph
    pieces = [n.attrs["pieces"] for n in graph.nodes if n.op is Op.FORMAT]
    assert [{"input": 0}] in pieces and [{"input": 0, "spec": ">3"}] in pieces
    assert [{"input": 0, "conversion": "r"}] in pieces and [{"input": 0, "printf": "%4.1f"}] in pieces
    assert [{"input": 0, "conversion": "a"}] in pieces and [{"input": 0, "conversion": "s", "spec": ".5"}] in pieces
    texts = [n.attrs["text"] for n in graph.nodes if n.op is Op.CONSTANT_TEXT]
    assert "Question: " in texts and "\nAsked " in texts
    hint = next(n for n in graph.nodes if n.op is Op.CACHE_PREFIX)
    assert graph.nodes.index(hint) > next(i for i, n in enumerate(graph.nodes) if n.attrs.get("text") == "Question: ")
    listing = str(graph)
    assert "format[pieces=[{'input': 0, 'spec': '>3'}]](%n)" in listing


@pytest.mark.parametrize("arguments", INPUTS, ids=["plain", "empty", "unicode", "multiline"])
def test_compiled_formatting_builds_the_prompts_eager_python_builds(arguments):
    """Same inputs, same deterministic backend: every prompt sent, the final text, the variables and the
    return value are identical eager and compiled (and after a graph.pb round trip)."""
    eager_backend, compiled_backend = ScriptedBackend(), ScriptedBackend()
    eager = formatted_qa.run(backend=eager_backend, **arguments)
    compiled = formatted_qa.compile()
    state = compiled.run(backend=compiled_backend, **arguments)
    assert prompts(compiled_backend) == prompts(eager_backend)
    assert state.text() == eager.text() and state.variables() == eager.variables()
    assert state.ret_value == eager.ret_value == f"[{arguments['question']}]"
    again = CompiledProgram(decode(encode(compiled.graph)))
    assert again.run(backend=ScriptedBackend(), **arguments).text() == eager.text()


def test_sglc_compile_then_sglc_run_gives_the_eager_results(tmp_path, monkeypatch):
    """`sglc compile` + `sglc run` (a deterministic backend in place of the embedded runtime): one result
    line per input, each with the eager run's text and variables."""
    from sglc import cli_run
    from sglc.cli import main

    program = tmp_path / "formatted.py"
    program.write_text(Path(__file__).read_text().split("# ----- program for the CLI -----")[-1])
    graph, args, out = tmp_path / "f.pb", tmp_path / "args.jsonl", tmp_path / "out.jsonl"
    assert main(["compile", str(program), "-o", str(graph)]) == 0
    args.write_text("".join(json.dumps(a) + "\n" for a in INPUTS))
    monkeypatch.setattr(cli_run, "_make_backend", lambda a: ScriptedBackend())
    assert main(["run", str(graph), "--input", str(args), "--output", str(out), "--no-progress"]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    module = _load(program)
    for arguments, result in zip(INPUTS, results):
        eager = module.cli_formatted.run(backend=ScriptedBackend(), **arguments)
        assert result["error"] is None and result["text"] == eager.text() and result["variables"] == eager.variables()


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_formatted_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ----- every str operation on a formatted argument: the eager result or a TraceError -----

#: method -> arguments; every public str method appears (the test checks that).
STR_METHODS = {
    "capitalize": (), "casefold": (), "center": (30, "*"), "count": ("o",), "encode": (), "endswith": ("?",),
    "expandtabs": (4,), "find": ("o",), "format": (), "format_map": ({},), "index": ("Q",), "isalnum": (),
    "isalpha": (), "isascii": (), "isdecimal": (), "isdigit": (), "isidentifier": (), "islower": (),
    "isnumeric": (), "isprintable": (), "isspace": (), "istitle": (), "isupper": (), "join": (["x", "y"],),
    "ljust": (30,), "lower": (), "lstrip": (), "maketrans": ("a", "b"), "partition": (":",),
    "removeprefix": ("Q: ",), "removesuffix": ("?",), "replace": ("o", "0"), "rfind": ("o",), "rindex": ("Q",),
    "rjust": (30,), "rpartition": (":",), "rsplit": (), "rstrip": (), "split": (), "splitlines": (),
    "startswith": ("Q",), "strip": (), "swapcase": (), "title": (), "translate": ({111: 48},), "upper": (),
    "zfill": (30,),
}
#: Operators and builtins on the text, as expressions over `t`.
OPERATIONS = {
    "len": "len(t)", "index0": "t[0]", "slice": "t[1:4]", "in": "'o' in t", "eq": "t == 'Q: x'", "lt": "t < 'R'",
    "times": "t * 2", "plus": "t + '!' + t", "radd": "'>' + t", "percent": "t % ()", "hash": "hash(t)",
    "iter": "list(t)", "bool": "bool(t)", "str": "str(t)", "repr": "repr(t)", "format": "format(t, '>20')",
    "fstring": "f'<{t}>'", "fstring_spec": "f'<{t:>20}>'", "join_items": "'|'.join([t, t])",
}


def test_the_table_covers_every_public_str_method():
    assert set(STR_METHODS) == {name for name in dir(str) if not name.startswith("_")}


def _operation_module(tmp_path: Path):
    lines = ["import sglc as sgl\n"]
    for name, args in STR_METHODS.items():
        lines.append(f"@sgl.function\ndef m_{name}(s, q):\n    t = f'Q: {{q}}?'\n"
                     f"    s += repr(t.{name}(*{args!r}))\n")
    for name, expr in OPERATIONS.items():
        lines.append(f"@sgl.function\ndef o_{name}(s, q):\n    t = f'Q: {{q}}?'\n    s += repr({expr})\n")
    path = tmp_path / "str_operations.py"
    path.write_text("\n".join(lines))
    return _load(path)


def test_every_str_operation_on_formatted_text_matches_eager_or_is_refused(tmp_path):
    """For every str method, operator and builtin: tracing raises a one-line TraceError at the user's
    line, or the compiled program appends exactly what eager Python appends, for several inputs."""
    module = _operation_module(tmp_path)
    exact, refused = [], []
    for name in [f"m_{m}" for m in STR_METHODS] + [f"o_{o}" for o in OPERATIONS]:
        prog = getattr(module, name)
        try:
            compiled = prog.compile()
        except TraceError as err:
            assert str(err).startswith("str_operations.py:") and "\n" not in str(err), (name, str(err))
            refused.append(name)
            continue
        for q in ["world", "", "Tab\there: it's ünï", "hello world!"]:
            eager = _eager_text(prog, q)
            assert compiled.run(q=q, backend=ScriptedBackend()).text() == eager, (name, q)
        exact.append(name)
    assert {"m_startswith", "m_endswith", "m_join", "o_times", "o_plus", "o_radd", "o_bool", "o_str", "o_repr",
            "o_format", "o_fstring", "o_fstring_spec", "o_join_items"} <= set(exact)
    assert {"m_upper", "m_strip", "m_replace", "o_len", "o_slice", "o_in", "o_eq", "o_hash"} <= set(refused)


def _eager_text(prog, q):
    try:
        return prog.run(q=q, backend=ScriptedBackend()).text()
    except Exception as err:  # NOTE: an operation eager Python refuses must then be refused when tracing
        raise AssertionError(f"{prog.name} compiled but fails eagerly: {err}") from err


# ----- where formatting does not trace, it says so -----

def _helper_builds(q):
    return f"Question: {q}"


def test_an_fstring_in_a_helper_function_is_refused_naming_its_line():
    """Functions the program calls are not rewritten: an f-string over an argument there is a TraceError
    at the helper's line saying where formatting works; a function defined inside the program works."""
    @sgl.function
    def calls_helper(s, q):
        s += _helper_builds(q)

    @sgl.function
    def defines_helper(s, q):
        def build(x):
            return f"Question: {x}"
        s += build(q) + (lambda x: f" ({x!r})")(q)

    with pytest.raises(TraceError, match=r"test_formatted_arguments.py:\d+: cannot use argument \"q\" in an "
                                         r"f-string or format\(\) here while tracing: formatting it works in the "
                                         r"@sgl.function's own code"):
        calls_helper.trace()
    backend = ScriptedBackend()
    assert defines_helper.compile().run(q="hi", backend=backend).text() == "Question: hi ('hi')"


def test_a_program_whose_file_changed_since_import_is_not_rewritten(tmp_path):
    """The tracer recompiles a program from its source only when that source is the code that runs:
    after the file is edited, the f-string is refused (never a program built from other code)."""
    import linecache

    path = tmp_path / "edited.py"
    path.write_text("import sglc as sgl\n\n@sgl.function\ndef prog(s, q):\n    s += f'Q: {q}'\n")
    module = _load(path)
    path.write_text("import sglc as sgl\n\n\n@sgl.function\ndef prog(s, q):\n    s += f'Other: {q}!'\n")
    linecache.checkcache(str(path))
    with pytest.raises(TraceError, match="in an f-string or format"):
        module.prog.trace()


def test_formatted_text_works_as_an_image_path_and_in_called_programs():
    """image(f"...{name}...") and a formatted value passed to another program compile to the eager prompt."""
    @sgl.function
    def describe(s, text):
        s += "Describe: " + text + sgl.gen("d", max_tokens=3)

    @sgl.function
    def prog(s, name, k):
        s += sgl.user(sgl.image(f"https://example.com/{name}_{k:02d}.png") + f"Look at {name}.")
        d = describe(text=f"{name} #{k}")
        s += sgl.assistant(d["d"])

    backend = ScriptedBackend(supports_images=True)
    eager = prog.run(name="cat", k=3, backend=backend)
    compiled = prog.compile().run(name="cat", k=3, backend=backend)
    assert compiled.text() == eager.text() and compiled.messages() == eager.messages()
    assert "https://example.com/cat_03.png" in json.dumps(compiled.messages())


def test_a_format_spec_from_an_argument_is_refused():
    """f"{x:{width}}" with a symbolic width: the spec must be known at compile time."""
    @sgl.function
    def prog(s, x, width):
        s += f"{x:{width}}"

    with pytest.raises(TraceError, match=r"as the format spec of an f-string"):
        prog.trace()


# ----- program for the CLI -----
import sglc as sgl  # noqa: E402,F811


@sgl.function
def cli_formatted(s, question, n, tags=("a",)):
    s += sgl.system("You answer briefly.")
    s += sgl.user(f"Question: {question}\nAsked {n:>3} times, tags {tags!r}.")
    s += "Context: %s" % (question,) + "{0}{0}".format(n)
    s += sgl.assistant(sgl.gen("answer", max_tokens=6))
