"""Symbolic values fail loudly: each Python construct that needs a run-time value raises a
one-line TraceError naming the construct, the value, and the user's file:line."""
import os

import pytest

import sglc as sgl
from sglc.errors import SglcError
from sglc.frontend.errors import TraceError

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line number of the unique line in this file that ends with `# @marker`."""
    with open(__file__) as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


# Each construct lives on its own marked line, so the expected file:line is exact.
def use_bool(v):
    if v:  # @bool
        pass


def use_len(v):
    return len(v)  # @len


def use_iter(v):
    for _ in v:  # @iter
        pass


def use_fstring(v):
    return f"value: {v}"  # @fstring


def use_format(v):
    return "{}".format(v)  # @format


def use_str(v):
    return str(v)  # @str


def use_int(v):
    return int(v)  # @int


def use_float(v):
    return float(v)  # @float


def use_index(v):
    return ["a", "b"][v]  # @index


def use_contains(v):
    return "needle" in v  # @contains


def use_hash(v):
    return {v: 1}  # @hash


def use_less(v):
    return v < "m"  # @less


def use_method(v):
    return v.strip()  # @method


def use_subscript(v):
    return v[0]  # @subscript


def use_unpack(v):
    a, b = v  # @unpack
    return a, b


def use_and(v):
    return v and "x"  # @and


CONSTRUCTS = {
    # name: (use, text the message must contain)
    "bool": (use_bool, "as a condition (bool())"),
    "len": (use_len, "in len()"),
    "iter": (use_iter, "in a for loop or unpacking (iter())"),
    "fstring": (use_fstring, "in an f-string or format()"),
    "format": (use_format, "in an f-string or format()"),
    "str": (use_str, "in str()"),
    "int": (use_int, "in int()"),
    "float": (use_float, "in float()"),
    "index": (use_index, "as an integer index (__index__)"),
    "contains": (use_contains, "on the right of `in`"),
    "hash": (use_hash, "as a dict key or set member (hash())"),
    "less": (use_less, "in a < comparison"),
    "method": (use_method, "with .strip"),
    "subscript": (use_subscript, "with [...] indexing"),
    "unpack": (use_unpack, "unpacking"),
    "and": (use_and, "as a condition (bool())"),
}


def gen_result_program(use):
    @sgl.function
    def prog(s):
        s += sgl.gen("x", max_tokens=4)
        use(s["x"])

    return prog


def argument_program(use):
    @sgl.function
    def prog(s, question):
        use(question)

    return prog


def select_program(use):
    @sgl.function
    def prog(s):
        s += sgl.select("pick", choices=["a", "b"])
        use(s["pick"])

    return prog


def expect_one_line_error(prog, construct, value_text):
    use, phrase = CONSTRUCTS[construct]
    with pytest.raises(TraceError) as err:
        prog.trace()
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith(f"{HERE}:{line_of(construct)}: "), message
    assert phrase in message and value_text in message and "while tracing" in message, message
    return message


@pytest.mark.parametrize("construct", sorted(CONSTRUCTS))
def test_gen_result_construct_is_a_one_line_trace_error(construct):
    """Using a gen result in `construct` fails at that line, naming gen("x")."""
    message = expect_one_line_error(gen_result_program(CONSTRUCTS[construct][0]), construct,
                                    'the result of gen("x")')
    assert "select" in message  # the hint points to the branching that does work


#: What compiles on an argument (a list known when the program starts): a for loop over it and
#: an item of it (tests/test_loops_over_arguments.py).
ARGUMENT_COMPILES = {"iter", "subscript"}


@pytest.mark.parametrize("construct", sorted(set(CONSTRUCTS) - ARGUMENT_COMPILES))
def test_argument_construct_is_a_one_line_trace_error(construct):
    """Using a symbolic argument in `construct` fails at that line and says how to bind it."""
    message = expect_one_line_error(argument_program(CONSTRUCTS[construct][0]), construct,
                                    'argument "question"')
    assert "fn.trace(question=...)" in message


@pytest.mark.parametrize("construct", sorted(ARGUMENT_COMPILES))
def test_a_for_loop_over_an_argument_and_its_items_compile(construct):
    """`for x in arg` and `arg[0]` on an argument trace (a loop, an item), where a gen result still fails."""
    argument_program(CONSTRUCTS[construct][0]).trace()


@pytest.mark.parametrize("construct", ["bool", "len", "fstring", "str", "int"])
def test_select_result_outside_a_comparison_is_a_trace_error(construct):
    """Only comparison with a choice branches; other uses of a select result fail loudly."""
    message = expect_one_line_error(select_program(CONSTRUCTS[construct][0]), construct,
                                    'the result of select("pick")')
    assert "compare it with one of its choices" in message


def test_trace_error_is_an_sglc_error():
    """TraceError derives from SglcError, so the CLI prints it without a traceback."""
    assert issubclass(TraceError, SglcError)


def test_iterating_a_list_argument_compiles_to_a_loop():
    """`for ex in examples` over an unbound argument is a loop of the graph (issue #29; it used to
    be refused): loop_begin at the `for` line, the body, loop_end."""
    @sgl.function
    def prog(s, examples):
        for ex in examples:  # @iter-arg
            s += ex

    graph = prog.trace()
    begin = next(n for n in graph.nodes if n.op.value == "loop_begin")
    assert begin.source == f"{HERE}:{line_of('iter-arg')}" and begin.inputs[0].attrs["name"] == "examples"
    assert [n.op.value for n in graph.nodes][-3:] == ["loop_begin", "append", "loop_end"]


def test_binding_the_list_argument_makes_the_loop_trace():
    """The same program traces once the list is bound (each item becomes constant text)."""
    @sgl.function
    def prog(s, examples):
        for ex in examples:
            s += ex + "\n"

    graph = prog.trace(examples=["one", "two"])
    assert [n.attrs["text"] for n in graph.nodes] == ["one\n", "two\n"]
    assert graph.meta["arg_names"] == []


def test_comparing_a_gen_result_names_it():
    """== on a gen result is not a branch: the error names the gen and points to select."""
    @sgl.function
    def prog(s):
        s += sgl.gen("mood")
        if s["mood"] == "happy":  # @eq-gen
            s += "!"

    with pytest.raises(TraceError, match=rf'^{HERE}:{line_of("eq-gen")}: cannot compare the result of '
                                         r'gen\("mood"\) with == while tracing'):
        prog.trace()


def test_comparing_an_argument_is_an_error():
    """== on an argument fails (it is not a select)."""
    @sgl.function
    def prog(s, lang):
        if lang != "en":  # @ne-arg
            s += "translate"

    with pytest.raises(TraceError, match=rf'^{HERE}:{line_of("ne-arg")}: cannot compare argument "lang" with !='):
        prog.trace()


def test_symbolic_value_as_a_gen_parameter_is_an_error():
    """Sampling parameters must be compile-time constants; a symbolic one says so."""
    @sgl.function
    def prog(s, budget):
        s += sgl.gen("x", max_tokens=budget)  # @param

    with pytest.raises(TraceError, match=rf'^{HERE}:{line_of("param")}: cannot use argument "budget" as '
                                         r"gen\(max_tokens=...\)"):
        prog.trace()


def test_symbolic_fork_size_is_an_error():
    """s.fork(n) with a symbolic n names the argument."""
    @sgl.function
    def prog(s, n):
        s.fork(n)  # @fork-size

    with pytest.raises(TraceError, match=rf'^{HERE}:{line_of("fork-size")}: cannot use argument "n" as the size'):
        prog.trace()


def _debug_repr(value):
    return repr(value)


def test_unhashable_and_unprintable_values_still_have_a_repr():
    """repr() of a symbolic value works outside the program's code (debuggers and pytest rely on it);
    inside it, repr(q) is the run-time repr (formatted text), as eager execution appends."""
    seen = {}

    @sgl.function
    def prog(s, q):
        seen["repr"] = _debug_repr(q)
        seen["inside"] = repr(q)

    prog.trace()
    assert seen["repr"] == '<symbolic argument "q">'
    assert seen["inside"].parts[0].conversion == "r"


def test_adding_a_non_string_to_a_symbolic_value_is_a_type_error():
    """value + 1 is a TypeError naming the offending type."""
    @sgl.function
    def prog(s, q):
        s += q + 1

    with pytest.raises(TypeError, match="cannot append a value of type int"):
        prog.trace()


def test_calling_another_program_with_a_wrong_argument_is_located_at_the_call():
    """SGLang's `other(x=...)` compiles as its own stream (test_program_calls.py); a bad call is
    reported at the caller's line, naming the program."""
    @sgl.function
    def inner(s, x):
        s += x

    @sgl.function
    def outer(s):
        inner(y="hi")  # @call

    with pytest.raises(TraceError, match=rf"^{HERE}:{line_of('call')}: calling program inner: "):
        outer.trace()


def test_value_from_another_trace_is_rejected():
    """A symbolic value leaked from one trace cannot be used in another."""
    leaked = {}

    @sgl.function
    def first(s, q):
        leaked["q"] = q

    @sgl.function
    def second(s):
        s += leaked["q"]

    first.trace()
    with pytest.raises(TraceError, match="belongs to another trace"):
        second.trace()


def test_default_that_a_graph_cannot_store_is_an_error_at_the_def_line():
    """A parameter default outside the attribute domain asks the user to bind it."""
    @sgl.function
    def prog(s, model=object()):  # @default
        s += "x"

    with pytest.raises(TraceError, match=rf"^{HERE}:{line_of('default')}: the default of parameter model"):
        prog.trace()
