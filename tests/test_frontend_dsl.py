"""The DSL surface: each primitive records the right node (op, attrs, type, stream, source line)."""
import json
import os

import pydantic
import pytest

import sglc as sgl
from sglc.frontend.errors import NotExecutableError, TraceError
from sglc.ir import Op, ValueType
from dsl_helpers import marker_line, nodes_of, only, traced

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


# ----- gen -----

def test_gen_records_gen_node_with_set_params_type_stream_and_source():
    """gen() becomes one GEN in stream 0 with only the parameters the user set, typed STR."""
    @sgl.function
    def prog(s):
        s += sgl.gen("answer", max_tokens=16, stop="\n", temperature=0, top_p=0.9, top_k=20, min_p=0.05,  # @gen
                     frequency_penalty=0.5, presence_penalty=-0.5, ignore_eos=False, stop_token_ids=[2])

    node = only(traced(prog), Op.GEN)
    assert node.attrs == {
        "name": "answer", "max_new_tokens": 16, "stop": ["\n"], "stop_token_ids": [2], "temperature": 0.0,
        "top_p": 0.9, "top_k": 20, "min_p": 0.05, "frequency_penalty": 0.5, "presence_penalty": -0.5,
        "ignore_eos": False,
    }
    assert node.type is ValueType.STR and node.stream == 0 and node.guard is None
    assert node.source == f"{HERE}:{line_of('gen')}"


def test_gen_logprob_params_are_stored():
    """The logprob parameters of SGLang's gen are kept as attributes."""
    @sgl.function
    def prog(s):
        s += sgl.gen("x", return_logprob=True, logprob_start_len=0, top_logprobs_num=3, return_text_in_logprobs=True)

    attrs = only(traced(prog), Op.GEN).attrs
    assert attrs["return_logprob"] is True and attrs["logprob_start_len"] == 0
    assert attrs["top_logprobs_num"] == 3 and attrs["return_text_in_logprobs"] is True


@pytest.mark.parametrize("dtype, name", [(int, "int"), (float, "float"), (bool, "bool"), (str, "str"), ("int", "int")])
def test_gen_dtype_is_stored_by_name_and_the_output_stays_a_string(dtype, name):
    """gen(dtype=T) stores dtype's name; the value is the generated string (SGLang), so STR."""
    @sgl.function
    def prog(s):
        s += sgl.gen("v", dtype=dtype)

    node = only(traced(prog), Op.GEN)
    assert node.attrs["dtype"] == name and node.type is ValueType.STR


def test_a_typed_gens_value_concatenates_with_text_while_tracing():
    """SGLang's `s += "So " + s["hours"]` after gen(dtype=int) traces (the value is text)."""
    @sgl.function
    def prog(s):
        s += "Hours: " + sgl.gen("hours", dtype=int, max_tokens=3) + "\n"
        s += "So " + s["hours"] + " hours."

    graph = traced(prog)
    assert only(graph, Op.APPEND).inputs == (only(graph, Op.GEN),)


def test_gen_int_and_gen_string_are_typed_gens():
    """gen_int/gen_string are gens with dtype int/str that accept sampling parameters."""
    @sgl.function
    def prog(s):
        s += sgl.gen_int("n", max_tokens=4) + sgl.gen_string("t", temperature=0.5)

    n, t = nodes_of(traced(prog), Op.GEN)
    assert (n.attrs["dtype"], n.type, n.attrs["max_new_tokens"]) == ("int", ValueType.STR, 4)
    assert (t.attrs["dtype"], t.type, t.attrs["temperature"]) == ("str", ValueType.STR, 0.5)


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_json_schema_accepts_string_dict_and_pydantic_and_keeps_key_order():
    """A schema given as JSON text, dict or pydantic class is stored as the same compact JSON."""
    as_dict = Person.model_json_schema()
    expected = json.dumps(as_dict, separators=(",", ":"))
    for schema in (Person, as_dict, json.dumps(as_dict, indent=2)):
        gen = sgl.gen("p", json_schema=schema)
        assert gen.attrs["json_schema"] == expected
    assert list(json.loads(expected)["properties"]) == ["name", "age"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"regex": "("}, "not a valid regular expression"),
    ({"regex": "a", "dtype": int}, "at most one constraint"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_k": 0}, "top_k"),
    ({"dtype": list}, "dtype"),
    ({"json_schema": "{not json"}, "not valid JSON"),
    ({"stop": 5}, "stop"),
])
def test_gen_rejects_bad_parameters_at_the_users_line(kwargs, fragment):
    """An invalid gen parameter raises at once, naming it and the caller's file:line."""
    with pytest.raises((ValueError, TypeError)) as err:
        sgl.gen("x", **kwargs)  # @bad-gen
    assert fragment in str(err.value) and f"{HERE}:{line_of('bad-gen')}" in str(err.value)


# ----- select -----

