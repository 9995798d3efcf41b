"""`prog.run(..., stream=True)`: the program runs in the background and the state comes back at
once (SGLang's streaming mode); `state.text_iter()` / `text_iter("var")` / `text_async_iter`
yield the text as the model produces it.

Reading a variable, the text or the error of a StreamingState waits for the program to finish
(its final values); only the iterators see text in progress.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Optional

from sglc.executor.live_text import LiveText
from sglc.executor.program import ExecutedState, FinishedSink
from sglc.executor.results import RETURNS_STATE, ProgramResult
from sglc.executor.stream_state import StreamState

#: How to read the root stream's state (None until it exists).
RootReader = Callable[[], Optional[StreamState]]
#: A run bound to one program and its arguments: (live, on_root) -> (result, return value, exception).
Start = Callable[[LiveText, Callable[[RootReader], None]], tuple[ProgramResult, Any, Optional[BaseException]]]


class StreamingState(ExecutedState):
    """The state of a program still running; becomes an ordinary finished state when it ends."""

    def __init__(self, start: Start, name: str = "program") -> None:  # NOTE: no super().__init__: all lazy
        self._live = LiveText()
        self._root: Optional[RootReader] = None
        self._done = threading.Event()
        self._outcome: Optional[tuple[ProgramResult, Any, Optional[BaseException]]] = None
        self._finished_sink: Optional[FinishedSink] = None

        def drive() -> None:
            try:
                self._outcome = start(self._live, self._set_root)
            except BaseException as err:  # NOTE: a failure before the program ran (bad arguments)
                self._outcome = (ProgramResult(index=0, error=f"{type(err).__name__}: {err}"), None, err)
                self._live.finish(failed=True)
            finally:
                self._done.set()

        threading.Thread(target=drive, name=f"sglc-stream-{name}", daemon=True).start()

    def _set_root(self, root: RootReader) -> None:
        self._root = root
        self._live.touch()

    def _finished(self) -> tuple[ProgramResult, Any, Optional[BaseException]]:
        self._done.wait()
        assert self._outcome is not None, "a finished streaming run has its outcome"
        return self._outcome

    # ----- what ExecutedState reads, available once the program has finished -----
    @property
    def _sink(self) -> FinishedSink:  # type: ignore[override]
        if self._finished_sink is None:
            self._finished_sink = FinishedSink(self._finished()[0])
        return self._finished_sink

    @property
    def result(self) -> ProgramResult:  # type: ignore[override]
        return self._finished()[0]

    @property
    def ret_value(self) -> Any:  # type: ignore[override]
        value = self._finished()[1]
        return self if value is RETURNS_STATE else value

    def sync(self) -> None:
        """Wait for the program to finish (SGLang's state.sync())."""
        self._finished()

    def exception(self) -> Optional[BaseException]:
        """What the program raised, or None (after waiting for it to finish)."""
        return self._finished()[2]

    # ----- streaming -----
    def text_iter(self, var_name: Optional[str] = None) -> Iterator[str]:
        """The text as it is produced: the whole prompt state's (None) or variable `var_name`'s,
        until that variable is set or the program ends (a variable the program's own stream does
        not generate, such as a list gathered from forks, yields one "" at the end, as in SGLang)."""
        return self._pieces(var_name, False)

    def _pieces(self, var_name: Optional[str], with_meta: bool) -> Iterator[Any]:
        return self._live.iter_text(lambda: self._root() if self._root is not None else None, var_name, with_meta)

    def __repr__(self) -> str:
        return "StreamingState(finished)" if self._done.is_set() else "StreamingState(running)"
