"""The pass manager: runs passes in order, verifies after each, names the pass that failed.

A pass is a function ``Graph -> PassResult``. NOTE: passes are pure — they never change the graph
they are given; one that rewrites works on :func:`copy_graph` and returns the copy (or the
input itself, with ``modified=False``, when there was nothing to do).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from sglc.errors import PassError, VerifyError
from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.verify import verify


class PassResult(NamedTuple):
    graph: Graph
    modified: bool


Pass = Callable[[Graph], PassResult]


def pass_name(fn: Pass) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def copy_graph(graph: Graph) -> Graph:
    """A deep copy: new nodes with the same names, ops, inputs, attrs, types, streams, guards."""
    import copy

    new = Graph(graph.name)
    new.meta = copy.deepcopy(graph.meta)
    new.num_streams = graph.num_streams
    mapping: dict[Node, Node] = {}
    for node in graph.nodes:
        guard = Guard(mapping[node.guard.branch], node.guard.case) if node.guard else None
        mapping[node] = new.create_node(
            node.op,
            [mapping[i] for i in node.inputs],
            copy.deepcopy(node.attrs),
            node.type,
            node.stream,
            guard,
            dict(node.meta),
            name=node.name,
        )
    return new


class PassManager:
    """Runs `passes` in order. With verify_each, the input and every pass's output are verified."""

    def __init__(self, passes: Sequence[Pass], verify_each: bool = True) -> None:
        self.passes = list(passes)
        self.verify_each = verify_each
        #: Names of the passes that modified the graph during the last run().
        self.changed_by: list[str] = []

    @property
    def names(self) -> list[str]:
        return [pass_name(p) for p in self.passes]

    def run(self, graph: Graph) -> PassResult:
        """Apply every pass; raises PassError naming the pass that crashed or broke the graph."""
        self.changed_by = []
        if self.verify_each:
            verify(graph)  # a VerifyError here is the caller's graph, not a pass's fault
        for fn in self.passes:
            name = pass_name(fn)
            try:
                result = fn(graph)
            except Exception as err:
                raise PassError(f"pass {name} failed: {type(err).__name__}: {err}") from err
            if not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[0], Graph):
                raise PassError(f"pass {name} returned {type(result).__name__}, not a PassResult")
            if self.verify_each:
                try:
                    verify(result[0])
                except VerifyError as err:
                    raise PassError(f"pass {name} left an invalid graph: {err}") from err
            graph = result[0]
            if result[1]:
                self.changed_by.append(name)
        return PassResult(graph, bool(self.changed_by))


def default_pipeline(verify_each: bool = True, aggressive: bool = False) -> PassManager:
    """The passes `sglc compile` runs, in order.

    Only `aggressive=True` (``sglc compile --aggressive``) may change prompt text; every default
    pass keeps each prompt the model sees identical.
    """
    from sglc.passes.fork_hints import fork_hints
    from sglc.passes.lower_constraints import lower_constraints
    from sglc.passes.merge_constants import merge_constants
    from sglc.passes.prefix_hoisting import aggressive_prefix_hoisting, prefix_hoisting

    passes: list[Pass] = [
        merge_constants,
        aggressive_prefix_hoisting if aggressive else prefix_hoisting,
        fork_hints,
        merge_constants,
        lower_constraints,  # regex / JSON schema / dtype -> compressed FSM attribute, once
    ]
    return PassManager(passes, verify_each=verify_each)
