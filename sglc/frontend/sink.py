"""The per-primitive interface behind a ProgramState.

A :class:`ProgramState` is the object a user's function receives as `s`. It decodes what the
user appends and calls one method of its sink per primitive. Two sinks exist by design:

- the tracing sink (sglc/frontend/trace_sink.py) records IR nodes and returns symbolic values;
- an eager sink (added with the executor) runs each primitive on a backend and returns text.

Values flowing back (get_var, text) are symbolic when tracing and real when eager; the state does
not care which.
"""
from __future__ import annotations

import abc
from typing import Any

from sglc.frontend.primitives import Gen, Select


class StreamSink(abc.ABC):
    """One prompt stream: text is appended in call order; variables are read back by name."""

    # ----- appending to the stream -----
    @abc.abstractmethod
    def append_text(self, text: str) -> None:
        """Append literal text."""

    @abc.abstractmethod
    def append_value(self, value: Any) -> None:
        """Append the string form of a run-time value (a symbolic value when tracing)."""

    def append_formatted(self, text: Any) -> None:
        """Append formatted text over run-time values (a FormattedText: only tracing makes them)."""
        raise TypeError(f"{type(self).__name__} cannot append formatted text made while tracing")

    @abc.abstractmethod
    def gen(self, expr: Gen) -> None:
        """Generate after the current text, append the result, define variable `expr.name`."""

    @abc.abstractmethod
    def select(self, expr: Select) -> None:
        """Choose one of `expr.choices`, append it, define variable `expr.name`."""

    @abc.abstractmethod
    def role_begin(self, role: str) -> None:
        """Open a chat role (roles do not nest)."""

    @abc.abstractmethod
    def role_end(self, role: str) -> None:
        """Close the open chat role, which must be `role`."""

    @abc.abstractmethod
    def image(self, path: Any) -> None:
        """Append an image (path or URL)."""

    @abc.abstractmethod
    def video(self, path: Any, num_frames: int) -> None:
        """Append a video (path or URL) as `num_frames` frames."""

    @abc.abstractmethod
    def var_scope_begin(self, name: str) -> None:
        """Start capturing appended text into variable `name`."""

    @abc.abstractmethod
    def var_scope_end(self, name: str) -> None:
        """Stop capturing; variable `name` becomes the captured text."""

    # ----- reading back -----
    @abc.abstractmethod
    def get_var(self, name: str) -> Any:
        """The value of variable `name` (raise if it was never defined in this stream)."""

    @abc.abstractmethod
    def set_var(self, name: str, value: Any) -> None:
        """Bind variable `name` to a value the program supplies."""

    @abc.abstractmethod
    def has_var(self, name: str) -> bool:
        """Whether variable `name` is defined in this stream."""

    @abc.abstractmethod
    def text(self) -> Any:
        """The stream's text so far."""

    @abc.abstractmethod
    def messages(self) -> Any:
        """The stream's chat messages so far (OpenAI format)."""

    @abc.abstractmethod
    def get_meta_info(self, name: str) -> Any:
        """Per-call metadata of the gen/select that produced `name`."""

    # ----- streams -----
    @abc.abstractmethod
    def fork(self, n: int) -> list["StreamSink"]:
        """`n` child streams that start with a copy of this stream's text and variables."""

    @abc.abstractmethod
    def join(self, children: list["StreamSink"], mode: str) -> None:
        """Finish `children` (all of one fork of this stream): gather variables or append text."""

    def sync(self) -> None:
        """Wait until everything appended so far has run (nothing to wait for when tracing)."""

    def describe(self) -> str:
        """A short description for repr()."""
        return type(self).__name__
