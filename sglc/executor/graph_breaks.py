"""Graph breaks: `prog.compile()` of a program that runs Python on generated text.

torch.compile runs the Python it cannot capture between compiled graphs. Here the same: a program
whose trace needs the value of generated text (`int(s["n"])`, `if "yes" in s["a"]`, a tool call on
a gen's text) is run, per input, as compiled segments with its Python between them:

1. the function runs on a tracing state (its arguments bound to the input's values), recording
   nodes as `prog.compile()` does;
2. when Python needs a run-time value (a graph break), the nodes recorded since the last break
   become a graph of their own (a *segment*): the default passes run on it (prefix hoisting, fork
   hints, constraint lowering, ...) and the graph executor runs it, continuing stream 0's state
   (text, messages, variables) from the previous segment. Values of earlier segments it reads come
   in as arguments;
3. the value goes back to Python, which goes on recording the next segment.

So forks still run in parallel and share cached prefixes, and the prompts are the eager run's.
Program hints (program_hints.py): the segments of one run share one program id, ended once when
the run ends; a segment that a break ends is planned with ``continues=True``, so its last call on
stream 0 is a reuse (the next segment extends that text; next_use 0 unless calls of the segment it
does not wait on are still to finish).
`sglc compile` cannot do this (a graph.pb holds no Python): it refuses such programs at the line.
`CompiledProgram.explain()` lists the breaks: the first, found when compiling, and every other
one runs have met. A break needs every fork joined, no called program half-traced, and no role or
var scope open in stream 0 (the segment must be a graph of its own); otherwise it is a TraceError
at the line.
"""
from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Any, Callable, Optional, Sequence

from sglc.errors import SglcError
from sglc.executor.graph_executor import GraphExecutor
from sglc.executor.pool import DaemonPool
from sglc.executor.program_hints import end_program, new_program_id
from sglc.executor.results import RETURNS_STATE, CallRecord, ProgramResult
from sglc.executor.stream_state import StreamState
from sglc.frontend.errors import TraceError, trace_error, user_source
from sglc.frontend.formatted import FormattedText
from sglc.frontend.state import ProgramState
from sglc.frontend.symbolic import SymbolicValue
from sglc.frontend.trace_context import TraceContext
from sglc.frontend.tracer import run_trace
from sglc.ir import format_pieces
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.types import ValueType


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """Where a program needed a run-time value, and which."""

    source: str  # the user's file:line
    reason: str  # one line: the value and the construct

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


def break_of(err: TraceError) -> GraphBreak:
    """The break a compile-time TraceError stands for (its message is 'file.py:12: cannot use ...')."""
    text = str(err)
    source, _, reason = text.partition(": ")
    reason = reason.split(" while tracing")[0]
    return GraphBreak(source, reason[len("cannot use "):] if reason.startswith("cannot use ") else reason)


class SegmentFailed(SglcError):
    """A segment's graph failed when it ran (its message is the node's error)."""


