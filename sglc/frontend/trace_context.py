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
    #: Each loop_begin's site (where the `for` statement is; loops.py validates loops by site).
    loop_sites: dict[Node, Any] = dataclasses.field(default_factory=dict)
    #: The stream each loop's body appends to, by its key (LoopFrame.key).
    loop_streams: dict[Any, int] = dataclasses.field(default_factory=dict)
    #: Each loop_begin's key.
    loop_keys: dict[Node, Any] = dataclasses.field(default_factory=dict)
    #: What the function returned (a run with graph breaks reads it; tracing records an OUTPUT).
    ret_value: Any = None


@dataclasses.dataclass(eq=False)
class LoopFrame:
    """A `for` loop over a list known at run time, while its body is traced (loops.py)."""

    site: Any  # (code object, bytecode offset) of the `for` statement: the same in every trace
    key: Any  # (site, how many loops of that site started before it in this trace)
    source: str  # the user's file:line of the `for`
    what: str  # what it iterates, for messages ('argument "docs"')
    begin: Optional[Node] = None
    stream: Optional[int] = None  # decided by the first stream node of the body
    pending: list[Node] = dataclasses.field(default_factory=list)  # value nodes made before that
    defined: list[str] = dataclasses.field(default_factory=list)  # variables the body sets
    ended: bool = False
    broken: bool = False  # the body was left without ending the loop (break, return, an exception)


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
        # ----- loops over run-time lists (loops.py) -----
        self.loops: list[LoopFrame] = []
        self.node_loops: dict[Node, tuple[LoopFrame, ...]] = {}
        self.loop_sites: dict[Node, Any] = {}
        #: How many iterations each loop site traces (validation traces use 0 and 2; default 1).
        self.loop_counts: dict[Any, int] = {}
        #: Variables each loop's body sets, and the stream it appends to, by loop key, for a trace
        #: that runs a body zero times (from the one-iteration trace).
        self.loop_variables: dict[Any, list[str]] = {}
        self.loop_streams: dict[Any, int] = {}
        self.loop_streams_seen: dict[Any, int] = {}
        self.loop_keys: dict[Node, Any] = {}
        self.loop_started: dict[Any, int] = {}
        #: The sink of each stream (loops rebind variables set in a body when it ends).
        self.sinks: dict[int, Any] = {}
        #: `iter(value)` of a symbolic value in a `for` statement (set by the tracer: loops.iterate).
        self.loop_driver: Optional[Any] = None
        #: In a run with graph breaks: resolves a symbolic value to its run-time value (running the
        #: graph recorded so far first); None while compiling (sglc/executor/graph_breaks.py).
        self.break_handler: Optional[Any] = None
        #: Forks not joined yet and called programs being traced (a graph break needs neither).
        self.open_forks: list[Node] = []
        self.active_calls = 0

    def create(self, op: Op, stream: int, inputs: Sequence[Node] = (), attrs: Optional[dict[str, Any]] = None,
               type: Optional[ValueType] = None, source: Optional[str] = None) -> Node:
        """Append a node to the trace, stamped with the user's file:line. Inside a loop body the
        node joins the body (loops.py: one stream per body, no streams created, nothing of a
        finished body used after it)."""
        frames = tuple(self.loops)
        if frames:
            self._check_loop_body(op, stream, frames)
        self._check_loop_inputs(op, inputs, frames)
        node = self.graph.create_node(op, inputs, attrs, type, stream,
                                      meta={"source": source or self.source_override or user_source()})
        self.last_in_stream[stream] = node
        if frames:
            self.node_loops[node] = frames
        return node

    def create_value(self, op: Op, inputs: Sequence[Node] = (), attrs: Optional[dict[str, Any]] = None,
                     type: Optional[ValueType] = None, source: Optional[str] = None) -> Node:
        """A pure value node (an item, a length, a loop index) made by an expression: in the open
        loop's stream (its first stream node decides which; until then it waits, in stream 0), or
        in stream 0 outside loops."""
        frames = tuple(self.loops)
        self._check_loop_inputs(op, inputs, frames)
        for frame in frames:
            if frame.broken:
                raise trace_error(f"the loop over {frame.what} at {frame.source} was left before it ended (break or "
                                  "return inside it), which a compiled loop cannot do; run the program eagerly")
        decided = frames[-1].stream if frames else 0
        stream = 0 if decided is None else decided
        node = self.graph.create_node(op, inputs, attrs, type, stream,
                                      meta={"source": source or self.source_override or user_source()})
        if frames:
            self.node_loops[node] = frames
        if decided is None:
            frames[-1].pending.append(node)  # NOTE: every open loop is undecided then (they nest)
        else:
            self.last_in_stream[stream] = node
        return node

    def _check_loop_body(self, op: Op, stream: int, frames: tuple[LoopFrame, ...]) -> None:
        inner = frames[-1]
        for frame in frames:
            if frame.broken:
                raise trace_error(f"the loop over {frame.what} at {frame.source} was left before it ended (break or "
                                  "return inside it), which a compiled loop cannot do; run the program eagerly")
        if op in (Op.FORK, Op.GET_FORK_ITEM, Op.JOIN, Op.BRANCH, Op.OUTPUT):
            what = {Op.OUTPUT: "return a value", Op.BRANCH: "branch on a select"}.get(op, "fork or call a program")
            raise trace_error(f"cannot {what} inside the loop over {inner.what} at {inner.source}: a compiled loop's "
                              "body runs in one stream, once per item; move it out of the loop, bind the list "
                              f"(sglc compile --bind), or run the program eagerly")
        for frame in frames:
            if frame.stream is None:
                self._decide_stream(frame, stream)
            if frame.stream != stream:
                raise trace_error(f"cannot append to stream {stream} inside the loop over {frame.what} at "
                                  f"{frame.source}, whose body appends to stream {frame.stream}: a compiled loop's "
                                  "body appends to one state")

    def _decide_stream(self, frame: LoopFrame, stream: int) -> None:
        """The body appends to `stream`: the loop and the value nodes made so far move there."""
        frame.stream = stream
        for node in frame.pending:
            node.stream = stream
        if frame.pending:
            self.last_in_stream[stream] = frame.pending[-1]
        frame.pending.clear()

    def _check_loop_inputs(self, op: Op, inputs: Sequence[Node], frames: tuple[LoopFrame, ...]) -> None:
        if op is Op.LOOP_END:
            return
        for inp in inputs:
            owner = self.node_loops.get(inp, ())
            if owner and owner != frames[:len(owner)]:
                loop = owner[-1]
                raise trace_error(f"cannot use a value of the loop over {loop.what} at {loop.source} after that loop "
                                  "ended: it changes with each iteration; set a variable in the loop "
                                  "(s += gen(\"x\")) and read s[\"x\"] after it, or run the program eagerly")

    def decide(self, select: Node) -> int:
        """The case this trace assumes for `select` (fixed at its first comparison)."""
        if select in self._decided:
            return self._decided[select]
        if self.loops:
            loop = self.loops[-1]
            raise trace_error(f"cannot branch on a select inside the loop over {loop.what} at {loop.source}: each "
                              "iteration could take another case; bind the list (sglc compile --bind) or run the "
                              "program eagerly")
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
