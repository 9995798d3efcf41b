"""Loops over lists known at run time: `for d in docs: s += d` with `docs` a program argument.

The graph holds the loop once, as a region of one stream (docs/ir.md): LOOP_BEGIN (the current
item), the body's nodes, LOOP_END (the variables the body set). The executor runs the body once
per item, so the program compiles once and runs for any length.

Tracing the body once is only right if the body does not depend on Python state carried from one
iteration to the next (a counter, a flag, a list appended to), and if the code after the loop does
not depend on how many times it ran. The tracer checks both instead of assuming them: besides the
trace where each loop runs once, it traces the program again with one loop at a time running
twice and zero times, and requires those traces to equal the one-iteration graph with that loop's
body repeated twice / removed (:func:`validate`). Any difference is a TraceError naming the line
where the traces part. A program that raises with an empty list (eager Python would too) compiles
with that loop's `empty_error`: a run with an empty list fails with the same message.

Supported: `for x in lst`, `for i, x in enumerate(lst, start)`, `for i in range(len(lst))`, items
and fields (`lst[0]`, `x["q"]`, `lst[i]`), `len(lst)` as text, `i + 1` on an index, nested loops
over items' lists, gens/selects with names, roles and var scopes balanced per iteration. Refused at
the line: comprehensions and unpacking of a list argument, `break`/`return` inside the loop, forks,
program calls and select branches inside the body, unnamed gens in the body, a value of the body
used after the loop (read the variable the body set instead).
"""
from __future__ import annotations

import builtins
import dis
import sys
from typing import Any, Callable, Iterator, Optional

from sglc.errors import SglcError
from sglc.frontend.errors import TraceError, trace_error, user_source
from sglc.frontend.symbolic import SymbolicValue
from sglc.frontend.trace_context import LoopFrame, Trace, TraceContext
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.types import ValueType
from sglc.ir.verify import loop_regions

_FOR_ITER = dis.opmap["FOR_ITER"]
_CACHE = dis.opmap.get("CACHE", 0)
#: Values a loop can iterate (lists of JSON values, known when the program runs).
_ITERABLE_OPS = frozenset({Op.ARGUMENT, Op.GET_ITEM, Op.LOOP_BEGIN})


# ----- iteration -----

def iterate(value: SymbolicValue) -> Iterator[Any]:
    """`iter(value)` for a `for` statement over a run-time list: the loop's iterator."""
    return _start(value, lambda begin, ctx: _item(ctx, begin, value))


def _start(value: SymbolicValue, make: Callable[[Node, TraceContext], Any], range_of: bool = False) -> Iterator[Any]:
    ctx = value.context
    producer = value.producer
    if producer.op not in _ITERABLE_OPS and not (range_of and producer.op is Op.LENGTH):
        # NOTE: generated text (prog.compile() breaks the graph here) or a run with graph breaks
        return iter(value._need("in a for loop (iter())"))
    caller = _user_frame()
    if _next_opcode(caller) != _FOR_ITER:
        raise trace_error(f"cannot iterate {value.describe()} here while tracing: only a `for` statement over it "
                          "compiles (not unpacking, list(), comprehensions or generator expressions); write a for "
                          f"loop that appends to the state; {value.hint()}", value.argument_name)
    site = (caller.f_code, caller.f_lasti)
    key = (site, ctx.loop_started.get(site, 0))
    ctx.loop_started[site] = key[1] + 1
    frame = LoopFrame(site=site, key=key, source=user_source(), what=value.describe())
    # NOTE: a nested loop appends where its outer loop does; a validation trace that runs a body
    # zero times learns its stream from the one-iteration trace
    frame.stream = ctx.loops[-1].stream if ctx.loops else None
    if frame.stream is None and ctx.loop_counts.get(site, 1) == 0:
        frame.stream = ctx.loop_streams.get(key)
    ctx.loops.append(frame)
    attrs = {"range": True} if range_of else {}
    begin = ctx.create_value(Op.LOOP_BEGIN, [producer], attrs, ValueType.INT if range_of else ValueType.ANY)
    frame.begin = begin
    ctx.loop_sites[begin] = site
    ctx.loop_keys[begin] = key
    return LoopIterator(ctx, frame, ctx.loop_counts.get(site, 1), lambda: make(begin, ctx))


def _user_frame() -> Any:
    """The innermost frame outside sglc: the one running the `for` statement."""
    from sglc.frontend.errors import _is_internal

    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    assert frame is not None, "a loop is started from the user's code"
    return frame


def _next_opcode(frame: Any) -> int:
    code = frame.f_code.co_code
    offset = frame.f_lasti + 2
    while offset < len(code) and code[offset] == _CACHE:
        offset += 2
    return code[offset] if offset < len(code) else -1


