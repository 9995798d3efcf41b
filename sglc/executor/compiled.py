"""CompiledProgram: a traced, optimized graph that runs on the graph executor.

    prog = my_program.compile()            # trace + the default passes
    state = prog.run(question="...")       # same result object as my_program.run(...)
    states = prog.run_batch([{...}, ...])  # batch hint once, inputs concurrently
    prog.save("my_program.pb"); prog2 = sgl.load("my_program.pb")
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from sglc.executor.batch import run_batch, run_graph_batch
from sglc.errors import SglcError
from sglc.executor.graph_breaks import BreakingProgram, GraphBreak, break_of
from sglc.executor.graph_executor import DEFAULT_MAX_PARALLEL, GraphExecutor
from sglc.executor.live_text import LiveText
from sglc.executor.pool import DaemonPool
from sglc.executor.program import ExecutedState, ProgramError, batch_arguments, bind_call, resolve_backend
from sglc.executor.results import ProgramResult
from sglc.executor.results_in_order import results_in_order
from sglc.executor.semantics import RUN_LOGPROB_KEYS, RUN_SAMPLING_KEYS, sampling_defaults
from sglc.executor.streaming_state import StreamingState
from sglc.ir.graph import Graph
from sglc.wire.backend import Backend

Pass = Callable[[Graph], Any]


def split_run_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(program arguments, SGLang-style sampling keywords) from a run() call's keywords."""
    sampling = {k: kwargs.pop(k) for k in list(kwargs) if k in RUN_SAMPLING_KEYS or k in RUN_LOGPROB_KEYS}
    return kwargs, sampling_defaults(sampling)


def concurrency_of(num_threads: Union[int, str]) -> int:
    if num_threads == "auto":
        return 16
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be 'auto' or an int >= 1, got {num_threads!r}")
    return num_threads


