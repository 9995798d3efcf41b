"""merge_constants: adjacent constant text of one stream and guard merges; nothing else does."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from ir_samples import every_op_graph, src
from ir_strategies import valid_graphs
from sglc.ir import Graph, Guard, Op
from sglc.ir.verify import verify
from sglc.passes.merge_constants import merge_constants


def texts(g: Graph, stream: int = 0) -> list:
    return [n.attrs.get("text", n.op.value) for n in g.stream_nodes(stream)]


def test_adjacent_constants_merge_keeping_first_name_and_source():
    """Three constants in a row become one with the joined text, the first name and source line."""
    g = Graph()
    for i, t in enumerate(["a", "b", "c"]):
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": t}, meta=src(i + 1))
    result = merge_constants(g)
    assert result.modified
    (node,) = result.graph.nodes
    assert node.name == "constant_text" and node.attrs == {"text": "abc"} and node.source == "essay_judge.py:1"
    verify(result.graph)


def test_the_input_graph_is_not_changed():
    """The pass is pure: the graph it is given keeps its nodes and texts."""
    g = Graph()
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "a"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "b"})
    before = g.signature()
    merge_constants(g)
    assert g.signature() == before


def test_does_not_merge_across_a_gen():
    """A gen between two constants keeps them apart."""
    g = Graph()
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Q: "})
    g.create_node(Op.GEN, attrs={"name": "x"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "\nA: "})
    result = merge_constants(g)
    assert not result.modified and result.graph is g


def test_does_not_merge_across_a_value_node_of_the_same_stream():
    """Any node of the stream in between (even a pure variable read) blocks the merge."""
    g = Graph()
    gen = g.create_node(Op.GEN, attrs={"name": "x"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "a"})
    g.create_node(Op.VARIABLE, [gen], attrs={"name": "x"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "b"})
    assert not merge_constants(g).modified


def test_merges_across_nodes_of_other_streams_but_never_across_streams():
    """Constants of one child stream merge around another stream's nodes; streams stay separate."""
    g = Graph()
    fork = g.create_node(Op.FORK, attrs={"n": 2})
    s1, s2 = g.new_stream(), g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 0}, stream=s1)
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 1}, stream=s2)
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "a"}, stream=s1)
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "X"}, stream=s2)
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "b"}, stream=s1)
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Y"}, stream=s2)
    result = merge_constants(g)
    assert texts(result.graph, s1) == ["get_fork_item", "ab"]
    assert texts(result.graph, s2) == ["get_fork_item", "XY"]
    verify(result.graph)


def test_does_not_merge_across_guards():
    """Constants in different branch cases, or guarded vs unguarded, stay apart."""
    g = Graph()
    sel = g.create_node(Op.SELECT, attrs={"name": "c", "choices": ["a", "b"]})
    br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["a", "b"]})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "in a"}, guard=Guard(br, 0))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "in b"}, guard=Guard(br, 1))
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "more b"}, guard=Guard(br, 1))
    result = merge_constants(g)
    assert texts(result.graph) == ["select", "branch", "in a", "in bmore b"]


def test_join_input_moves_to_the_merged_node():
    """When a child stream's last constant merges away, the join gathers the surviving node."""
    g = Graph()
    fork = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 0}, stream=child)
    first = g.create_node(Op.CONSTANT_TEXT, attrs={"text": "a"}, stream=child)
    last = g.create_node(Op.CONSTANT_TEXT, attrs={"text": "b"}, stream=child)
    g.create_node(Op.JOIN, [fork, last], attrs={"mode": "concate_and_append"})
    out = merge_constants(g).graph
    verify(out)
    assert out.find("join").inputs[1].name == first.name


def test_idempotent_and_valid_on_the_sample_graph():
    """A second run changes nothing; the merged sample still verifies."""
    once = merge_constants(every_op_graph())
    assert once.modified
    verify(once.graph)
    twice = merge_constants(once.graph)
    assert not twice.modified and twice.graph == once.graph


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_graphs())
def test_random_graphs_stay_valid_keep_text_and_converge(g: Graph):
    """On any valid graph the result verifies, keeps every stream's concatenated constant text, and is a fixed point."""
    result = merge_constants(g)
    verify(result.graph)
    for stream in range(g.num_streams):
        def joined(graph: Graph) -> list:
            out = []
            for node in graph.stream_nodes(stream):
                key = (node.guard.branch.name, node.guard.case) if node.guard else None
                if node.op is Op.CONSTANT_TEXT and out and out[-1][0] == "text" and out[-1][1] == key:
                    out[-1] = ("text", key, out[-1][2] + node.attrs["text"])
                else:
                    out.append(("text", key, node.attrs["text"]) if node.op is Op.CONSTANT_TEXT else (node.name, key))
            return out
        assert joined(result.graph) == joined(g)
    assert not merge_constants(result.graph).modified