def _item(ctx: TraceContext, begin: Node, of: SymbolicValue) -> SymbolicValue:
    return SymbolicValue(ctx, begin, None, ValueType.ANY, f"an item of {of.describe()}")


class LoopIterator:
    """Yields the symbolic item `count` times (1 in the compiled trace; 0 and 2 when validating),
    then ends the loop: LOOP_END, and the variables the body set rebound to it."""

    def __init__(self, ctx: TraceContext, frame: LoopFrame, count: int, make_item: Callable[[], Any]) -> None:
        self.ctx, self.frame, self.count, self.make_item = ctx, frame, count, make_item
        self.yielded = 0

    def __iter__(self) -> "LoopIterator":
        return self

    def __next__(self) -> Any:
        if self.frame.ended:
            raise StopIteration
        if self.ctx.loops and self.ctx.loops[-1] is not self.frame:
            inner = self.ctx.loops[-1]
            raise trace_error(f"the loop over {inner.what} at {inner.source} was left before it ended (break or "
                              "return inside it), which a compiled loop cannot do; run the program eagerly")
        if self.yielded < self.count:
            self.yielded += 1
            return self.make_item()
        _end(self.ctx, self.frame)
        raise StopIteration

    def __del__(self) -> None:
        # NOTE: CPython drops a for loop's iterator as soon as the loop is left: a `break`
        # (or return, or exception) leaves it un-ended; the next node made inside says so.
        if not self.frame.ended:
            self.frame.broken = True


def _end(ctx: TraceContext, frame: LoopFrame) -> None:
    frame.ended = True
    begin = frame.begin
    assert begin is not None, "a loop frame has its loop_begin"
    names = frame.defined if ctx.loop_counts.get(frame.site, 1) > 0 else ctx.loop_variables.get(frame.key, [])
    # NOTE: the loop_end is the body's last node: made while the frame is still open, so it lands in
    # the body's stream (or waits with the body's nodes until the stream is known)
    end = ctx.create_value(Op.LOOP_END, [begin], {"variables": list(names)}, source=frame.source)
    ctx.loops.pop()
    ctx.node_loops[end] = tuple(ctx.loops)
    for outer in ctx.loops:
        outer.defined += [n for n in names if n not in outer.defined]
    if frame.stream is None:
        if ctx.loops:  # NOTE: still unknown: the outer body's first stream node decides both
            ctx.loops[-1].pending.extend(frame.pending)
        frame.pending.clear()
        return
    ctx.loop_streams_seen[frame.key] = frame.stream
    sink = ctx.sinks.get(frame.stream)
    for name in names:  # NOTE: after the loop, s["x"] of a variable the body set reads the loop_end
        if sink is not None:
            sink.rebind(name, SymbolicValue(ctx, end, name, ValueType.STR, f'"{name}" as the loop at {frame.source} left it'))


# ----- calls the tracer intercepts (rewrite.py): len, enumerate, range -----

def call(fn: Any) -> Any:
    if fn is builtins.len:
        return _len
    if fn is builtins.enumerate:
        return _enumerate
    if fn is builtins.range:
        return _range
    return fn


def _len(*args: Any, **kwargs: Any) -> Any:
    if len(args) == 1 and not kwargs and isinstance(args[0], SymbolicValue):
        value = args[0]
        if value.producer.op not in _ITERABLE_OPS or value.context.break_handler is not None:
            return builtins.len(value._need("in len()"))
        node = value.context.create_value(Op.LENGTH, [value.producer])
        return SymbolicValue(value.context, node, None, ValueType.INT, f"len({value.describe()})")
    return builtins.len(*args, **kwargs)


class _Enumerate:
    """enumerate(list) of a run-time list: a for loop over it yields (index, item) pairs."""

    def __init__(self, value: SymbolicValue, start: int) -> None:
        self.value, self.start = value, start

    def __iter__(self) -> Iterator[Any]:
        value, start = self.value, self.start

        def pair(begin: Node, ctx: TraceContext) -> tuple[Any, Any]:
            index = ctx.create_value(Op.LOOP_INDEX, [begin], {"start": start} if start else {})
            return (SymbolicValue(ctx, index, None, ValueType.INT, f"the index of {value.describe()}"),
                    _item(ctx, begin, value))

        return _start(value, pair)


def _enumerate(iterable: Any, start: int = 0) -> Any:
    if isinstance(iterable, SymbolicValue) and (iterable.producer.op not in _ITERABLE_OPS
                                                or iterable.context.break_handler is not None):
        return builtins.enumerate(iterable._need("in enumerate()"), start)
    if isinstance(iterable, SymbolicValue):
        if isinstance(start, SymbolicValue) or isinstance(start, bool) or not isinstance(start, int):
            raise trace_error("enumerate(..., start=...) over a run-time list needs an int start known at compile time")
        return _Enumerate(iterable, start)
    return builtins.enumerate(iterable, start)