class BreakingProgram:
    """Runs one program with graph breaks for any number of inputs; records the breaks it meets."""

    def __init__(self, fn: Any, passes: Optional[Sequence[Callable[[Graph], Any]]], bound: dict[str, Any],
                 first: GraphBreak) -> None:
        self.fn = fn
        self.passes = passes
        self.bound = dict(bound)
        self._lock = threading.Lock()
        self.breaks: list[GraphBreak] = [first]

    def record(self, found: GraphBreak) -> None:
        with self._lock:
            if found not in self.breaks:
                self.breaks.append(found)

    def pipeline(self) -> Any:
        from sglc.passes import PassManager, default_pipeline

        return default_pipeline() if self.passes is None else PassManager(list(self.passes))

    def run_one(self, backend: Any, arguments: dict[str, Any], *, index: int = 0, sampling: Optional[dict] = None,
                max_parallel: int = 16, timeout: Optional[float] = None, program_hints: bool = True) -> ProgramResult:
        """One input: its result (never raises for the program's own failures: `.error`).
        `program_hints`: send program hints (one program id for all the run's segments)."""
        program_id = new_program_id(self.fn.name) if program_hints else None
        run = _SegmentedRun(self, backend, sampling or {}, max_parallel, timeout, program_id)
        try:
            bindings = self._bindings(arguments)
            trace = run_trace(self.fn.func, self.fn.name, bindings, [], {}, break_handler=run)
            run.flush(None)
            error: Optional[str] = None
            ret = run.concrete(trace.ret_value)
        except SegmentFailed as err:
            error, ret = str(err), None
        except Exception as err:  # NOTE: the program's own Python failed (as it would eagerly)
            from sglc.executor.eager import locate

            error, ret = locate(err), None
        finally:
            run.close()
            if program_id is not None and run.segments_started:
                end_program(backend, program_id)
        root = run.root
        return ProgramResult(index=index, arguments=dict(arguments), variables=dict(root.variables), text=root.text,
                             messages=[dict(m) for m in root.messages], calls=list(run.calls), error=error,
                             meta_info=dict(root.meta_info), ret_value=ret)

    def _bindings(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Every parameter bound to its value: the run traces with concrete arguments (no ARGUMENT
        nodes), so Python on them runs as it does eagerly."""
        fn = self.fn
        unknown = [k for k in arguments if k not in fn.arg_names]
        fixed = [k for k in unknown if k in self.bound]
        if fixed:
            raise TypeError(f"argument(s) {', '.join(sorted(fixed))} of {fn.name} were fixed at compile time")
        if unknown:
            raise TypeError(f"unknown argument(s) {', '.join(sorted(unknown))}; the program takes "
                            f"{', '.join(fn.arg_names) or 'no arguments'}")
        bindings = {**fn.bind_arguments, **self.bound, **arguments}
        params = list(inspect.signature(fn.func).parameters.values())[1:]
        for param in params:
            if param.name not in bindings:
                if param.default is param.empty:
                    raise TypeError(f"missing argument {param.name!r} of {fn.name}")
                bindings[param.name] = param.default
        return bindings


class _SegmentedRun:
    """One input's run: the break handler of its trace (TraceContext.break_handler)."""

    def __init__(self, program: BreakingProgram, backend: Any, sampling: dict, max_parallel: int,
                 timeout: Optional[float], program_id: Optional[str] = None) -> None:
        self.program = program
        self.program_id = program_id  # shared by every segment (None: no program hints)
        self.segments_started = 0
        self.backend = backend
        self.sampling = sampling
        self.max_parallel = max_parallel
        self.timeout = timeout
        self.pool = DaemonPool(max_parallel)
        self.root = StreamState()
        self.calls: list[CallRecord] = []
        self.values: dict[Node, Any] = {}
        self.done = 0  # nodes of the trace's graph already run
        self.ctx: Optional[TraceContext] = None
        self.state: Optional[ProgramState] = None
        self.segments = 0

    def attach(self, ctx: TraceContext, state: ProgramState) -> None:
        self.ctx, self.state = ctx, state

    def close(self) -> None:
        self.pool.shutdown()

    # ----- what the frontend asks -----
    def resolve(self, value: SymbolicValue, construct: str) -> Any:
        """The run-time value of `value` (running the segment that makes it first: a graph break)."""
        node = value.producer
        if node not in self.values:
            self.flush(GraphBreak(user_source(), f"{value.describe()} {construct}"))
        if node not in self.values:
            raise trace_error(f"{value.describe()} has no value: the node that makes it did not run")
        result = self.values[node]
        if node.op is Op.JOIN:
            return result[value.var]
        return result

    def render(self, text: FormattedText) -> str:
        """The run-time text of formatted text (Python's formatting of the values)."""
        pieces: list[Any] = []
        values: list[Any] = []
        for part in text.parts:
            if isinstance(part, str):
                pieces.append(part)
                continue
            value = part.value
            values.append(self.render(value) if isinstance(value, FormattedText)
                          else self.resolve(value, "in formatted text Python reads"))
            pieces.append(part.attrs(len(values) - 1))
        return format_pieces.render(pieces, values)

    def meta_info(self, sink: Any, name: str) -> Any:
        self._root_only(sink, "get_meta_info")
        self.flush(GraphBreak(user_source(), f"s.get_meta_info({name!r})"))
        return self.root.meta_info.get(name)

    def messages(self, sink: Any) -> Any:
        self._root_only(sink, "messages()")
        self.flush(GraphBreak(user_source(), "s.messages()"))
        return [dict(m) for m in self.root.messages]

    def _root_only(self, sink: Any, what: str) -> None:
        if sink.stream != 0:
            raise trace_error(f"cannot read {what} of a fork child or called program between segments: read it "
                              "from the program's own state after join(), or run the program eagerly")

    def concrete(self, value: Any) -> Any:
        """The return value with every symbolic part replaced by its run-time value."""
        if isinstance(value, SymbolicValue):
            return self.resolve(value, "as the return value")
        if isinstance(value, FormattedText):
            return self.render(value)
        if isinstance(value, ProgramState) and value is self.state:
            return RETURNS_STATE
        if isinstance(value, list):
            return [self.concrete(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.concrete(v) for v in value)
        if isinstance(value, dict):
            return {k: self.concrete(v) for k, v in value.items()}
        return value

    # ----- running a segment -----
    def flush(self, at: Optional[GraphBreak]) -> None:
        """Run the nodes recorded since the last break (`at`: the break that needs them; None: the end)."""
        assert self.ctx is not None, "the run is attached to its trace"
        nodes = self.ctx.graph.nodes[self.done:]
        if at is not None:
            self._check_can_break(at)
            self.program.record(at)
        if not nodes:
            return
        segment, arguments = self._segment(nodes)
        graph = self.program.pipeline().run(segment).graph
        # NOTE: a break's segment is continued by the next one (its stream 0 text is extended)
        executor = GraphExecutor(graph, self.backend, max_parallel=self.max_parallel, sampling=self.sampling,
                                 pool=self.pool, timeout=self.timeout, program_hints=self.program_id is not None,
                                 continues=at is not None)
        self.segments_started += 1
        result, values = executor.run_segment(arguments, self.root, self.program_id)
        self.calls.extend(result.calls)
        self.segments += 1
        if result.error is not None:
            raise SegmentFailed(result.error)
        for node in nodes:
            if node.name in values:
                self.values[node] = values[node.name]
        self.done = len(self.ctx.graph.nodes)

    def _check_can_break(self, at: GraphBreak) -> None:
        ctx = self.ctx
        assert ctx is not None
        why = ""
        if ctx.open_forks:
            why = f"the fork at {ctx.open_forks[-1].source} is not joined yet; join it first"
        elif ctx.active_calls:
            why = "a called program is being traced (its stream is open); read its values after the call"
        else:
            sink = ctx.sinks.get(0)
            if sink is not None and sink.role is not None:
                why = f"the {sink.role} role is open; end the role first"
            elif sink is not None and sink.scopes:
                why = f"var_scope {sink.scopes[-1]!r} is open; close it first"
        if why:
            raise TraceError(f"{at.source}: cannot break the graph here for {at.reason}: {why}, or run the program "
                             "eagerly (prog.run)")

    def _segment(self, nodes: list[Node]) -> tuple[Graph, dict[str, Any]]:
        """The nodes as a graph of their own; values of earlier segments become its arguments."""
        assert self.ctx is not None
        segment = Graph(f"{self.ctx.graph.name}_segment_{self.segments}")
        arguments: dict[str, Any] = {}
        mapping: dict[Node, Node] = {}
        streams = {0: 0}

        def carried(node: Node, value: Any) -> Node:
            name = f"__carried_{node.name}"
            if name not in arguments:
                kind = node.type if node.type not in (ValueType.NONE, ValueType.FORK, ValueType.STREAM) else ValueType.ANY
                mapping[node] = segment.create_node(Op.ARGUMENT, attrs={"name": name}, type=kind,
                                                    meta=dict(node.meta), name=name)
                arguments[name] = value
            return mapping[node]

        for node in nodes:
            if node.op is Op.GET_FORK_ITEM:
                streams[node.stream] = segment.new_stream()
            if node.op is Op.VARIABLE and node.inputs[0] not in mapping:
                mapping[node] = carried(node, self._variable(node))
                continue
            inputs = [mapping[i] if i in mapping else carried(i, self.values[i]) for i in node.inputs]
            if node.stream not in streams:
                raise TraceError(f"{node.source}: a graph break left stream {node.stream} half-run; run the program "
                                 "eagerly (prog.run)")
            mapping[node] = segment.create_node(node.op, inputs, dict(node.attrs), node.type, streams[node.stream],
                                                None, dict(node.meta), name=node.name)
        segment.meta["arg_names"] = list(arguments)
        return segment, arguments

    def _variable(self, node: Node) -> Any:
        producer = node.inputs[0]
        value = self.values[producer]
        return value[node.attrs["name"]] if producer.op in (Op.JOIN, Op.LOOP_END) else value
