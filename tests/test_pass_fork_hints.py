"""fork_hints: a fork-scoped CACHE_PREFIX right before every FORK and a batch-scoped one after
stream 0's constant prefix; nothing else changes, and a second run adds nothing."""
from __future__ import annotations

import os
import runpy

import pytest
from hypothesis import HealthCheck, given, settings

from ir_samples import every_op_graph
from ir_strategies import valid_graphs
from sglc.ir import Graph, Guard, Node, Op
from sglc.ir.verify import verify
from sglc.passes.fork_hints import fork_hints
from sglc.passes.merge_constants import merge_constants
from sglc.passes.prefix_hoisting import prefix_hoisting

SAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")


def without_new_hints(before: Graph, after: Graph) -> tuple:
    """`after`'s signature with the CACHE_PREFIX nodes it gained removed (names of old nodes are kept)."""
    old = {n.name for n in before.nodes}
    name, meta, streams, nodes = after.signature()
    return name, meta, streams, tuple(n for n in nodes if n[0] in old)


def hints(g: Graph) -> list[Node]:
    return [n for n in g.nodes if n.op is Op.CACHE_PREFIX]


def previous_in_stream(g: Graph, node: Node) -> Node:
    stream = g.stream_nodes(node.stream)
    return stream[stream.index(node) - 1]


def run(g: Graph) -> Graph:
    """fork_hints that must change something, verify, and add nothing but hints."""
    result = fork_hints(g)
    assert result.modified
    verify(result.graph)
    assert without_new_hints(g, result.graph) == g.signature()
    return result.graph


def two_way_fork(prefix: list[tuple[Op, dict]], guarded: bool = False) -> Graph:
    g = Graph("fork")
    topic = g.create_node(Op.ARGUMENT, attrs={"name": "topic"})
    for op, attrs in prefix:
        g.create_node(op, [topic] if op is Op.APPEND else [], attrs=attrs, meta={"source": "p.py:1"})
    guard = None
    if guarded:
        sel = g.create_node(Op.SELECT, attrs={"name": "go", "choices": ["yes", "no"]})
        guard = Guard(g.create_node(Op.BRANCH, [sel], attrs={"cases": ["yes", "no"]}), 0)
    fork = g.create_node(Op.FORK, attrs={"n": 2}, guard=guard, meta={"source": "p.py:7"})
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": index}, stream=stream, guard=guard)
        g.create_node(Op.GEN, attrs={"name": "x"}, stream=stream, guard=guard)
    verify(g)
    return g


TEXT = (Op.CONSTANT_TEXT, {"text": "You are helpful."})
READ = (Op.APPEND, {})


def test_a_fork_gets_a_hint_in_its_stream_with_its_guard_and_source():
    """The hint sits right before the fork, in the fork's stream and case, naming the fork's line."""
    out = run(two_way_fork([READ], guarded=True))
    fork = out.find("fork")
    hint = previous_in_stream(out, fork)
    assert hint.op is Op.CACHE_PREFIX and hint.attrs == {"scope": "fork"}
    assert hint.stream == fork.stream and hint.guard == fork.guard and hint.source == "p.py:7"
    assert out.nodes.index(hint) == out.nodes.index(fork) - 1


def test_the_constant_prefix_of_stream_0_gets_a_batch_hint_before_the_first_argument_read():
    """'[system]You are helpful.[/system][user]' then an argument read: the batch hint follows the prefix."""
    g = two_way_fork([(Op.ROLE_BEGIN, {"role": "system"}), TEXT, (Op.ROLE_END, {"role": "system"}),
                      (Op.ROLE_BEGIN, {"role": "user"}), READ, (Op.ROLE_END, {"role": "user"})])
    out = run(g)
    batch = [h for h in hints(out) if h.attrs == {"scope": "batch"}]
    assert len(batch) == 1
    stream0 = [n.op for n in out.stream_nodes(0) if n.op is not Op.ARGUMENT]
    assert stream0[:6] == [Op.ROLE_BEGIN, Op.CONSTANT_TEXT, Op.ROLE_END, Op.ROLE_BEGIN, Op.CACHE_PREFIX, Op.APPEND]
    assert batch[0].guard is None and batch[0].source == "p.py:1"


@pytest.mark.parametrize("prefix", [[], [READ, TEXT], [(Op.CONSTANT_TEXT, {"text": ""}), READ]])
def test_no_batch_hint_without_a_constant_prefix(prefix):
    """No prefix, a prefix starting with an argument read, or only empty text: no batch hint."""
    out = run(two_way_fork(prefix))
    assert [h.attrs["scope"] for h in hints(out)] == ["fork"]


