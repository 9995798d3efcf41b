"""The tracing sink: runs a program's Python function once and records it as IR nodes.

One run = one :class:`Trace` (a straight-line graph plus the select outcomes it assumed). The
function-level driver (function.py) runs it once per combination of compared select outcomes
and branching.py merges the runs under BRANCH nodes.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import os
from typing import Any, Callable, Optional, Sequence

from sglc.frontend.errors import TraceError, trace_error, user_source
from sglc.frontend.primitives import Gen, Select
from sglc.frontend.sink import StreamSink
from sglc.frontend.state import ProgramState
from sglc.frontend.symbolic import SymbolicValue
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.types import TEXT_LIKE, ValueType, check_attr_value

_ACTIVE: contextvars.ContextVar[Optional["TraceContext"]] = contextvars.ContextVar("sglc_trace", default=None)

_ANNOTATION_TYPES = {
    str: ValueType.STR, int: ValueType.INT, float: ValueType.FLOAT, bool: ValueType.BOOL, list: ValueType.LIST,
    "str": ValueType.STR, "int": ValueType.INT, "float": ValueType.FLOAT, "bool": ValueType.BOOL,
    "list": ValueType.LIST,
}


def current_trace() -> Optional["TraceContext"]:
    """The trace being recorded in this thread/context, if any."""
    return _ACTIVE.get()


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

    def create(self, op: Op, stream: int, inputs: Sequence[Node] = (), attrs: Optional[dict[str, Any]] = None,
               type: Optional[ValueType] = None, source: Optional[str] = None) -> Node:
        """Append a node to the trace, stamped with the user's file:line."""
        node = self.graph.create_node(op, inputs, attrs, type, stream, meta={"source": source or user_source()})
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


