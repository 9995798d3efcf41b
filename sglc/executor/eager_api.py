"""`prog.run()` / `prog.run_batch()` of an @sgl.function: eager execution on a backend."""
from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Union

from sglc.executor.batch import run_batch
from sglc.executor.compiled import concurrency_of, split_run_kwargs
from sglc.executor.eager import current_run, run_program
from sglc.executor.graph_executor import DEFAULT_MAX_PARALLEL
from sglc.executor.program import ExecutedState, batch_arguments, bind_call, resolve_backend
from sglc.executor.results import ProgramResult
from sglc.executor.results_in_order import results_in_order
from sglc.executor.streaming_state import StreamingState
from sglc.lang.global_config import global_config
from sglc.wire.backend import Backend


def _checked_arguments(fn: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    unknown = [k for k in arguments if k not in fn.arg_names]
    if unknown:
        takes = ", ".join(fn.arg_names) or "no arguments"
        raise TypeError(f"{fn.name} has no parameter(s) {', '.join(unknown)}; its parameters are {takes}")
    return {**fn.bind_arguments, **arguments}


def run_function(fn: Any, args: tuple, kwargs: dict[str, Any]) -> ExecutedState:
    """SGLang's `prog.run(*args, backend=None, max_new_tokens=..., temperature=..., **arguments)`.

    Raises the program's error (an ExecutionError naming the primitive and line, or whatever
    the program's own Python code raised). `stream=True`: returns a StreamingState at once
    (text_iter / text_async_iter); its error is in `.error()`.
    """
    kwargs = dict(kwargs)
    caller = current_run()  # NOTE: called from inside a running program: its backend and sampling
    backend = kwargs.pop("backend", None)
    backend = resolve_backend(caller.backend if backend is None and caller is not None else backend, f"{fn.name}.run()")
    max_parallel = kwargs.pop("max_parallel", DEFAULT_MAX_PARALLEL)
    stream = kwargs.pop("stream", False)  # NOTE: SGLang's run() keyword, never a program argument
    kwargs.pop("program_hints", None)  # NOTE: accepted as compiled run() takes it; eager runs send no hints
    arguments, sampling = split_run_kwargs(kwargs)
    if caller is not None:
        sampling = {**caller.sampling, **sampling}
    arguments = bind_call(fn.arg_names, args, arguments, f"{fn.name}.run()")
    checked = _checked_arguments(fn, arguments)
    if stream:
        return StreamingState(lambda live, on_root: run_program(
            fn.func, (), checked, backend, arguments=arguments, sampling=sampling, max_parallel=max_parallel,
            num_api_spec_tokens=fn.num_api_spec_tokens, live=live, on_root=on_root), fn.name)
    result, ret, failure = run_program(fn.func, (), checked, backend,
                                       arguments=arguments, sampling=sampling, max_parallel=max_parallel,
                                       num_api_spec_tokens=fn.num_api_spec_tokens)
    if failure is not None:
        raise failure
    if global_config.verbosity >= 2:  # SGLang prints each finished program's text at verbosity 2
        print(result.text)
    return ExecutedState(result, ret)


def run_function_batch(fn: Any, batch_kwargs: Sequence[dict[str, Any]], *, backend: Optional[Backend] = None,
                       num_threads: Union[int, str] = "auto", progress_bar: bool = False,
                       max_parallel: int = DEFAULT_MAX_PARALLEL, generator_style: bool = False,
                       program_hints: bool = True, **sampling_kwargs: Any
                       ) -> Union[list[ExecutedState], Iterator[ExecutedState]]:
    """SGLang's `prog.run_batch([{...}, ...])`: states in input order; failures in `.error()`.
    `generator_style=True`: a generator of the states, each yielded once it and those before it are done.
    `program_hints` is accepted for the compiled run_batch's sake: an eager run sends no hints."""
    chosen = resolve_backend(backend, f"{fn.name}.run_batch()")
    extra, sampling = split_run_kwargs(dict(sampling_kwargs))
    if extra:
        raise TypeError(f"{fn.name}.run_batch() got unknown keyword(s) {', '.join(sorted(extra))}")
    num_required = len(fn.arg_names) - len(fn.arg_defaults)
    inputs = batch_arguments(f"{fn.name}.run_batch()", fn.arg_names, num_required, batch_kwargs)
    returns: dict[int, Any] = {}

    def run_one(index: int, arguments: dict[str, Any]) -> ProgramResult:
        try:
            checked = _checked_arguments(fn, arguments)
        except TypeError as err:
            return ProgramResult(index=index, arguments=arguments, error=str(err))
        result, ret, _ = run_program(fn.func, (), checked, chosen, index=index, arguments=arguments,
                                     sampling=sampling, max_parallel=max_parallel,
                                     num_api_spec_tokens=fn.num_api_spec_tokens)
        returns[index] = ret
        return result

    def start(on_result: Any = None) -> list[ProgramResult]:
        return run_batch(run_one, inputs, concurrency=concurrency_of(num_threads), progress=progress_bar,
                         description=fn.name, on_result=on_result)

    if generator_style:
        return (ExecutedState(r, returns.get(r.index)) for r in results_in_order(start, len(inputs)))
    return [ExecutedState(r, returns.get(r.index)) for r in start()]