class CompiledProgram:
    """A Graph plus the run/run_batch/save API of an @sgl.function.

    A program whose Python needs generated text (a graph break) has `breaks` (graph_breaks.py):
    it runs as compiled segments with its Python between them; `graph` is then what was traced
    before the first break, and the program cannot be saved (a graph.pb holds no Python)."""

    def __init__(self, graph: Graph, breaks: Optional[BreakingProgram] = None) -> None:
        self.graph = graph
        self.breaking = breaks

    @classmethod
    def from_function(cls, fn: Any, passes: Optional[Sequence[Pass]] = None, **bound: Any) -> "CompiledProgram":
        """Trace `fn` (with `bound` arguments fixed) and run `passes` (default: the default pipeline).

        An argument needed at compile time (a fork count) that is not bound takes its Python
        default, with a warning naming it (as `sglc compile` does). Python on generated text is a
        graph break: the program then runs as compiled segments (graph_breaks.py; `explain()`)."""
        from sglc.frontend.errors import TraceError
        from sglc.passes import PassManager, default_pipeline

        try:
            graph, defaults = fn.trace_fixing_defaults(**bound)
        except TraceError as err:
            if not getattr(err, "breakable", False):
                raise
            partial = getattr(err, "partial_graph", None) or Graph(fn.name)
            return cls(partial, BreakingProgram(fn, passes, bound, break_of(err)))
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
            timeout: Optional[float] = None, stream: bool = False, program_hints: bool = True,
            **kwargs: Any) -> ExecutedState:
        """Run once; raises ProgramError (with the partial result) if the program fails.
        `stream=True`: returns a StreamingState at once (text_iter); its failure is in `.error()`.
        `program_hints=False`: send the runtime no program hints and no end_program (issue 28,
        sglc/executor/program_hints.py); they never change a result."""
        chosen = resolve_backend(backend, f"{self.name}.run()")
        kwargs, sampling = split_run_kwargs(kwargs)
        arguments = bind_call(self.arg_names, args, kwargs, f"{self.name}.run()")

        def execute(live: Optional[LiveText] = None, on_root: Any = None) -> ProgramResult:
            if self.breaking is not None:  # NOTE: segments stream nothing piece by piece: the text comes at the end
                result = self.breaking.run_one(chosen, arguments, sampling=sampling, max_parallel=max_parallel,
                                               timeout=timeout, program_hints=program_hints)
                if live is not None:
                    live.finish(failed=result.error is not None)
                return result
            executor = GraphExecutor(self.graph, chosen, max_parallel=max_parallel, sampling=sampling,
                                     pool=DaemonPool(max_parallel), timeout=timeout, program_hints=program_hints)
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
                  generator_style: bool = False, program_hints: bool = True, **sampling_kwargs: Any
                  ) -> Union[list[ExecutedState], Iterator[ExecutedState]]:
        """Run every input; failed inputs give states whose .error() says why (none raise).
        `generator_style=True`: a generator of the states in input order, each yielded once ready.
        `program_hints=False`: no program hints and no end_program (see `run`)."""
        chosen = resolve_backend(backend, f"{self.name}.run_batch()")
        extra, sampling = split_run_kwargs(dict(sampling_kwargs))
        if extra:
            raise TypeError(f"{self.name}.run_batch() got unknown keyword(s) {', '.join(sorted(extra))}")
        names = self.arg_names
        with_default = {n.attrs["name"] for n in self.graph.arguments() if "default" in n.attrs}
        inputs = batch_arguments(f"{self.name}.run_batch()", names, len([n for n in names if n not in with_default]),
                                 batch_kwargs)

        def start(on_result: Any = None) -> list[ProgramResult]:
            if self.breaking is not None:
                breaking = self.breaking
                return run_batch(lambda i, args: breaking.run_one(chosen, args, index=i, sampling=sampling,
                                                                  max_parallel=max_parallel, timeout=timeout,
                                                                  program_hints=program_hints),
                                 inputs, concurrency=concurrency_of(num_threads), progress=progress_bar,
                                 description=self.name, on_result=on_result)
            return run_graph_batch(self.graph, chosen, inputs, concurrency=concurrency_of(num_threads),
                                   max_parallel=max_parallel, sampling=sampling, timeout=timeout,
                                   progress=progress_bar, on_result=on_result, program_hints=program_hints)

        if generator_style:
            return (ExecutedState(r, r.ret_value) for r in results_in_order(start, len(inputs)))
        return [ExecutedState(r, r.ret_value) for r in start()]

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write graph.pb (the format `sglc run` and `sgl.load` read)."""
        from sglc.ir.serialize import save

        if self.breaking is not None:
            raise GraphBreakError(f"cannot save {self.name}: it has graph breaks (Python on generated text runs "
                                  f"between its segments, and a graph.pb holds no Python): {self.breaking.breaks[0]}")
        save(self.graph, path)

    @property
    def breaks(self) -> list[GraphBreak]:
        """The graph breaks found so far: the first when compiling, then the ones runs met."""
        return [] if self.breaking is None else list(self.breaking.breaks)

    def explain(self) -> "Explanation":
        """What compiled and where it breaks (like torch._dynamo.explain): the breaks, and the graph
        (for a program with breaks, what was traced before the first)."""
        return Explanation(self.name, self.graph, self.breaks)

    def __repr__(self) -> str:
        breaks = f", {len(self.breaks)} graph break(s)" if self.breaking is not None else ""
        return f"<CompiledProgram {self.name}: {len(self.graph)} nodes, {self.graph.num_streams} streams{breaks}>"


class GraphBreakError(SglcError):
    """An operation that needs one whole graph (save) on a program with graph breaks."""


@dataclasses.dataclass
class Explanation:
    """`prog.compile().explain()`: the graph breaks and the graph."""

    name: str
    graph: Graph
    breaks: list[GraphBreak]

    @property
    def num_breaks(self) -> int:
        return len(self.breaks)

    def __str__(self) -> str:
        if not self.breaks:
            head = [f"{self.name}: no graph breaks: one graph of {len(self.graph)} nodes, {self.graph.num_streams} "
                    f"stream{'s' if self.graph.num_streams != 1 else ''} (sglc compile writes it as graph.pb)"]
        else:
            head = [f"{self.name}: {len(self.breaks)} graph break(s) found so far (the first when compiling, the "
                    "others as runs met them); Python runs eagerly between the compiled segments, and `sglc compile` "
                    "refuses the program:"]
            head += [f"  break {i}: {b}" for i, b in enumerate(self.breaks, 1)]
            head.append("graph traced before the first break:")
        return "\n".join(head + [str(self.graph)])


def load(path: Union[str, os.PathLike]) -> CompiledProgram:
    """A CompiledProgram from a graph.pb written by `prog.save` or `sglc compile`."""
    from sglc.ir.serialize import load as load_graph

    return CompiledProgram(load_graph(path))
