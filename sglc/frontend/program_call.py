"""A program called from inside another while tracing: `d = expand_tip(topic=t, tip=s["tip"])`.

The callee becomes its own prompt stream of the caller's graph: a FORK (n=1) with attribute
``program`` (the callee's name) in stream 0 starts a stream that begins EMPTY (not with the
caller's text) and sees none of the caller's variables. The values passed in are read across
streams (VARIABLE nodes, or the caller's ARGUMENT nodes), so the callee waits only for them and
runs in parallel with the caller's later text and calls. What it returns is the callee's state:
`d["detail"]` is the callee's variable, read by the caller through a VARIABLE node.
(SGLang's semantics: a call without a state runs a separate program; eager mode does exactly that.)
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from sglc.frontend.errors import trace_error
from sglc.frontend.rewrite import traceable
from sglc.frontend.state import ProgramState
from sglc.frontend.trace_context import TraceContext
from sglc.frontend.trace_sink import TraceSink
from sglc.ir.ops import Op


def trace_call(ctx: TraceContext, name: str, func: Callable[..., Any], bound: dict[str, Any],
               args: tuple, kwargs: dict[str, Any]) -> ProgramState:
    """Trace `func` (the callee, with its `bound` arguments) as a new stream of `ctx`'s graph."""
    try:
        call = inspect.signature(func).bind(None, *args, **{**bound, **kwargs})
    except TypeError as err:
        raise trace_error(f"calling program {name}: {err}") from None
    call.apply_defaults()
    fork = ctx.create(Op.FORK, 0, attrs={"n": 1, "program": name})
    stream = ctx.graph.new_stream()
    ctx.create(Op.GET_FORK_ITEM, stream, [fork], {"index": 0})
    sink = TraceSink(ctx, stream, fork=fork)
    state = ProgramState(sink)
    ctx.active_calls += 1  # NOTE: a graph break cannot happen while the callee's stream is open
    try:
        state.ret_value = traceable(func)(state, *call.args[1:], **call.kwargs)
    finally:
        ctx.active_calls -= 1
    if sink.role is not None:
        raise trace_error(f"program {name} ended inside an open {sink.role} role")
    sink.finished_as = name  # NOTE: its stream is complete; only its variables can be read now
    return state
