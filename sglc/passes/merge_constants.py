"""merge_constants: adjacent CONSTANT_TEXT nodes of one stream become one node.

Two constants are adjacent when no other node of their stream lies between them in graph order
(nodes of other streams may) and they carry the same guard. The merged node keeps the first
node's name, position and source; uses of the second (a JOIN gathering a child stream's last
node) move to the first. The prompt text of every stream is unchanged.
"""
from __future__ import annotations

from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.passes.pass_result import PassResult


def _mergeable(first: Node | None, second: Node) -> bool:
    return (
        first is not None
        and first.op is Op.CONSTANT_TEXT
        and second.op is Op.CONSTANT_TEXT
        and first.guard == second.guard
        and {k: v for k, v in first.attrs.items() if k != "text"} == {k: v for k, v in second.attrs.items() if k != "text"}
    )


def _has_work(graph: Graph) -> bool:
    previous: dict[int, Node] = {}
    for node in graph.nodes:
        if _mergeable(previous.get(node.stream), node):
            return True
        previous[node.stream] = node
    return False


def merge_constants(graph: Graph) -> PassResult:
    """Merge runs of adjacent constant text; returns the input itself when nothing merges."""
    if not _has_work(graph):
        return PassResult(graph, False)
    graph = graph.copy()
    previous: dict[int, Node] = {}  # the last surviving node of each stream so far
    for node in list(graph.nodes):
        first = previous.get(node.stream)
        if _mergeable(first, node):
            assert first is not None
            first.attrs["text"] = first.attrs["text"] + node.attrs["text"]
            graph.replace_all_uses_with(node, first)
            graph.erase_node(node)
            continue
        previous[node.stream] = node
    return PassResult(graph, True)
