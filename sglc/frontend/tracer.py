"""run_trace: run a program's Python function once on a tracing state.

One run = one :class:`Trace` (a straight-line graph plus the select outcomes it assumed). Unbound
parameters become ARGUMENT nodes; the function-level driver (function.py) runs this once per
combination of compared select outcomes and branching.py merges the runs under BRANCH nodes.
"""
from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable, Optional, Sequence

from sglc.frontend import loops
from sglc.frontend.errors import TraceError
from sglc.frontend.formatted import FormattedText
from sglc.frontend.rewrite import traceable
from sglc.frontend.state import ProgramState
from sglc.frontend.symbolic import SymbolicValue
from sglc.frontend.trace_context import Trace, TraceContext, active_trace
from sglc.frontend.trace_sink import TraceSink
from sglc.ir.graph import Graph
from sglc.ir.ops import Op
from sglc.ir.types import ValueType, check_attr_value

_ANNOTATION_TYPES = {
    str: ValueType.STR, int: ValueType.INT, float: ValueType.FLOAT, bool: ValueType.BOOL, list: ValueType.LIST,
    "str": ValueType.STR, "int": ValueType.INT, "float": ValueType.FLOAT, "bool": ValueType.BOOL,
    "list": ValueType.LIST,
}


def run_trace(func: Callable[..., Any], graph_name: str, bindings: dict[str, Any], prescribed: Sequence[int],
              meta: dict[str, Any], loop_counts: Optional[dict[Any, int]] = None,
              loop_hints: Optional[tuple[dict[Any, list[str]], dict[Any, int]]] = None,
              break_handler: Any = None) -> Trace:
    """Run `func` once on a tracing state; unbound parameters become ARGUMENT nodes.

    `loop_counts`: iterations per loop site (default 1; loops.validate traces 0 and 2), with
    `loop_hints` (the variables and stream of each site, from the one-iteration trace).
    `break_handler`: a run with graph breaks (sglc/executor/graph_breaks.py): values Python needs
    are resolved by running the graph so far; the return value is kept as it is (no OUTPUT)."""
    graph = Graph(graph_name)
    ctx = TraceContext(graph, prescribed)
    ctx.loop_driver = loops.iterate
    ctx.loop_counts = dict(loop_counts or {})
    if loop_hints is not None:
        ctx.loop_variables, ctx.loop_streams = loop_hints
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
    sink = TraceSink(ctx, 0)
    state = ProgramState(sink)
    if break_handler is not None:
        ctx.break_handler = break_handler
        break_handler.attach(ctx, state)
    with active_trace(ctx):
        try:
            state.ret_value = traceable(func)(state, *args, **kwargs)
        except TraceError as err:
            err.partial_graph = graph  # NOTE: what was traced before it (prog.compile().explain() shows it)
            raise
        if break_handler is not None:
            return Trace(graph, ctx.points, ctx.taken, ret_value=state.ret_value)
        if ctx.loops:
            loop = ctx.loops[-1]
            raise TraceError(f"{loop.source}: {graph_name} returned inside the loop over {loop.what}, which a compiled "
                             "loop cannot do; return after the loop, or run the program eagerly")
        if state.ret_value is not None:
            _record_return(sink, state, state.ret_value, f"{def_source}: {graph_name} returns")
    return Trace(graph, ctx.points, ctx.taken, ctx.loop_sites, ctx.loop_streams_seen, ctx.loop_keys)


def _record_return(sink: TraceSink, state: ProgramState, value: Any, where: str) -> None:
    """An OUTPUT node at the end of stream 0: what the function returned (`ret_value` of a run)."""
    inputs: list[Any] = []

    def template(v: Any, depth: int) -> Any:
        if depth > 32:
            raise TraceError(f"{where} a value nested deeper than 32 levels, which a graph cannot store")
        if v is state:
            return {"state": True}
        if isinstance(v, (SymbolicValue, FormattedText)):
            inputs.append(sink.format_node(v) if isinstance(v, FormattedText) else sink.input_of(v))
            return {"input": len(inputs) - 1}
        if isinstance(v, (list, tuple)):
            return {"list" if isinstance(v, list) else "tuple": [template(x, depth + 1) for x in v]}
        if isinstance(v, dict):
            if not all(k is None or isinstance(k, (str, int, bool)) for k in v):
                raise TraceError(f"{where} a dict whose keys are not all str/int/bool/None, which a graph cannot store")
            return {"dict": [[k, template(x, depth + 1)] for k, x in v.items()]}
        if v is None or isinstance(v, (bool, int, float, str, bytes)):
            return {"const": v}
        raise TraceError(f"{where} a {type(v).__name__}, which a compiled graph cannot store; return text read "
                         "from the state (s[\"x\"]), plain values, or lists/tuples/dicts of them, or run it eagerly "
                         "(prog.run)")

    sink.ctx.source_override = where.split(": ")[0]
    try:
        value_template = template(value, 0)
        sink.ctx.create(Op.OUTPUT, 0, inputs, {"value": value_template})
    finally:
        sink.ctx.source_override = None


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
