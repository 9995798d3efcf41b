"""The state of one trace run, and what it records besides nodes (the select outcomes it assumed).

A :class:`TraceContext` is shared by every stream of one run: the graph being built, the branch
points met so far, the case assumed at each. Symbolic values point at it (a select comparison asks
it to decide), the tracing sink records nodes through it, and `run_trace` (tracer.py) makes it
the current trace while the program's function runs.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Iterator, Optional, Sequence

from sglc.frontend.errors import trace_error, user_source
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.types import ValueType

_ACTIVE: contextvars.ContextVar[Optional["TraceContext"]] = contextvars.ContextVar("sglc_trace", default=None)


@dataclasses.dataclass(frozen=True)
class BranchPoint:
    """The first comparison of a select in one trace."""

    select_index: int  # position of the SELECT node in the trace's node list
    num_cases: int
    position: int  # number of nodes recorded before the comparison
    source: str  # the user's file:line of the comparison


@dataclasses.dataclass
class Trace:
    """One straight-line run: its graph, and the select outcome assumed at each branch point."""

    graph: Graph
    points: list[BranchPoint]
    taken: list[int]


class TraceContext:
    """State shared by all streams of one trace run."""

    def __init__(self, graph: Graph, prescribed: Sequence[int]) -> None:
        self.graph = graph
        self.prescribed = list(prescribed)
        self.points: list[BranchPoint] = []
        self.taken: list[int] = []
        self._decided: dict[Node, int] = {}
        self._anonymous = 0
        self.last_in_stream: dict[int, Node] = {}
        #: The source line nodes get instead of the current user line (set while the tracer
        #: records something the user's code did earlier, such as its return value).
        self.source_override: Optional[str] = None

    def create(self, op: Op, stream: int, inputs: Sequence[Node] = (), attrs: Optional[dict[str, Any]] = None,
               type: Optional[ValueType] = None, source: Optional[str] = None) -> Node:
        """Append a node to the trace, stamped with the user's file:line."""
        node = self.graph.create_node(op, inputs, attrs, type, stream,
                                      meta={"source": source or self.source_override or user_source()})
        self.last_in_stream[stream] = node
        return node

    def decide(self, select: Node) -> int:
        """The case this trace assumes for `select` (fixed at its first comparison)."""
        if select in self._decided:
            return self._decided[select]
        k = len(self.points)
        num_cases = len(select.attrs["choices"])  # type: ignore[arg-type]
        case = self.prescribed[k] if k < len(self.prescribed) else 0
        if case >= num_cases:
            raise trace_error("the program traced differently on two runs (does it depend on randomness or global state?)")
        self.points.append(BranchPoint(self.graph.index(select), num_cases, len(self.graph.nodes), user_source()))
        self.taken.append(case)
        self._decided[select] = case
        return case

    def anonymous_name(self, kind: str) -> str:
        """A variable name for an unnamed gen/select (SGLang leaves them unnamed)."""
        self._anonymous += 1
        return f"_{kind}_{self._anonymous - 1}"


def current_trace() -> Optional[TraceContext]:
    """The trace being recorded in this thread/context, if any."""
    return _ACTIVE.get()


@contextlib.contextmanager
def active_trace(ctx: TraceContext) -> Iterator[None]:
    """Within the block, current_trace() is `ctx`."""
    token = _ACTIVE.set(ctx)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
