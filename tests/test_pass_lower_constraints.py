"""lower_constraints: constrained gens carry their compiled FSM; everything else is untouched."""
from __future__ import annotations

import re

import pydantic
import pytest

import sglc as sgl
from ir_samples import linear_graph, src
from sglc import fsm
from sglc.errors import PassError, SglcError
from sglc.ir import Graph, Op, ValueType
from sglc.ir.serialize import decode, encode
from sglc.ir.verify import verify
from sglc.passes.lower_constraints import ConstraintLoweringError, lower_constraints
from sglc.passes.manager import PassManager

IPV4 = r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)"


class Address(pydantic.BaseModel):
    city: str
    zip_code: int


class Person(pydantic.BaseModel):
    name: str
    age: int
    home: Address
    tags: list[str]


def gen_graph(**attrs) -> Graph:
    """A prompt, one gen with `attrs` and a read of its variable."""
    g = Graph("one_gen")
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Q: "}, meta=src(1))
    out_type = {"int": ValueType.INT, "float": ValueType.FLOAT, "bool": ValueType.BOOL}.get(attrs.get("dtype"), ValueType.STR)
    gen = g.create_node(Op.GEN, attrs={"name": "answer", **attrs}, type=out_type, meta=src(7))
    g.create_node(Op.VARIABLE, [gen], attrs={"name": "answer"}, type=out_type, meta=src(8))
    return g


def lowered_fsm(g: Graph, name: str = "answer") -> fsm.FSM:
    return fsm.fsm_from_dict(g.find(name).attrs["fsm"])


def test_regex_gen_gets_the_fsm_of_its_regex_and_keeps_the_regex():
    """The fsm attr is fsm_to_dict(compile_regex(regex)); the regex attr stays for readability."""
    result = lower_constraints(gen_graph(regex=IPV4, max_new_tokens=16))
    assert result.modified
    node = result.graph.find("answer")
    assert node.attrs["regex"] == IPV4 and node.attrs["max_new_tokens"] == 16
    assert node.attrs["fsm"] == fsm.fsm_to_dict(fsm.compile_regex(IPV4))
    f = lowered_fsm(result.graph)
    assert f.accepts("192.168.0.1") and not f.accepts("256.1.1.1")
    verify(result.graph)


@pytest.mark.parametrize(
    "dtype, good, bad",
    [("int", ["0", "-17", "42", "+01 "], ["4.2", "", "1e3"]),
     ("float", ["0", "-1.5", "3.25", "+1", ".5\n"], ["1.", "-1.5e3", "nan"]),
     ("bool", ["True", "False"], ["true", "1"]),
     ("str", ['"hi"', '"a\\"b"'], ["hi", '"a"b"'])],
)
def test_dtype_gens_are_lowered_to_their_value_syntax(dtype, good, bad):
    """dtype int/float/bool/str gens accept exactly their type's syntax (int, float: SGLang's REGEX_INT /
    REGEX_FLOAT)."""
    f = lowered_fsm(lower_constraints(gen_graph(dtype=dtype)).graph)
    assert all(f.accepts(s) for s in good)
    assert not any(f.accepts(s) for s in bad)


def test_choices_on_a_gen_accept_exactly_the_choices():
    """A gen with choices (raw IR) decodes exactly one of them, metacharacters included."""
    choices = ["yes", "no", "a.b", "日本語"]
    f = lowered_fsm(lower_constraints(gen_graph(choices=choices)).graph)
    assert all(f.accepts(c) for c in choices)
    assert not any(f.accepts(c) for c in ["axb", "yesno", "", "ye"])


def test_json_schema_from_a_traced_pydantic_model_is_lowered():
    """A traced gen(json_schema=PydanticModel) gets an FSM that accepts the model's JSON dumps."""

    @sgl.function
    def extract(s, text):
        s += "Text: " + text + "\nJSON: "
        s += sgl.gen("person", max_tokens=128, json_schema=Person)

    graph = lower_constraints(extract.trace()).graph
    f = lowered_fsm(graph, "person")
    person = Person(name="Ada", age=36, home=Address(city="London", zip_code=12345), tags=["math", "poet"])
    import json

    assert f.accepts(json.dumps(person.model_dump()))
    assert not f.accepts(json.dumps({"name": "Ada"}))
    verify(graph)


def test_select_and_unconstrained_gens_are_left_alone():
    """A graph with selects and plain gens only is returned as is, unmodified."""
    g = linear_graph()
    sel = g.create_node(Op.SELECT, attrs={"name": "verdict", "choices": ["Pass", "Fail"]}, meta=src(5))
    g.create_node(Op.BRANCH, [sel], attrs={"cases": ["Pass", "Fail"]}, meta=src(6))
    before = g.signature()
    result = lower_constraints(g)
    assert not result.modified and result.graph is g and g.signature() == before