class _Range:
    """range(len(list)) of a run-time list: a for loop over it yields the index."""

    def __init__(self, length: SymbolicValue) -> None:
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        length = self.length
        return _start(length, lambda begin, ctx: SymbolicValue(ctx, begin, None, ValueType.INT,
                                                               f"an index below {length.describe()}"), range_of=True)


def _range(*args: Any) -> Any:
    if any(isinstance(a, SymbolicValue) for a in args):
        if len(args) != 1:
            raise trace_error("range(start, stop[, step]) over a run-time length is not supported; "
                              "use range(len(lst)) or enumerate(lst)")
        return _Range(args[0])
    return builtins.range(*args)


# ----- validation: one iteration's graph stands for any number -----

def canonical(graph: Graph, loop_sites: Optional[dict[Node, Any]] = None,
              counts: Optional[dict[Any, int]] = None) -> tuple[list[tuple], list[Node]]:
    """The graph as a name-free sequence (op, attrs, type, stream, guard, input positions), with each
    loop body repeated `counts[site]` times (default 1: the graph as it is). Also: the node each
    entry came from."""
    nodes = graph.nodes
    ends = {begin: end for begin, end, _ in loop_regions(graph)}
    index = {node: i for i, node in enumerate(nodes)}
    out: list[tuple] = []
    origin: list[Node] = []
    position: dict[Node, int] = {}

    def emit(node: Node) -> None:
        guard = (position[node.guard.branch], node.guard.case) if node.guard else None
        out.append((node.op, repr(sorted(node.attrs.items())), node.type, node.stream, guard,
                    tuple(position[i] for i in node.inputs)))
        origin.append(node)
        position[node] = len(out) - 1

    def emit_range(start: int, stop: int) -> None:
        k = start
        while k < stop:
            node = nodes[k]
            emit(node)
            if node in ends and counts is not None:
                end = index[ends[node]]
                for _ in range(counts.get((loop_sites or {}).get(node), 1)):
                    emit_range(k + 1, end)
                emit(nodes[end])
                k = end + 1
            else:
                k += 1

    emit_range(0, len(nodes))
    return out, origin


def validate(run: Callable[[dict[Any, int], dict[Any, list[str]]], Trace], first: Trace) -> None:
    """Trace again with each loop site run twice and zero times; each trace must equal `first`'s
    graph with that loop's body repeated / removed. An empty-list trace that raises gives the loop
    an `empty_error` instead (the program fails for an empty list, eagerly too)."""
    sites: dict[Any, list[Node]] = {}
    for begin, site in first.loop_sites.items():
        sites.setdefault(site, []).append(begin)
    if not sites:
        return
    variables = {first.loop_keys[begin]: list(end.attrs.get("variables") or [])
                 for begin, end, _ in loop_regions(first.graph) if begin in first.loop_keys}
    for site, begins in sites.items():
        where = begins[0].source
        for count in (2, 0):
            try:
                other = run({site: count}, variables)
            except (TraceError, SglcError) as err:
                if count == 0:
                    _empty_error(begins, where, err)
                    continue
                raise TraceError(f"{where}: the loop here does not trace a second iteration: {err}") from None
            except Exception as err:  # NOTE: the user's code raised: with an empty list, eager would too
                if count == 0:
                    _empty_error(begins, where, err)
                    continue
                raise TraceError(f"{where}: the loop here does not trace a second iteration: "
                                 f"{type(err).__name__}: {err}") from None
            expected, _ = canonical(first.graph, first.loop_sites, {site: count})
            actual, origin = canonical(other.graph)
            if expected != actual:
                at = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
                line = origin[at].source if at < len(origin) else (origin[-1].source if origin else where)
                if count == 2:
                    raise TraceError(
                        f"{where}: the loop here traces differently in its second iteration (at {line}): Python state "
                        "carried from one iteration to the next (a counter, a flag, a list appended to) shapes the "
                        "prompt, so one compiled body cannot stand for every item; use enumerate() for a counter, "
                        "bind the list (sglc compile --bind), or run the program eagerly")
                raise TraceError(
                    f"{where}: the program traces differently when this loop runs zero times (at {line}): Python "
                    "state set inside the loop is read after it; read the variables the loop sets (s[\"x\"]) "
                    "instead, bind the list (sglc compile --bind), or run the program eagerly")


def _empty_error(begins: list[Node], where: str, err: BaseException) -> None:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    message = f"the program fails when the list of the loop at {where} is empty (as eager Python does): {text}"
    for begin in begins:
        begin.attrs["empty_error"] = message[:500]