@pytest.mark.parametrize("method, name", [
    (None, "token_length_normalized"),
    (sgl.token_length_normalized, "token_length_normalized"),
    (sgl.greedy_token_selection, "greedy_token_selection"),
    (sgl.unconditional_likelihood_normalized, "unconditional_likelihood_normalized"),
    ("greedy_token_selection", "greedy_token_selection"),
])
def test_select_records_choices_temperature_and_method_name(method, name):
    """select stores its choices, temperature and the choices_method's name."""
    kwargs = {} if method is None else {"choices_method": method}

    @sgl.function
    def prog(s):
        s += sgl.select("pick", choices=["a", "b"], temperature=0.3, **kwargs)

    node = only(traced(prog), Op.SELECT)
    assert node.attrs == {"name": "pick", "choices": ["a", "b"], "temperature": 0.3, "choices_method": name}
    assert node.type is ValueType.STR


def test_gen_with_choices_is_a_select_with_temperature_zero():
    """gen(choices=...) behaves like select (SGLang): a SELECT node, temperature 0 by default."""
    @sgl.function
    def prog(s):
        s += sgl.gen("pick", choices=["x", "y"])

    node = only(traced(prog), Op.SELECT)
    assert node.attrs["choices"] == ["x", "y"] and node.attrs["temperature"] == 0.0
    assert not nodes_of(prog.trace(), Op.GEN)


@pytest.mark.parametrize("choices", [None, [], ["a", "a"], ["a", 1], "ab"])
def test_select_rejects_bad_choices(choices):
    """select needs a non-empty list of distinct strings."""
    with pytest.raises((ValueError, TypeError)):
        sgl.select("x", choices=choices)


def test_unknown_choices_method_is_rejected():
    """choices_method must be one of SGLang's three methods."""
    with pytest.raises(ValueError, match="choices_method"):
        sgl.select("x", choices=["a"], choices_method="majority_vote")


def test_unnamed_gen_and_select_get_generated_variable_names():
    """Unnamed gens/selects still define a (generated) variable name, as verify requires."""
    @sgl.function
    def prog(s):
        s += sgl.gen() + sgl.select(choices=["a", "b"]) + sgl.gen()

    names = [n.attrs["name"] for n in traced(prog).nodes if n.op in (Op.GEN, Op.SELECT)]
    assert names == ["_gen_0", "_select_1", "_gen_2"]


# ----- text, concatenation, media -----

def test_concatenation_appends_parts_in_order():
    """"Q: " + argument + gen(...) appends a constant, the argument and the gen, in that order."""
    @sgl.function
    def prog(s, question):
        s += "Q: " + question + "\nA: " + sgl.gen("a")

    g = traced(prog)
    ops = [n.op for n in g.nodes]
    assert ops == [Op.ARGUMENT, Op.CONSTANT_TEXT, Op.APPEND, Op.CONSTANT_TEXT, Op.GEN]
    assert g.nodes[2].inputs == (g.nodes[0],)
    assert [n.attrs.get("text") for n in nodes_of(g, Op.CONSTANT_TEXT)] == ["Q: ", "\nA: "]


def test_reading_a_variable_in_the_same_stream_uses_the_producer():
    """s["x"] appended in the stream that produced it is an APPEND of the producer itself."""
    @sgl.function
    def prog(s):
        s += sgl.gen("x", max_tokens=4)
        s += " again: " + s["x"]

    g = traced(prog)
    assert only(g, Op.APPEND).inputs == (only(g, Op.GEN),)
    assert not nodes_of(g, Op.VARIABLE)


def test_image_and_video_take_constant_or_argument_paths():
    """A constant path becomes the `path` attr; an argument path becomes the input."""
    @sgl.function
    def prog(s, picture):
        s += sgl.image("cat.png") + sgl.image(picture) + sgl.video("clip.mp4", 8)

    g = traced(prog)
    first, second = nodes_of(g, Op.IMAGE)
    assert first.attrs == {"path": "cat.png"} and first.inputs == ()
    assert second.inputs == (g.arguments()[0],)
    assert only(g, Op.VIDEO).attrs == {"path": "clip.mp4", "num_frames": 8}


def test_video_needs_positive_frames():
    """video(num_frames) must be an int >= 1."""
    with pytest.raises(ValueError, match="num_frames"):
        sgl.video("clip.mp4", 0)


def test_appending_non_text_python_values_fails_with_a_clear_error():
    """s += 5 (or None) raises TypeError naming the type, not a confusing internal error."""
    @sgl.function
    def prog(s):
        s += 5

    with pytest.raises(TypeError, match="cannot append a value of type int"):
        prog.trace()


