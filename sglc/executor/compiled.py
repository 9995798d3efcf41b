"""CompiledProgram: a traced, optimized graph that runs on the graph executor.

    prog = my_program.compile()            # trace + the default passes
    state = prog.run(question="...")       # same result object as my_program.run(...)
    states = prog.run_batch([{...}, ...])  # batch hint once, inputs concurrently
    prog.save("my_program.pb"); prog2 = sgl.load("my_program.pb")
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from sglc.executor.batch import run_graph_batch
from sglc.executor.graph_executor import DEFAULT_MAX_PARALLEL, GraphExecutor
from sglc.executor.live_text import LiveText
from sglc.executor.pool import DaemonPool
from sglc.executor.program import ExecutedState, ProgramError, batch_arguments, bind_call, resolve_backend
from sglc.executor.results import ProgramResult
from sglc.executor.results_in_order import results_in_order
from sglc.executor.semantics import RUN_SAMPLING_KEYS, sampling_defaults
from sglc.executor.streaming_state import StreamingState
from sglc.ir.graph import Graph
from sglc.wire.backend import Backend

Pass = Callable[[Graph], Any]


def split_run_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(program arguments, SGLang-style sampling keywords) from a run() call's keywords."""
    sampling = {k: kwargs.pop(k) for k in list(kwargs) if k in RUN_SAMPLING_KEYS}
    return kwargs, sampling_defaults(sampling)


def concurrency_of(num_threads: Union[int, str]) -> int:
    if num_threads == "auto":
        return 16
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be 'auto' or an int >= 1, got {num_threads!r}")
    return num_threads


class CompiledProgram:
    """A Graph plus the run/run_batch/save API of an @sgl.function."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    @classmethod
    def from_function(cls, fn: Any, passes: Optional[Sequence[Pass]] = None, **bound: Any) -> "CompiledProgram":
        """Trace `fn` (with `bound` arguments fixed) and run `passes` (default: the default pipeline).

        An argument needed at compile time (a fork count) that is not bound takes its Python
        default, with a warning naming it (as `sglc compile` does)."""
        from sglc.passes import PassManager, default_pipeline

        graph, defaults = fn.trace_fixing_defaults(**bound)
        for key, value in defaults.items():
            warnings.warn(f"{fn.name}.compile(): {key} is needed at compile time: fixed to its default {value!r} "
                          f"(choose another with {fn.name}.compile({key}=...))", stacklevel=3)
        manager = default_pipeline() if passes is None else PassManager(list(passes))
        return cls(manager.run(graph).graph)

    @property
    def name(self) -> str:
        return self.graph.name

    @property
    def arg_names(self) -> list[str]:
        return list(self.graph.meta.get("arg_names") or [])  # type: ignore[arg-type]

    def run(self, *args: Any, backend: Optional[Backend] = None, max_parallel: int = DEFAULT_MAX_PARALLEL,
            timeout: Optional[float] = None, stream: bool = False, **kwargs: Any) -> ExecutedState:
        """Run once; raises ProgramError (with the partial result) if the program fails.
        `stream=True`: returns a StreamingState at once (text_iter); its failure is in `.error()`."""
        chosen = resolve_backend(backend, f"{self.name}.run()")
        kwargs, sampling = split_run_kwargs(kwargs)
        arguments = bind_call(self.arg_names, args, kwargs, f"{self.name}.run()")

        def execute(live: Optional[LiveText] = None, on_root: Any = None) -> ProgramResult:
            executor = GraphExecutor(self.graph, chosen, max_parallel=max_parallel, sampling=sampling,
                                     pool=DaemonPool(max_parallel), timeout=timeout)
            try:
                return executor.run(arguments, live=live, on_root=on_root)
            finally:
                executor.pool.shutdown()

        if stream:
            def start(live: LiveText, on_root: Any) -> tuple[ProgramResult, Any, Optional[BaseException]]:
                result = execute(live, on_root)
                return result, result.ret_value, None if result.error is None else ProgramError(result)

            return StreamingState(start, self.name)
        result = execute()
        if result.error is not None:
            raise ProgramError(result)
        return ExecutedState(result, result.ret_value)

    def run_batch(self, batch_kwargs: Sequence[dict[str, Any]], *, backend: Optional[Backend] = None,
                  num_threads: Union[int, str] = "auto", progress_bar: bool = False,
                  max_parallel: int = DEFAULT_MAX_PARALLEL, timeout: Optional[float] = None,
                  generator_style: bool = False, **sampling_kwargs: Any
                  ) -> Union[list[ExecutedState], Iterator[ExecutedState]]:
        """Run every input; failed inputs give states whose .error() says why (none raise).
        `generator_style=True`: a generator of the states in input order, each yielded once ready."""
        chosen = resolve_backend(backend, f"{self.name}.run_batch()")
        extra, sampling = split_run_kwargs(dict(sampling_kwargs))
        if extra:
            raise TypeError(f"{self.name}.run_batch() got unknown keyword(s) {', '.join(sorted(extra))}")
        names = self.arg_names
        with_default = {n.attrs["name"] for n in self.graph.arguments() if "default" in n.attrs}
        inputs = batch_arguments(f"{self.name}.run_batch()", names, len([n for n in names if n not in with_default]),
                                 batch_kwargs)

        def start(on_result: Any = None) -> list[ProgramResult]:
            return run_graph_batch(self.graph, chosen, inputs, concurrency=concurrency_of(num_threads),
                                   max_parallel=max_parallel, sampling=sampling, timeout=timeout,
                                   progress=progress_bar, on_result=on_result)

        if generator_style:
            return (ExecutedState(r, r.ret_value) for r in results_in_order(start, len(inputs)))
        return [ExecutedState(r, r.ret_value) for r in start()]

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write graph.pb (the format `sglc run` and `sgl.load` read)."""
        from sglc.ir.serialize import save

        save(self.graph, path)

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.name}: {len(self.graph)} nodes, {self.graph.num_streams} streams>"


def load(path: Union[str, os.PathLike]) -> CompiledProgram:
    """A CompiledProgram from a graph.pb written by `prog.save` or `sglc compile`."""
    from sglc.ir.serialize import load as load_graph

    return CompiledProgram(load_graph(path))
