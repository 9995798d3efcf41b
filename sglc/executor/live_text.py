"""LiveText: what `state.text_iter()` reads while a program started with `run(stream=True)` runs.

The stream's committed text lives in its StreamState; a gen in flight adds the pieces the
backend has produced so far (`partial`). Both change under one condition, so a reader never
sees a gen's text twice (once partial, once committed) or not at all: the executor commits a
gen's final text inside :meth:`committing`, which also drops the partial.

SGLang's rules for `text_iter(var)` (its interpreter's): a variable is streamed only when the
program's own stream produces it (a gen or a select of `s`); any other variable -- the list a
join gathers from fork children, a variable only the children have -- yields one empty piece
once the program ends. `root_streams` are the streams whose gens count as the program's own:
stream 0, plus the one-way streams prefix hoisting makes out of it (graph_executor.py).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Optional

from sglc.executor.stream_state import StreamState

#: Meta keys that hold one chunk's share (concatenated when chunks are merged); SGLang's list.
INCREMENTAL_META_KEYS = ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs")


class LiveText:
    """Partial gen text per stream, plus a condition that wakes readers on every change."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        # stream id -> (variable, text so far, [(text length after the chunk, the chunk's meta)])
        self._partial: dict[int, tuple[str, str, list[tuple[int, dict]]]] = {}
        self.finished = False
        self.failed = False
        #: Streams whose gens are the program's own (text_iter(var) streams only those).
        self.root_streams: frozenset[int] = frozenset({0})

    def on_text(self, stream_id: int, variable: str) -> Callable[..., None]:
        """The callback a streaming gen of `variable` on stream `stream_id` feeds its pieces to
        (``feed(piece)`` or ``feed(piece, meta)``: SGLang's per-chunk meta)."""
        def feed(piece: str, meta: Optional[dict] = None) -> None:
            with self.changed:
                _, text, metas = self._partial.get(stream_id, (variable, "", []))
                text += piece
                if meta is not None:
                    metas = metas + [(len(text), meta)]
                self._partial[stream_id] = (variable, text, metas)
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

    def finish(self, failed: bool = False) -> None:
        """The program ended (`failed`: with an error; then readers of a variable get nothing more)."""
        with self.changed:
            self.finished = True
            self.failed = self.failed or failed
            self.changed.notify_all()

    def _view(self, st: StreamState, variable: Optional[str]) -> tuple[str, bool, list[tuple[int, dict]], Any]:
        """(text visible now, final?, chunk metas of the partial text, final meta or None) of the
        whole stream or of one variable. Call under the lock."""
        if variable is None:
            _, partial, _ = self._partial.get(st.stream_id, ("", "", []))
            return st.text + partial, self.finished, [], None
        if variable in st.variables and isinstance(st.variables[variable], str):
            return st.variables[variable], True, [], st.meta_info.get(variable)
        for stream in sorted(self.root_streams):  # NOTE: a compiled graph may generate it in a hoisted stream
            name, partial, metas = self._partial.get(stream, ("", "", []))
            if name == variable:
                return partial, False, metas, None
        return "", self.finished, [], None

    def iter_text(self, state: Callable[[], Optional[StreamState]], variable: Optional[str],
                  with_meta: bool = False) -> Iterator[Any]:
        """New text as it appears (SGLang's text_iter): of the stream, or of `variable` until it is set.

        `state()` is the stream's StreamState once it exists. A variable the program's own
        streams never produce as text yields one "" when the program ends (SGLang's interpreter).
        `with_meta`: (piece, meta) pairs, the meta of the chunks that made the piece merged
        (SGLang's text_async_iter(return_meta_data=True)); chunks without text are merged into
        the next piece."""
        sent = 0
        used = 0  # chunk metas already handed out
        sent_logprobs = 0
        while True:
            with self.changed:
                st = state()
                text, final, metas, final_meta = (self._view(st, variable) if st is not None
                                                  else ("", self.finished, [], None))
                if len(text) <= sent and not final:
                    self.changed.wait()
                    continue
                never_streamed = (final and variable is not None and sent == 0 and text == "" and not self.failed
                                  and not (st is not None and isinstance(st.variables.get(variable), str)))
            if never_streamed:
                yield ("", {}) if with_meta else ""
                return
            if len(text) > sent:
                piece = text[sent:]
                if with_meta:
                    if final:
                        meta = _final_share(final_meta, sent_logprobs)
                    else:
                        meta = _merged([m for end, m in metas[used:]])
                        used = len(metas)
                    sent_logprobs += len(meta.get("output_token_logprobs") or [])
                    yield piece, meta
                else:
                    yield piece
                sent = len(text)
            if final:
                return


def _merged(metas: list[dict]) -> dict:
    """One meta for several chunks: the incremental keys concatenated, the others the last's."""
    if not metas:
        return {}
    out = dict(metas[-1])
    for key in INCREMENTAL_META_KEYS:
        if any(key in m for m in metas):
            out[key] = [item for m in metas for item in (m.get(key) or [])]
    return out


def _final_share(meta: Optional[dict], already: int) -> dict:
    """The final meta of a variable as the share of its last piece: the output logprobs not yet
    handed out (the counts are the whole gen's)."""
    out = dict(meta or {})
    if "output_token_logprobs" in out:
        out["output_token_logprobs_length"] = len(out["output_token_logprobs"])
        for key in INCREMENTAL_META_KEYS:
            if key in out and out[key] is not None:
                out[key] = out[key][already:]
    return out