def test_stream_text_is_a_symbolic_stream_text_node():
    """s.text() records STREAM_TEXT; appending it reads that node."""
    @sgl.function
    def prog(s):
        s += "hello"
        so_far = s.text()  # @text
        s += " / " + so_far

    g = traced(prog)
    node = only(g, Op.STREAM_TEXT)
    assert node.source == f"{HERE}:{line_of('text')}" and node.type is ValueType.STR
    assert only(g, Op.APPEND).inputs == (node,)


def test_messages_while_tracing_is_a_trace_error():
    """s.messages() needs generated text, so tracing refuses it with a one-line message."""
    @sgl.function
    def prog(s):
        s.messages()  # @messages

    with pytest.raises(TraceError, match=rf"{HERE}:{line_of('messages')}: cannot call s.messages\(\)"):
        prog.trace()


# ----- variables and scopes -----

def test_var_scope_records_begin_end_and_defines_the_variable():
    """s.var_scope(name) brackets the text; s[name] is the VAR_SCOPE_END node's output."""
    @sgl.function
    def prog(s):
        with s.var_scope("intro"):
            s += "Hello " + sgl.gen("who", max_tokens=3)
        s += "\nRepeat: " + s["intro"]

    g = traced(prog)
    begin, end = only(g, Op.VAR_SCOPE_BEGIN), only(g, Op.VAR_SCOPE_END)
    assert begin.attrs == end.attrs == {"name": "intro"}
    assert g.nodes.index(begin) < g.nodes.index(only(g, Op.GEN)) < g.nodes.index(end)
    assert only(g, Op.APPEND).inputs == (end,) and end.type is ValueType.STR


def test_undefined_variable_is_a_trace_error_listing_known_names():
    """s["missing"] names the variable and the ones that exist."""
    @sgl.function
    def prog(s):
        s += sgl.gen("a")
        s += s["missing"]

    with pytest.raises(TraceError, match=r'no variable "missing" in this state \(defined so far: a\)'):
        prog.trace()


def test_set_var_binds_a_trace_time_value_and_contains_sees_it():
    """s["k"] = v makes s["k"] return v; `in` reports defined variables."""
    seen = {}

    @sgl.function
    def prog(s):
        s["greeting"] = "hello"
        seen["has"] = "greeting" in s
        seen["missing"] = "other" in s
        s += s["greeting"]

    g = traced(prog)
    assert seen == {"has": True, "missing": False}
    assert only(g, Op.CONSTANT_TEXT).attrs["text"] == "hello"


# ----- functions and backends -----

def test_num_api_spec_tokens_goes_to_graph_meta():
    """@sgl.function(num_api_spec_tokens=N) is stored in graph.meta."""
    @sgl.function(num_api_spec_tokens=64)
    def prog(s):
        s += sgl.gen("x")

    @sgl.function
    def plain(s):
        s += sgl.gen("x")

    assert prog.trace().meta["num_api_spec_tokens"] == 64
    assert "num_api_spec_tokens" not in plain.trace().meta


def test_execution_entry_points_without_a_backend_say_how_to_get_one():
    """run/run_batch/calling a program with no backend set raise one clear error naming the fix."""
    @sgl.function
    def prog(s, q):
        s += q

    sgl.set_default_backend(None)
    for call in (lambda: prog.run(q="x"), lambda: prog.run_batch([{"q": "x"}]), lambda: prog(q="x")):
        with pytest.raises(NotExecutableError, match="needs a backend.*set_default_backend"):
            call()


def test_function_must_take_a_state_parameter():
    """@sgl.function on a function without parameters fails at decoration time."""
    with pytest.raises(TypeError, match="program state"):
        sgl.function(lambda: None)


def test_each_primitive_node_carries_the_line_that_appended_it():
    """Every node's meta["source"] is this file and the line of the statement that created it."""
    @sgl.function
    def prog(s, path):
        s += sgl.system("sys")  # @src-system
        s += sgl.image(path)  # @src-image
        s += sgl.video("v.mp4", 2)  # @src-video
        s += sgl.select("pick", choices=["a", "b"])  # @src-select
        with s.var_scope("cap"):  # @src-scope
            s += "captured"  # @src-text
        forks = s.fork(1)  # @src-fork
        forks[0] += s["pick"]  # @src-child
        forks.join()  # @src-join

    g = traced(prog)
    expected = {
        Op.ROLE_BEGIN: "src-system", Op.IMAGE: "src-image", Op.VIDEO: "src-video", Op.SELECT: "src-select",
        Op.VAR_SCOPE_BEGIN: "src-scope", Op.VAR_SCOPE_END: "src-scope", Op.FORK: "src-fork",
        Op.GET_FORK_ITEM: "src-fork", Op.VARIABLE: "src-child", Op.APPEND: "src-child", Op.JOIN: "src-join",
    }
    for node in g.nodes:
        if node.op in expected:
            assert node.source == f"{HERE}:{line_of(expected[node.op])}", node
    assert [n for n in g.nodes if n.op is Op.CONSTANT_TEXT][-1].source == f"{HERE}:{line_of('src-text')}"