def test_the_pass_is_idempotent():
    """Running the pass on its own output changes nothing and returns the same graph."""
    first = lower_constraints(gen_graph(regex=r"\d{4}-\d{2}-\d{2}")).graph
    second = lower_constraints(first)
    assert not second.modified and second.graph is first


def test_the_input_graph_is_not_changed():
    """The pass is pure: the graph it is given keeps its attributes."""
    g = gen_graph(regex="a(bc)*d?")
    before = g.signature()
    lower_constraints(g)
    assert g.signature() == before


def test_a_stale_fsm_is_recompiled():
    """When the regex changed after lowering, the next run replaces the fsm."""
    g = lower_constraints(gen_graph(regex="ab+")).graph
    g.find("answer").attrs["regex"] = "cd+"
    result = lower_constraints(g)
    assert result.modified
    f = lowered_fsm(result.graph)
    assert f.accepts("cddd") and not f.accepts("abbb")


def test_the_fsm_attr_round_trips_through_graph_pb_exactly():
    """decode(encode(g)) == g, and the decoded fsm dict rebuilds an equal FSM."""
    g = gen_graph(json_schema=Person.model_json_schema())
    lowered = lower_constraints(g).graph
    back = decode(encode(lowered))
    assert back == lowered
    assert back.find("answer").attrs["fsm"] == lowered.find("answer").attrs["fsm"]
    assert lowered_fsm(back) == lowered_fsm(lowered)


def test_every_gen_of_a_graph_is_lowered_and_printing_stays_readable():
    """Several constrained gens in several streams each get their own FSM (a grammar gen its grammar);
    str(graph) works."""
    g = Graph("many")
    fork = g.create_node(Op.FORK, attrs={"n": 2})
    s1, s2 = g.new_stream(), g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 0}, stream=s1)
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 1}, stream=s2)
    g.create_node(Op.GEN, attrs={"name": "a", "regex": "[a-z]+"}, stream=s1)
    g.create_node(Op.GEN, attrs={"name": "b", "dtype": "int"}, type=ValueType.INT, stream=s2)
    g.create_node(Op.GEN, attrs={"name": "c", "max_new_tokens": 4})
    g.create_node(Op.GEN, attrs={"name": "d", "ebnf": 'root ::= "(" root ")" | "x"'}, stream=s2)
    lowered = lower_constraints(g).graph
    assert lowered_fsm(lowered, "a").accepts("abc")
    assert lowered_fsm(lowered, "b").accepts("-12")
    assert "fsm" not in lowered.find("c").attrs and "grammar" not in lowered.find("c").attrs
    # NOTE: a context-free constraint gets a grammar (tests/test_grammar_compile.py), never an fsm
    assert "fsm" not in lowered.find("d").attrs and lowered.find("d").attrs["grammar"].root == "root"
    verify(lowered)
    assert "%a" in str(lowered) and "grammar=<grammar 1 rules" in str(lowered)


@pytest.mark.parametrize(
    "attrs, needle",
    [({"regex": r"(?<=a)b"}, "lookbehind"),
     ({"regex": r"(a)\1"}, "backreference"),
     ({"json_schema": '{"type": "object", "patternProperties": {"^x": {}}}'}, "patternProperties"),
     ({"regex": r"[^\x00-\U0010ffff]"}, "matches no string")],
)
def test_an_unloweable_constraint_is_a_one_line_error_naming_node_and_source(attrs, needle):
    """Unsupported regex / schema: a SglcError naming the gen, the user's line and the problem."""
    with pytest.raises(ConstraintLoweringError) as info:
        lower_constraints(gen_graph(**attrs))
    message = str(info.value)
    assert isinstance(info.value, SglcError)
    assert "\n" not in message
    assert message.startswith("essay_judge.py:7: gen %answer: cannot lower ")
    assert needle in message.lower() or needle in message


def test_two_constraints_on_one_gen_are_refused():
    """A gen with both regex and dtype is ambiguous: a clear error, not a silent pick."""
    with pytest.raises(ConstraintLoweringError, match="one constraint, got regex, dtype"):
        lower_constraints(gen_graph(regex="[0-9]+", dtype="int"))


def test_in_a_pass_manager_the_error_names_the_pass_and_the_source_line():
    """Through the PassManager the failure is a PassError carrying the lowering message."""
    manager = PassManager([lower_constraints])
    with pytest.raises(PassError) as info:
        manager.run(gen_graph(regex=r"a(?=b)"))
    assert "lower_constraints" in str(info.value) and "essay_judge.py:7" in str(info.value)


def test_lowered_fsm_agrees_with_python_re_on_samples():
    """Strings sampled from the lowered FSM fullmatch the original regex (Python re is the oracle)."""
    import random

    pattern = r"[a-z0-9._]{1,12}@[a-z]{2,8}\.(com|org|net)"
    f = lowered_fsm(lower_constraints(gen_graph(regex=pattern)).graph)
    rng = random.Random(0)
    for _ in range(100):
        s = fsm.sample(f, rng)
        assert re.fullmatch(pattern, s), s
