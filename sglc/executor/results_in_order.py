"""SGLang's `run_batch(generator_style=True)`: results yielded in input order as each is ready.

The batch runs on a background thread; the generator yields result i as soon as inputs 0..i are
done, so a caller can consume (and write out) early results while later ones still run.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Optional

from sglc.executor.results import ProgramResult

OnResult = Callable[[ProgramResult], None]


def results_in_order(start: Callable[[OnResult], Any], total: int) -> Iterator[ProgramResult]:
    """Run `start(on_result)` (a batch that calls on_result once per input) in the background and
    yield its results by index; an exception raised by `start` itself is re-raised here."""
    ready: dict[int, ProgramResult] = {}
    done = threading.Condition()
    failure: list[BaseException] = []
    finished = [False]

    def on_result(result: ProgramResult) -> None:
        with done:
            ready[result.index] = result
            done.notify_all()

    def drive() -> None:
        try:
            start(on_result)
        except BaseException as err:  # NOTE: handed to the consumer's thread below
            failure.append(err)
        finally:
            with done:
                finished[0] = True
                done.notify_all()

    threading.Thread(target=drive, name="sglc-batch-generator", daemon=True).start()
    for index in range(total):
        with done:
            while index not in ready and not finished[0]:
                done.wait()
            result: Optional[ProgramResult] = ready.pop(index, None)
        if result is None:
            if failure:
                raise failure[0]
            raise RuntimeError(f"the batch ended without a result for input {index}")
        yield result
