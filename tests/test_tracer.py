"""The tracer: arguments, graph metadata, source lines, bindings, determinism, program calls."""
import os

import pytest

import sglc as sgl
from sglc.ir import Graph, Op, ValueType
from sglc.ir.verify import verify

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line number of the unique line in this file that ends with `# @marker`."""
    with open(__file__) as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


@sgl.function
def greet(s, name, greeting="Hello", times: int = 1):  # @greet-def
    s += greeting + ", " + name + "!"  # @greet-body
    s += sgl.gen("reply", max_tokens=8)  # @greet-gen


def test_trace_returns_a_graph_named_after_the_function_with_meta():
    """graph.name is the function name; meta holds arg_names and the source file."""
    g = greet.trace()
    assert isinstance(g, Graph) and g.name == "greet"
    assert g.meta == {"arg_names": ["name", "greeting", "times"], "source_file": HERE}
    verify(g)


def test_one_argument_node_per_parameter_in_order_with_defaults_and_types():
    """Unbound parameters become ARGUMENT nodes in order; defaults and annotations are kept."""
    args = greet.trace().arguments()
    assert [a.attrs for a in args] == [{"name": "name"}, {"name": "greeting", "default": "Hello"},
                                       {"name": "times", "default": 1}]
    assert [a.type for a in args] == [ValueType.ANY, ValueType.ANY, ValueType.INT]
    assert all(a.source == f"{HERE}:{line_of('greet-def')}" for a in args)


def test_every_node_carries_the_users_source_line():
    """meta["source"] of each node is the line in user code that created it (not sglc's)."""
    g = greet.trace()
    by_op = {n.op: n.source for n in g.nodes if n.op is not Op.ARGUMENT}
    assert by_op[Op.APPEND] == f"{HERE}:{line_of('greet-body')}"
    assert by_op[Op.GEN] == f"{HERE}:{line_of('greet-gen')}"
    assert all(n.source.startswith(HERE + ":") for n in g.nodes)


def test_bound_arguments_become_constants():
    """A bound str is CONSTANT_TEXT and no ARGUMENT node; arg_names lists only the unbound ones."""
    g = greet.trace(name="Ada")
    assert [a.attrs["name"] for a in g.arguments()] == ["greeting", "times"]
    assert g.meta["arg_names"] == ["greeting", "times"]
    texts = [n.attrs["text"] for n in g.nodes if n.op is Op.CONSTANT_TEXT]
    assert texts == [", ", "Ada", "!"]
    verify(g)


def test_bind_returns_a_program_with_fixed_arguments():
    """fn.bind(x=...) then trace() equals trace(x=...)."""
    assert greet.bind(name="Ada", greeting="Hi").trace() == greet.trace(name="Ada", greeting="Hi")


def test_unknown_bindings_are_rejected():
    """Binding a name the function does not have is a TypeError listing the parameters."""
    with pytest.raises(TypeError, match="greet has no parameter.*nme.*name, greeting, times"):
        greet.trace(nme="x")


def test_tracing_is_deterministic():
    """Two traces of the same program are equal graphs."""
    assert greet.trace() == greet.trace()


def test_keyword_only_and_positional_only_parameters_trace():
    """Parameters of every fixed kind become arguments."""
    @sgl.function
    def prog(s, a, /, b, *, c="x"):
        s += a + b + c

    g = prog.trace()
    assert [n.attrs["name"] for n in g.arguments()] == ["a", "b", "c"]
    verify(g)


def test_var_args_cannot_be_traced():
    """*args has no names to bind; the error points at the def line."""
    @sgl.function
    def prog(s, *items):  # @varargs
        s += "x"

    with pytest.raises(sgl.TraceError, match=rf"^{HERE}:{line_of('varargs')}: cannot trace parameter \*items"):
        prog.trace()


@sgl.function
def summarize(s, text, label="summary"):
    s += sgl.user("Summarize: " + text)  # @callee-user
    s += sgl.assistant(sgl.gen(label, max_tokens=32))
    return label


def test_calling_a_program_with_the_state_inlines_it():
    """other(s, ...) inside a traced program adds the callee's nodes to the same stream, with
    the callee's source lines and the caller's values."""
    seen = {}

    @sgl.function
    def report(s, doc):
        s += sgl.system("You are terse.")
        seen["ret"] = summarize(s, doc, label="short")
        s += sgl.user("Again, in five words: " + s["short"])

    g = report.trace()
    verify(g)
    assert seen["ret"] == "short"
    assert g.num_streams == 1 and len(g.arguments()) == 1
    gen = next(n for n in g.nodes if n.op is Op.GEN)
    assert gen.attrs["name"] == "short"
    appends = [n for n in g.nodes if n.op is Op.APPEND]
    assert appends[0].inputs == (g.arguments()[0],) and appends[1].inputs == (gen,)
    assert appends[0].source == f"{HERE}:{line_of('callee-user')}"


def test_calling_a_program_inside_a_fork_child_inlines_into_that_stream():
    """other(forks[i], ...) records the callee in child i's stream."""
    @sgl.function
    def prog(s, a, b):
        forks = s.fork(2)
        summarize(forks[0], a)
        summarize(forks[1], b, label="other")
        forks.join()

    g = prog.trace()
    verify(g)
    assert [(n.attrs["name"], n.stream) for n in g.nodes if n.op is Op.GEN] == [("summary", 1), ("other", 2)]


def test_sglang_style_state_keyword_call_also_inlines():
    """other(s=s, ...) is accepted like other(s, ...)."""
    @sgl.function
    def prog(s):
        summarize(s=s, text="abc")

    assert [n.op for n in prog.trace().nodes].count(Op.GEN) == 1


def test_trace_does_not_leak_tracing_state():
    """After a trace, calling a program without a state runs it (and so needs the executor)."""
    greet.trace()
    with pytest.raises(sgl.NotExecutableError):
        greet(name="x")
