"""LiveText: what `state.text_iter()` reads while a program started with `run(stream=True)` runs.

The stream's committed text lives in its StreamState; a gen in flight adds the pieces the
backend has produced so far (`partial`). Both change under one condition, so a reader never
sees a gen's text twice (once partial, once committed) or not at all: the executor commits a
gen's final text inside :meth:`committing`, which also drops the partial.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional

from sglc.executor.stream_state import StreamState


class LiveText:
    """Partial gen text per stream, plus a condition that wakes readers on every change."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self._partial: dict[int, tuple[str, str]] = {}  # stream id -> (variable, text so far)
        self.finished = False

    def on_text(self, stream_id: int, variable: str) -> Callable[[str], None]:
        """The callback a streaming gen of `variable` on stream `stream_id` feeds its pieces to."""
        def feed(piece: str) -> None:
            with self.changed:
                _, text = self._partial.get(stream_id, (variable, ""))
                self._partial[stream_id] = (variable, text + piece)
                self.changed.notify_all()
        return feed

    @contextlib.contextmanager
    def committing(self, stream_id: int) -> Iterator[None]:
        """Hold while a gen's final text goes into its StreamState; its partial text goes away."""
        with self.changed:
            yield
            self._partial.pop(stream_id, None)
            self.changed.notify_all()

    def touch(self) -> None:
        """Something else changed a stream (text appended, a variable defined): wake readers."""
        with self.changed:
            self.changed.notify_all()

    def finish(self) -> None:
        with self.changed:
            self.finished = True
            self.changed.notify_all()

    def _view(self, st: StreamState, variable: Optional[str]) -> tuple[str, bool]:
        """(text visible now, final?) of the whole stream or of one variable. Call under the lock."""
        name, partial = self._partial.get(st.stream_id, ("", ""))
        if variable is None:
            return st.text + partial, self.finished
        if variable in st.variables:
            value = st.variables[variable]
            return (value if isinstance(value, str) else str(value)), True
        if name != variable:  # NOTE: a compiled graph may generate it in a hoisted child stream
            partial = next((text for var, text in self._partial.values() if var == variable), "")
        return partial, self.finished

    def iter_text(self, state: Callable[[], Optional[StreamState]], variable: Optional[str]) -> Iterator[str]:
        """New text as it appears (SGLang's text_iter): of the stream, or of `variable` until it is set.

        `state()` is the stream's StreamState once it exists."""
        sent = 0
        while True:
            with self.changed:
                st = state()
                text, final = self._view(st, variable) if st is not None else ("", self.finished)
                if len(text) <= sent and not final:
                    self.changed.wait()
                    continue
            if len(text) > sent:
                yield text[sent:]
                sent = len(text)
            if final:
                return
