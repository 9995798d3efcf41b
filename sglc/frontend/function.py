"""`@sgl.function` and SglFunction: a program, traceable into a Graph.

SGLang compatibility: `bind`, `run`, `run_batch`, `__call__` and `num_api_spec_tokens` keep
their meaning. `trace(**bound)` returns a :class:`sglc.ir.Graph` (SGLang returns a tracer state).
`run` / `run_batch` execute eagerly (sglc/executor/eager.py); `compile` returns a CompiledProgram.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Union, overload

from sglc.frontend import loops
from sglc.frontend.branching import MAX_TRACES, explore, merge
from sglc.frontend.errors import TraceError
from sglc.frontend.program_call import trace_call
from sglc.frontend.rewrite import traceable
from sglc.frontend.state import ProgramState
from sglc.frontend.trace_context import current_trace
from sglc.frontend.tracer import run_trace
from sglc.ir.graph import Graph


class SglFunction:
    """An LM program: a Python function whose first parameter is the program state `s`."""

    def __init__(self, func: Callable[..., Any], num_api_spec_tokens: Optional[int] = None,
                 bind_arguments: Optional[dict[str, Any]] = None) -> None:
        if not callable(func):
            raise TypeError(f"@sgl.function decorates a function, got {type(func).__name__}")
        params = list(inspect.signature(func).parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{func.__qualname__}: an sgl.function takes the program state as its first "
                            "positional parameter (conventionally `s`)")
        if num_api_spec_tokens is not None and (isinstance(num_api_spec_tokens, bool)
                                                or not isinstance(num_api_spec_tokens, int) or num_api_spec_tokens < 1):
            raise ValueError(f"num_api_spec_tokens must be an int >= 1, got {num_api_spec_tokens!r}")
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens
        self.bind_arguments: dict[str, Any] = dict(bind_arguments or {})
        self.arg_names = [p.name for p in params[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        self.arg_defaults = [p.default for p in params[1:] if p.default is not p.empty]
        self.defaults_by_name: dict[str, Any] = {p.name: p.default for p in params[1:] if p.default is not p.empty}
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__
        self.__wrapped__ = func

    @property
    def name(self) -> str:
        return self.func.__name__

    def bind(self, **kwargs: Any) -> "SglFunction":
        """A copy with some arguments fixed (they become constants when tracing)."""
        self._check_names(kwargs)
        return SglFunction(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    def trace(self, *, max_traces: int = MAX_TRACES, **bound: Any) -> Graph:
        """Trace the program into a Graph.

        Unbound parameters become ARGUMENT nodes (in order, with `default` when the parameter has
        one); bound ones (here or via `bind`) are constants. Comparisons of a select result with
        its choices are compiled into BRANCH nodes by tracing once per outcome.
        """
        self._check_names(bound)
        bindings = {**self.bind_arguments, **bound}
        meta: dict[str, Any] = {}
        if self.num_api_spec_tokens is not None:
            meta["num_api_spec_tokens"] = self.num_api_spec_tokens
        if bindings:  # NOTE: so a run that passes one of them is told it was fixed, not that it is unknown
            meta["fixed_args"] = [name for name in self.arg_names if name in bindings]
        def run_once(prefix: list[int]) -> Any:
            first = run_trace(self.func, self.name, bindings, prefix, meta)
            # NOTE: one traced iteration stands for any number only if the traces with each loop
            # run twice and zero times agree with it (loops.py)
            loops.validate(lambda counts, hints: run_trace(self.func, self.name, bindings, prefix, meta, counts,
                                                           (hints, first.loop_streams)), first)
            return first

        traces = explore(run_once, max_traces)
        return merge(traces)

    def trace_fixing_defaults(self, **bound: Any) -> tuple[Graph, dict[str, Any]]:
        """Trace; where a parameter's value is needed at compile time (a fork count) and the
        caller did not bind it, bind its Python default and trace again.

        Returns (graph, the defaults so bound). A parameter without a default still fails with
        the tracer's error (bind it: `sglc compile --bind name=JSON`).
        """
        fixed: dict[str, Any] = {}
        while True:
            try:
                return self.trace(**bound, **fixed), fixed
            except TraceError as err:
                name = err.argument
                if name is None or name in bound or name in self.bind_arguments or name in fixed \
                        or name not in self.defaults_by_name:
                    raise
                fixed[name] = self.defaults_by_name[name]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """With a state first (`other(s, x=...)`): inline the program into that state.
        Otherwise run it as a separate program (SGLang's form): eagerly, on the calling program's
        backend; while tracing, as its own stream of the caller's graph (program_call.py)."""
        ctx = current_trace()
        # NOTE: inlined into a state being traced: its formatting must trace too (rewrite.py)
        func = traceable(self.func) if ctx is not None else self.func
        if args and isinstance(args[0], ProgramState):
            return func(*args, **kwargs)
        if not args and isinstance(kwargs.get("s"), ProgramState):
            return func(**kwargs)
        if ctx is not None:  # NOTE: the callee becomes its own stream of the caller's graph
            return trace_call(ctx, self.name, self.func, self.bind_arguments, args, kwargs)
        return self.run(*args, **kwargs)

    # ----- execution (sglc/executor) -----
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run eagerly, primitive by primitive, on `backend=` or the default backend.

        Keywords: the program's arguments, SGLang's sampling defaults (`max_new_tokens`,
        `temperature`, `stop`, `top_p`, ...), `backend`, `max_parallel`. Returns the finished
        state (`s["x"]`, `s.text()`, `s.messages()`); raises the program's error.
        """
        from sglc.executor.eager_api import run_function

        return run_function(self, args, kwargs)

    def run_batch(self, batch_kwargs: Any, **kwargs: Any) -> Any:
        """Run eagerly for each dict of arguments (`num_threads`, `progress_bar`, `backend`,
        sampling keywords); states in input order, failures reported by `state.error()`."""
        from sglc.executor.eager_api import run_function_batch

        return run_function_batch(self, batch_kwargs, **kwargs)

    def compile(self, passes: Any = None, **bound: Any) -> Any:
        """Trace (with `bound` arguments fixed) and optimize: a CompiledProgram (`.run`,
        `.run_batch`, `.save`). `passes` replaces the default pass pipeline."""
        from sglc.executor.compiled import CompiledProgram

        return CompiledProgram.from_function(self, passes, **{**self.bind_arguments, **bound})

    def cache(self, backend: Any = None) -> Any:
        """Prefill the program's constant prefix (its text before the first argument or call)."""
        from sglc.executor.batch import send_batch_hint
        from sglc.executor.compiled import CompiledProgram
        from sglc.executor.graph_executor import GraphExecutor
        from sglc.executor.program import resolve_backend
        from sglc.passes.fork_hints import fork_hints

        chosen = resolve_backend(backend, f"{self.name}.cache()")
        program = CompiledProgram.from_function(self, [fork_hints], **self.bind_arguments)
        executor = GraphExecutor(program.graph, chosen)
        try:
            return send_batch_hint(executor)
        finally:
            executor.close()

    def _check_names(self, kwargs: dict[str, Any]) -> None:
        unknown = [k for k in kwargs if k not in self.arg_names]
        if unknown:
            raise TypeError(f"{self.name} has no parameter(s) {', '.join(unknown)}; "
                            f"its parameters are {', '.join(self.arg_names) or 'none'}")

    def __repr__(self) -> str:
        return f"<sgl.function {self.name}>"


@overload
def function(func: Callable[..., Any]) -> SglFunction: ...
@overload
def function(func: None = None, num_api_spec_tokens: Optional[int] = None) -> Callable[[Callable[..., Any]], SglFunction]: ...


def function(func: Optional[Callable[..., Any]] = None, num_api_spec_tokens: Optional[int] = None
             ) -> Union[SglFunction, Callable[[Callable[..., Any]], SglFunction]]:
    """Decorator: `@sgl.function` or `@sgl.function(num_api_spec_tokens=N)`."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)

    def decorator(f: Callable[..., Any]) -> SglFunction:
        return SglFunction(f, num_api_spec_tokens=num_api_spec_tokens)

    return decorator