class TraceSink(StreamSink):
    """Records one stream's primitives as nodes of the trace's graph."""

    def __init__(self, ctx: TraceContext, stream: int, variables: Optional[dict[str, Any]] = None,
                 role: Optional[str] = None, fork: Optional[Node] = None, index: int = 0) -> None:
        self.ctx = ctx
        self.stream = stream
        self.variables: dict[str, Any] = dict(variables or {})
        self.defined: list[str] = []  # variables this stream produced, in order (what a join gathers)
        self.role = role
        self.scopes: list[str] = []
        self.fork_node = fork
        self.index = index
        self.joined = False

    # ----- helpers -----
    def _create(self, op: Op, inputs: Sequence[Node] = (), attrs: Optional[dict[str, Any]] = None,
                type: Optional[ValueType] = None) -> Node:
        if self.joined:
            raise trace_error(f"cannot use fork child {self.index} after its fork was joined")
        return self.ctx.create(op, self.stream, inputs, attrs, type)

    def _define(self, name: str, value: SymbolicValue) -> None:
        self.variables[name] = value
        if name not in self.defined:
            self.defined.append(name)

    def input_of(self, value: SymbolicValue) -> Node:
        """The node this stream reads `value` from (a VARIABLE node for another stream's result)."""
        if value.context is not self.ctx:
            raise trace_error(f"{value.describe()} belongs to another trace; values cannot cross traces")
        producer = value.producer
        if producer.op is Op.ARGUMENT:
            return producer
        if producer.op is not Op.JOIN and producer.stream == self.stream:
            return producer
        if producer.op is Op.STREAM_TEXT:
            raise trace_error(
                f"cannot read {value.describe()} of stream {producer.stream} in stream {self.stream}: "
                "capture the text with s.var_scope(name) and read that variable instead"
            )
        return self._create(Op.VARIABLE, [producer], {"name": value.var}, type=value.type)

    def _text_input(self, value: SymbolicValue, what: str) -> Node:
        if value.type not in TEXT_LIKE:
            hint = ("read one child's value with forks[i][name] instead" if value.producer.op is Op.JOIN
                    else "only text-like values (str, int, float, bool) can be appended")
            raise trace_error(f"cannot use {value.describe()} (a {value.type.value}) {what}: {hint}")
        return self.input_of(value)

    # ----- appending -----
    def append_text(self, text: str) -> None:
        self._create(Op.CONSTANT_TEXT, attrs={"text": text})

    def append_value(self, value: Any) -> None:
        self._create(Op.APPEND, [self._text_input(value, "as prompt text")])

    def gen(self, expr: Gen) -> None:
        name = expr.name or self.ctx.anonymous_name("gen")
        node = self._create(Op.GEN, attrs={"name": name, **expr.attrs}, type=expr.type)
        label = f'gen("{name}")' if expr.name else "an unnamed gen"
        self._define(name, SymbolicValue(self.ctx, node, name, expr.type, f"the result of {label}"))

    def select(self, expr: Select) -> None:
        name = expr.name or self.ctx.anonymous_name("select")
        attrs = {"name": name, "choices": expr.choices, "temperature": expr.temperature,
                 "choices_method": expr.choices_method}
        node = self._create(Op.SELECT, attrs=attrs)
        label = f'select("{name}")' if expr.name else "an unnamed select"
        self._define(name, SymbolicValue(self.ctx, node, name, ValueType.STR, f"the result of {label}"))

    def role_begin(self, role: str) -> None:
        if self.role is not None:
            raise trace_error(f"cannot begin the {role} role inside the open {self.role} role: roles do not nest")
        self._create(Op.ROLE_BEGIN, attrs={"role": role})
        self.role = role

    def role_end(self, role: str) -> None:
        if self.role != role:
            state = "no role is open" if self.role is None else f"the open role is {self.role}"
            raise trace_error(f"cannot end the {role} role: {state}")
        self._create(Op.ROLE_END, attrs={"role": role})
        self.role = None

    def image(self, path: Any) -> None:
        if isinstance(path, SymbolicValue):
            self._create(Op.IMAGE, [self._text_input(path, "as an image path")])
        else:
            self._create(Op.IMAGE, attrs={"path": path})

    def video(self, path: Any, num_frames: int) -> None:
        if isinstance(path, SymbolicValue):
            self._create(Op.VIDEO, [self._text_input(path, "as a video path")], {"num_frames": num_frames})
        else:
            self._create(Op.VIDEO, attrs={"path": path, "num_frames": num_frames})

    def var_scope_begin(self, name: str) -> None:
        self._create(Op.VAR_SCOPE_BEGIN, attrs={"name": name})
        self.scopes.append(name)

    def var_scope_end(self, name: str) -> None:
        if not self.scopes or self.scopes[-1] != name:
            raise trace_error(f'cannot end var_scope "{name}": it is not the innermost open scope of this state')
        self.scopes.pop()
        node = self._create(Op.VAR_SCOPE_END, attrs={"name": name})
        self._define(name, SymbolicValue(self.ctx, node, name, ValueType.STR, f'the var_scope "{name}"'))

    # ----- reading back -----
    def get_var(self, name: str) -> Any:
        if name not in self.variables:
            known = ", ".join(sorted(self.variables)) or "none"
            raise trace_error(f'no variable "{name}" in this state (defined so far: {known})')
        return self.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        # NOTE: a trace-time binding only; it creates no node and a join does not gather it.
        self.variables[name] = value

    def has_var(self, name: str) -> bool:
        return name in self.variables

    def text(self) -> Any:
        node = self._create(Op.STREAM_TEXT)
        return SymbolicValue(self.ctx, node, None, ValueType.STR, "s.text()")

    def messages(self) -> Any:
        raise trace_error(
            "cannot call s.messages() while tracing: messages hold generated text, which exists only when "
            "the program runs; call messages() on the state that run() returns, or pass text on with "
            "s.text() / s.var_scope(name)"
        )

    def get_meta_info(self, name: str) -> Any:
        raise trace_error(f'cannot read the meta info of "{name}" while tracing: it exists only after a run')

    # ----- streams -----
    def fork(self, n: int) -> list[StreamSink]:
        fork = self._create(Op.FORK, attrs={"n": n})
        children = []
        for i in range(n):
            stream = self.ctx.graph.new_stream()
            self.ctx.create(Op.GET_FORK_ITEM, stream, [fork], {"index": i})
            children.append(TraceSink(self.ctx, stream, self.variables, self.role, fork, i))
        return children

    def join(self, children: list[StreamSink], mode: str) -> None:
        sinks = [c for c in children if isinstance(c, TraceSink)]
        fork = sinks[0].fork_node if sinks else None
        if (fork is None or len(sinks) != len(children) or any(c.fork_node is not fork for c in sinks)
                or fork.stream != self.stream or sorted(c.index for c in sinks) != list(range(fork.attrs["n"]))):  # type: ignore[arg-type]
            raise trace_error("join() needs all children of one fork of this state")
        if any(c.joined for c in sinks):
            raise trace_error("this fork was joined already")
        sinks.sort(key=lambda c: c.index)
        gathered: list[str] = []
        if mode == "gather_variable":
            for child in sinks:
                gathered += [n for n in child.defined if n not in self.variables and n not in gathered]
        inputs = [fork] + [self.ctx.last_in_stream[c.stream] for c in sinks]
        join = self._create(Op.JOIN, inputs, {"mode": mode, "variables": gathered})
        for child in sinks:
            child.joined = True
        for name in gathered:
            self._define(name, SymbolicValue(self.ctx, join, name, ValueType.LIST, f'the list "{name}" gathered by join()'))

    def describe(self) -> str:
        return f"tracing stream {self.stream}"