def test_no_batch_hint_when_the_program_starts_with_a_model_call():
    """A gen before any text leaves nothing to share across the batch."""
    g = Graph()
    g.create_node(Op.GEN, attrs={"name": "x"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "after"})
    result = fork_hints(g)
    assert not result.modified and result.graph is g


def test_a_fork_right_after_the_constant_prefix_gets_one_hint():
    """The batch hint already precedes the fork, so the fork gets no second hint."""
    out = run(two_way_fork([TEXT]))
    assert [h.attrs["scope"] for h in hints(out)] == ["batch"]
    assert previous_in_stream(out, out.find("fork")).op is Op.CACHE_PREFIX


def test_a_fork_already_hinted_gets_no_second_hint_and_a_second_run_changes_nothing():
    """Idempotent: hints are recognized by position, whatever inserted them."""
    once = run(two_way_fork([READ]))
    again = fork_hints(once)
    assert not again.modified and again.graph is once


def test_a_hint_under_another_guard_does_not_count():
    """A hint that runs only in some other case does not cover a fork outside that case."""
    g = Graph()
    sel = g.create_node(Op.SELECT, attrs={"name": "c", "choices": ["a", "b"]})
    br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["a", "b"]})
    g.create_node(Op.CACHE_PREFIX, guard=Guard(br, 0))
    fork = g.create_node(Op.FORK, attrs={"n": 1})
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 0}, stream=g.new_stream())
    out = run(g)
    assert previous_in_stream(out, out.find("fork")).guard is None


def test_nested_forks_each_get_a_hint():
    """A fork inside a child stream is hinted in that child stream."""
    g = Graph()
    outer = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [outer], attrs={"index": 0}, stream=child)
    inner = g.create_node(Op.FORK, attrs={"n": 2}, stream=child)
    for index in range(2):
        g.create_node(Op.GET_FORK_ITEM, [inner], attrs={"index": index}, stream=g.new_stream())
    out = run(g)
    assert [h.stream for h in hints(out)] == [0, child]


def test_a_hoisted_one_way_fork_is_not_hinted_but_the_fork_inside_it_is():
    """After prefix_hoisting, the hint before the inner fork caches the longer shared prefix; the outer one is skipped."""
    g = Graph()
    fork = g.create_node(Op.FORK, attrs={"n": 2})
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": index}, stream=stream)
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": f"Shared words {index}"}, stream=stream)
    hoisted = prefix_hoisting(g).graph
    out = run(hoisted)
    (hint,) = hints(out)
    assert out.nodes[out.nodes.index(hint) + 1].name == "fork" and hint.stream == out.find("fork").stream


def test_the_input_graph_is_not_changed():
    """The pass is pure."""
    g = two_way_fork([TEXT, READ])
    before = g.signature()
    assert fork_hints(g).modified
    assert g.signature() == before


def test_the_every_op_sample_keeps_its_existing_hint():
    """The hand-built essay judge already has a hint before its fork: only a batch hint is added."""
    g = every_op_graph()
    out = run(g)
    assert [h.attrs.get("scope") for h in hints(out)] == ["batch", None]


@pytest.mark.parametrize("name, program", [("essay_judge", "essay_judge"), ("tree_of_thought", "tree_of_thought"),
                                           ("few_shot_qa", "few_shot_qa")])
def test_traced_samples_get_a_hint_before_every_fork(name, program):
    """On the traced samples every fork is preceded by a hint in its stream and the graph verifies."""
    namespace = runpy.run_path(os.path.join(SAMPLES_DIR, f"{name}.py"), run_name=f"sample_{name}")
    g = merge_constants(namespace[program].trace()).graph
    out = run(g)
    for fork in (n for n in out.nodes if n.op is Op.FORK):
        assert previous_in_stream(out, fork).op is Op.CACHE_PREFIX
    assert sum(h.attrs["scope"] == "batch" for h in hints(out)) == 1
    assert not fork_hints(out).modified


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(valid_graphs())
def test_random_graphs_only_gain_hints_and_converge(g: Graph):
    """On any valid graph: verifies, only CACHE_PREFIX nodes are added, every fork is hinted, a rerun adds nothing."""
    result = fork_hints(g)
    verify(result.graph)
    assert without_new_hints(g, result.graph) == g.signature()
    for fork in (n for n in result.graph.nodes if n.op is Op.FORK):
        before = previous_in_stream(result.graph, fork)
        assert before.op is Op.CACHE_PREFIX and before.guard == fork.guard
    assert not fork_hints(result.graph).modified
