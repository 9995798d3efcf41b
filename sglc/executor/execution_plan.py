"""ExecutionPlan: what the graph executor knows about a graph before any run.

Computed once per graph and shared by every run: each node's dependencies (inputs, its stream
predecessor, its guard's BRANCH) and dependents, the loop regions with the dependencies an
iteration waits on again, stream 0's own streams (for streaming), and, when first asked, each
model call's program-hint ``next_use`` (program_hints.py). graph_executor.py decides *when* each
node runs from these facts.
"""
from __future__ import annotations

import functools

from sglc.executor.continuation import continuation_nodes
from sglc.executor.program_hints import NextUse, next_uses
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.verify import loop_regions

#: Ops that call the backend and so run on the pool.
CALL_OPS = frozenset({Op.GEN, Op.SELECT, Op.CACHE_PREFIX})


class ExecutionPlan:
    """Per-graph facts computed once: dependency counts and dependents of every node, and (when
    first asked) each call's program-hint next_use.

    `continues`: the graph is a segment of a program with graph breaks that a later segment
    continues (its stream 0 text is extended after it; program_hints.py)."""

    def __init__(self, graph: Graph, continues: bool = False) -> None:
        self.graph = graph
        self.continues = continues
        self.nodes: list[Node] = list(graph.nodes)
        self.index = {node: i for i, node in enumerate(self.nodes)}
        deps: list[set[int]] = [set() for _ in self.nodes]
        last_in_stream: dict[int, int] = {}
        for i, node in enumerate(self.nodes):
            deps[i].update(self.index[inp] for inp in node.inputs)
            if node.guard is not None:
                deps[i].add(self.index[node.guard.branch])
            if node.op is not Op.ARGUMENT:  # NOTE: arguments are values, outside the text order
                if node.stream in last_in_stream:
                    deps[i].add(last_in_stream[node.stream])
                last_in_stream[node.stream] = i
        self.num_deps = [len(d) for d in deps]
        self.deps = deps
        # Loops: each body runs once per item. NOTE: a body's nodes depend only on nodes before
        # the loop (done before it starts), its loop_begin and each other; the inner deps are what
        # an iteration waits on again (graph_executor._Run._next_iteration).
        self.loop_end: dict[int, int] = {}
        self.loop_of_end: dict[int, int] = {}
        self.loop_body: dict[int, list[int]] = {}
        self.inner_deps: dict[tuple[int, int], int] = {}  # (loop_begin, node) -> deps inside that loop
        self.enclosing: dict[int, tuple[int, ...]] = {}
        for begin, end, body in loop_regions(graph):
            b, e = self.index[begin], self.index[end]
            members = [self.index[n] for n in body]
            self.loop_end[b], self.loop_of_end[e], self.loop_body[b] = e, b, members
            inner = set(members) | {b}
            for j in members + [e]:
                self.inner_deps[b, j] = len(deps[j] & inner)
            for j in members:
                self.enclosing[j] = self.enclosing.get(j, ()) + (b,)
        self.dependents: list[list[int]] = [[] for _ in self.nodes]
        for i, d in enumerate(deps):
            for j in sorted(d):
                self.dependents[j].append(i)
        self.arg_names: list[str] = [n.attrs["name"] for n in self.nodes if n.op is Op.ARGUMENT]  # type: ignore[misc]
        #: Stream 0 and the one-way streams prefix hoisting made of it: the program's own
        #: streams, whose gens `text_iter(var)` streams (live_text.py).
        root = {0}
        for node in self.nodes:
            if node.op is Op.GET_FORK_ITEM and node.inputs[0].attrs.get("hoisted") and node.inputs[0].stream in root:
                root.add(node.stream)
        self.root_streams = frozenset(root)

    def batch_hints(self) -> list[Node]:
        return [n for n in self.nodes if is_batch_hint(n)]

    @functools.cached_property
    def next_uses(self) -> dict[int, NextUse]:
        """Node index -> the NextUse of every call the executor makes (program_hints.py); the
        batch-scoped CACHE_PREFIX is none of them (the batch sends it, see batch.py)."""
        calls = [i for i, n in enumerate(self.nodes) if n.op in CALL_OPS and not is_batch_hint(n)]
        return next_uses(self.nodes, self.deps, calls, self.loop_end, self.loop_body, self.continues)

    @functools.cached_property
    def continuations(self) -> dict[int, tuple[int, ...]]:
        """GEN index -> the text nodes after it whose text may be known when it is sent
        (continuation.py); gens followed by no such node are left out."""
        found = {i: continuation_nodes(self.nodes, i) for i, n in enumerate(self.nodes) if n.op is Op.GEN}
        return {i: nodes for i, nodes in found.items() if nodes}


def is_batch_hint(node: Node) -> bool:
    """A batch-scoped CACHE_PREFIX: a no-op in a run (the batch runner sends it once)."""
    return node.op is Op.CACHE_PREFIX and node.attrs.get("scope") == "batch"
