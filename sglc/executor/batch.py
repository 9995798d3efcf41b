"""Running many inputs: bounded concurrency, one batch-level prefix hint, ordered results.

``run_batch`` executes `run_one(index, arguments)` for every input on `concurrency` driver
threads (each program itself runs its streams concurrently, see graph_executor.py), feeds each
result to an :class:`OrderedJsonlWriter` (lines appear in input order as soon as possible) and
to a tqdm progress bar on stderr. A failing input becomes a result with ``error`` set; the
other inputs are unaffected.
"""
from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable, Optional, Sequence

from sglc.executor.errors import describe
from sglc.executor.graph_executor import GraphExecutor
from sglc.executor.program_hints import end_program, new_program_id
from sglc.executor.results import OrderedJsonlWriter, ProgramResult
from sglc.wire.program_hint import ProgramHint

from .defaults import DEFAULT_CONCURRENCY

log = logging.getLogger("sglc.executor")



def send_batch_hint(executor: GraphExecutor, hint: Optional[ProgramHint] = None) -> Optional[str]:
    """Prefill the constant prefix every input shares (the graph's batch-scoped CACHE_PREFIX).

    Returns None on success or when there is no such hint; a one-line warning otherwise (a
    hint is advisory: if the backend is down, the inputs fail and say so themselves). `hint`:
    the program hint the call carries (run_graph_batch: the batch's own program id).
    """
    hints = executor.plan.batch_hints()
    if not hints:
        return None
    try:
        prefix = executor.constant_prefix()  # NOTE: may ask the backend for its chat template
        if prefix is not None:
            executor.semantics.cache_prefix(prefix, hints[0].name, hint=hint)
    except Exception as err:
        return f"the batch prefix hint (%{hints[0].name}) failed: {describe(err)}"
    return None


def run_batch(
    run_one: Callable[[int, dict[str, Any]], ProgramResult],
    inputs: Sequence[dict[str, Any]],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    writer: Optional[OrderedJsonlWriter] = None,
    progress: bool = False,
    description: str = "programs",
    on_result: Optional[Callable[[ProgramResult], None]] = None,
) -> list[ProgramResult]:
    """Run every input with at most `concurrency` in flight; results in input order."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    results: list[Optional[ProgramResult]] = [None] * len(inputs)
    next_index = [0]
    lock = threading.Lock()
    bar = _progress_bar(len(inputs), description) if progress else None

    def drive() -> None:
        while True:
            with lock:
                i = next_index[0]
                if i >= len(inputs):
                    return
                next_index[0] += 1
            try:
                result = run_one(i, inputs[i])
            except Exception as err:  # NOTE: run_one reports errors in results; this is a last resort
                result = ProgramResult(index=i, arguments=dict(inputs[i]) if isinstance(inputs[i], dict) else {},
                                       error=describe(err))
            results[i] = result
            if writer is not None:
                writer.add(result)
            if on_result is not None:
                on_result(result)
            if bar is not None:
                with lock:
                    bar.update(1)
                    if not result.ok:
                        bar.set_postfix(failed=sum(1 for r in results if r is not None and not r.ok))

    threads = [threading.Thread(target=drive, name=f"sglc-program-{k}", daemon=True)
               for k in range(min(concurrency, max(1, len(inputs))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if bar is not None:
        bar.close()
    return [r for r in results if r is not None]


def _progress_bar(total: int, description: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="prog", file=sys.stderr, dynamic_ncols=True)


def run_graph_batch(
    graph: Any,
    backend: Any,
    inputs: Sequence[dict[str, Any]],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    max_parallel: int = 16,
    sampling: Optional[dict[str, Any]] = None,
    timeout: Optional[float] = None,
    writer: Optional[OrderedJsonlWriter] = None,
    progress: bool = False,
    on_result: Optional[Callable[[ProgramResult], None]] = None,
    program_hints: bool = True,
) -> list[ProgramResult]:
    """Run a compiled graph on every input: batch hint first, then bounded-concurrency runs.

    `program_hints` (program_hints.py): each input's run is a program of its own (its id, its
    hints, its end_program). NOTE: the batch prefix hint gets a batch-scoped program id of its
    own (next_use 0: every input's first call extends that prefix), ended once the batch is
    done, so the runtime keeps the shared prefix for the whole batch and no longer."""
    from sglc.executor.pool import DaemonPool

    pool = DaemonPool(max(1, min(MAX_CALL_THREADS, concurrency * max_parallel)))
    executor = GraphExecutor(graph, backend, max_parallel=max_parallel, sampling=sampling, pool=pool, timeout=timeout,
                             program_hints=program_hints)
    batch_id = (new_program_id(f"{graph.name}.batch")
                if program_hints and inputs and executor.plan.batch_hints() else None)
    try:
        if inputs:
            warning = send_batch_hint(executor, None if batch_id is None else ProgramHint(batch_id, 0))
            if warning:
                log.warning("%s", warning)
        return run_batch(lambda i, args: executor.run(args, i), inputs, concurrency=concurrency, writer=writer, progress=progress,
                         description=graph.name, on_result=on_result)
    finally:
        if batch_id is not None:
            end_program(backend, batch_id)
        pool.shutdown()


#: Upper bound on threads making backend calls for one batch (concurrency x max_parallel).
MAX_CALL_THREADS = 256
