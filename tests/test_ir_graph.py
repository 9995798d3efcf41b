"""Graph: owns its nodes, keeps user links consistent, names nodes uniquely, compares by value."""
from __future__ import annotations

import pytest

from ir_samples import every_op_graph, linear_graph
from sglc.ir import Graph, Guard, Op, ValueType
from sglc.ir.types import DEFAULT_TYPE
from sglc.ir.verify import verify


def test_create_node_links_users_and_defaults_type():
    """create_node records the new node as a user of each input and uses the op's default type."""
    g = Graph()
    arg = g.create_node(Op.ARGUMENT, attrs={"name": "q"})
    app = g.create_node(Op.APPEND, [arg])
    assert list(arg.users) == [app]
    assert app.type is DEFAULT_TYPE[Op.APPEND] and arg.type is ValueType.ANY
    assert app.graph is g and g.nodes == [arg, app]


def test_names_are_unique_per_graph_not_global():
    """Repeated hints get _1, _2 suffixes within a graph; another graph starts over."""
    g = Graph()
    names = [g.create_node(Op.CONSTANT_TEXT, attrs={"text": "x"}).name for _ in range(3)]
    assert names == ["constant_text", "constant_text_1", "constant_text_2"]
    assert Graph().create_node(Op.CONSTANT_TEXT, attrs={"text": "x"}).name == "constant_text"


def test_gen_and_argument_nodes_are_named_after_their_variable():
    """A gen/select/argument node's name is its variable name, sanitized to an identifier."""
    g = Graph()
    assert g.create_node(Op.GEN, attrs={"name": "my answer"}).name == "my_answer"
    assert g.create_node(Op.ARGUMENT, attrs={"name": "1st"}).name == "_1st"


def test_inserting_before_and_after_place_nodes_in_creation_order():
    """Inside inserting_before/after, successive creations keep their order at the anchor."""
    g = linear_graph()
    anchor = g.find("append")
    with g.inserting_before(anchor):
        a = g.create_node(Op.CONSTANT_TEXT, attrs={"text": "a"})
        b = g.create_node(Op.CONSTANT_TEXT, attrs={"text": "b"})
    with g.inserting_after(anchor):
        c = g.create_node(Op.CONSTANT_TEXT, attrs={"text": "c"})
    i = g.index(anchor)
    assert g.nodes[i - 2 : i + 2] == [a, b, anchor, c]
    verify(g)


def test_replace_all_uses_with_moves_every_user():
    """After replace_all_uses_with(old, new), nothing uses old and every former user uses new."""
    g = linear_graph()
    topic = g.find("topic")
    other = g.create_node(Op.ARGUMENT, attrs={"name": "other"})
    g.move_before(other, topic)
    changed = g.replace_all_uses_with(topic, other)
    assert changed == [g.find("append")]
    assert not topic.users and g.find("append").inputs == (other,)
    verify(g)


def test_erase_node_refuses_used_nodes_and_guarding_branches():
    """erase_node refuses a node still used as an input or as a guard's branch."""
    g = linear_graph()
    with pytest.raises(ValueError, match="still used"):
        g.erase_node(g.find("topic"))
    g2 = every_op_graph()
    branch = g2.find("branch")
    with pytest.raises(ValueError, match="guarded"):
        g2.erase_node(branch)


def test_erase_node_unlinks_it():
    """An erased node leaves the node list and its inputs' users."""
    g = linear_graph()
    append, topic = g.find("append"), g.find("topic")
    g.erase_node(append)
    assert append not in g.nodes and append not in topic.users and append.graph is None


def test_create_node_rejects_foreign_inputs_unknown_streams_and_bad_attrs():
    """Inputs from another graph, a stream not yet created and NaN attributes are refused."""
    g, other = Graph(), linear_graph()
    with pytest.raises(ValueError, match="another graph"):
        g.create_node(Op.APPEND, [other.find("topic")])
    with pytest.raises(ValueError, match="stream 1 does not exist"):
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": "x"}, stream=1)
    with pytest.raises(TypeError, match="NaN"):
        g.create_node(Op.GEN, attrs={"name": "x", "temperature": float("nan")})


def test_tuples_in_attrs_become_lists():
    """Attribute tuples are normalized to lists, so equality survives serialization."""
    g = Graph()
    node = g.create_node(Op.SELECT, attrs={"name": "x", "choices": ("a", ("b", "c"))})
    assert node.attrs["choices"] == ["a", ["b", "c"]]


def test_equality_is_by_value_and_type_exact():
    """Equal builds are equal; 1 vs 1.0 vs True in an attribute makes graphs differ."""
    assert every_op_graph() == every_op_graph()
    values = []
    for v in (1, 1.0, True):
        g = Graph()
        g.create_node(Op.GEN, attrs={"name": "x", "max_new_tokens": v})
        values.append(g)
    assert values[0] != values[1] and values[0] != values[2] and values[1] != values[2]


def test_guard_and_stream_queries():
    """stream_nodes and arguments return the nodes of a stream / the program arguments in order."""
    g = every_op_graph()
    assert [n.op for n in g.stream_nodes(2)][0] is Op.GET_FORK_ITEM
    assert [n.name for n in g.arguments()] == ["image_path", "essay"]
    assert all(isinstance(n.guard, Guard) for n in g.stream_nodes(3))


def test_copy_is_equal_and_independent():
    """Graph.copy gives an equal graph whose nodes and attrs are not shared with the original."""
    g = every_op_graph()
    c = g.copy()
    assert c == g
    c.find("judgment").attrs["stop"].append("X")
    assert g.find("judgment").attrs["stop"] == ["END", "\n\n"]
    assert all(n.graph is c for n in c.nodes)
    assert c.find("related").guard is None and c.find("judgment").guard is not g.find("judgment").guard
    verify(c)


def test_guard_chain_lists_the_guards_a_node_runs_under_outermost_first():
    """guard_chain walks guard -> branch's guard -> ... and returns them outermost first."""
    g = Graph()
    outer_select = g.create_node(Op.SELECT, attrs={"name": "a", "choices": ["x", "y"], "temperature": 0.0,
                                                  "choices_method": "token_length_normalized"})
    outer = g.create_node(Op.BRANCH, [outer_select], attrs={"cases": ["x", "y"]})
    inner_select = g.create_node(Op.SELECT, attrs={"name": "b", "choices": ["p", "q"], "temperature": 0.0,
                                                  "choices_method": "token_length_normalized"},
                                 guard=Guard(outer, 1))
    inner = g.create_node(Op.BRANCH, [inner_select], attrs={"cases": ["p", "q"]}, guard=Guard(outer, 1))
    leaf = g.create_node(Op.CONSTANT_TEXT, attrs={"text": "!"}, guard=Guard(inner, 0))
    verify(g)
    assert outer_select.guard_chain() == [] and outer.guard_chain() == []
    assert inner.guard_chain() == [Guard(outer, 1)]
    assert leaf.guard_chain() == [Guard(outer, 1), Guard(inner, 0)]