def run_trace(func: Callable[..., Any], graph_name: str, bindings: dict[str, Any], prescribed: Sequence[int],
              meta: dict[str, Any]) -> Trace:
    """Run `func` once on a tracing state; unbound parameters become ARGUMENT nodes."""
    graph = Graph(graph_name)
    ctx = TraceContext(graph, prescribed)
    code = func.__code__
    def_source = f"{os.path.basename(code.co_filename)}:{_def_line(func)}"
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    arg_names: list[str] = []
    for param in list(inspect.signature(func).parameters.values())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise _error_at(def_source, f"cannot trace parameter {param} of {graph_name}: *args and **kwargs "
                                "have no fixed names; list the parameters explicitly")
        if param.name in bindings:
            value = bindings[param.name]
        else:
            attrs: dict[str, Any] = {"name": param.name}
            if param.default is not param.empty:
                try:
                    check_attr_value(param.default, f"default of {param.name}")
                except TypeError:
                    raise _error_at(def_source, f"the default of parameter {param.name} of {graph_name} is a "
                                        f"{type(param.default).__name__}, which a graph cannot store; bind it "
                                        f"when tracing ({graph_name}.trace({param.name}=...))") from None
                attrs["default"] = param.default
            node = ctx.create(Op.ARGUMENT, 0, attrs=attrs, type=_annotation_type(param.annotation), source=def_source)
            value = SymbolicValue(ctx, node, None, node.type, f'argument "{param.name}"')
            arg_names.append(param.name)
        if param.kind is param.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[param.name] = value
    graph.meta.update(meta)
    graph.meta["arg_names"] = arg_names
    graph.meta["source_file"] = os.path.basename(code.co_filename)
    state = ProgramState(TraceSink(ctx, 0))
    token = _ACTIVE.set(ctx)
    try:
        state.ret_value = func(state, *args, **kwargs)
    finally:
        _ACTIVE.reset(token)
    return Trace(graph, ctx.points, ctx.taken)


def _error_at(source: str, message: str) -> TraceError:
    """A TraceError located at `source` (for problems of a definition, not of the current line)."""
    return TraceError(f"{source}: {message}")


def _annotation_type(annotation: Any) -> ValueType:
    try:
        return _ANNOTATION_TYPES.get(annotation, ValueType.ANY)
    except TypeError:  # unhashable annotation objects
        return ValueType.ANY


@functools.lru_cache(maxsize=256)
def _def_line(func: Callable[..., Any]) -> int:
    """The line of the `def` statement (co_firstlineno points at the first decorator)."""
    first = func.__code__.co_firstlineno
    try:
        lines, start = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return first
    for offset, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "async def ")):
            return start + offset
    return first
