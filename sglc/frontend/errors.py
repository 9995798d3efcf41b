"""Errors of the frontend, and how they find the user's source line.

Every message is one line that starts with the user's ``file:line`` (the innermost frame that is
not inside the sglc package), so a traceback is never needed to find the culprit.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

from sglc.errors import SglcError

_SGLC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIPPED_FILES = ("contextlib.py",)


class TraceError(SglcError):
    """A program used a construct the tracer cannot turn into a graph (one-line message).

    `argument`: the program parameter whose value the construct needed at compile time (a fork
    count, a condition), when that was the cause; binding it (`sglc compile --bind`) fixes it.
    """

    def __init__(self, message: str, argument: Optional[str] = None) -> None:
        super().__init__(message)
        self.argument = argument
        #: Whether Python needed the value of generated text here: prog.compile() then runs the
        #: program with a graph break at this line (sglc/executor/graph_breaks.py).
        self.breakable = False


class NotExecutableError(SglcError):
    """A frontend call needs an executor or backend that this build does not provide yet."""


class NotSupportedError(SglcError):
    """An SGLang feature sglc does not support yet (the message names it and what to use instead)."""


def user_frame_location(depth_limit: int = 200) -> tuple[str, int]:
    """(path, line) of the innermost calling frame outside sglc and contextlib, or ("?", 0)."""
    frame = sys._getframe(1)
    for _ in range(depth_limit):
        if frame is None:
            break
        path = frame.f_code.co_filename
        if not _is_internal(path):
            return path, frame.f_lineno
        frame = frame.f_back
    return "?", 0


def user_source() -> str:
    """The user's ``file:line`` (file base name) for node metadata and error messages."""
    path, line = user_frame_location()
    return f"{os.path.basename(path)}:{line}"


def trace_error(message: str, argument: Optional[str] = None) -> TraceError:
    """A TraceError whose one-line message is prefixed with the user's file:line."""
    return TraceError(f"{user_source()}: {message}", argument)


def not_supported(what: str, instead: str = "") -> NotSupportedError:
    """The error for an SGLang feature sglc does not have yet, at the user's line."""
    return NotSupportedError(f"{user_source()}: {what} is not supported yet" + (f"; {instead}" if instead else ""))


def not_executable(what: str) -> NotExecutableError:
    """The error for a feature that needs the executor (which a later issue adds)."""
    return NotExecutableError(
        f"{user_source()}: {what} needs the program executor, which this build of sglc does not "
        "have yet; trace the program instead (fn.trace() or `sglc compile`)"
    )


def _is_internal(path: str) -> bool:
    if path.startswith("<frozen"):
        return True
    absolute = os.path.abspath(path)
    return absolute.startswith(_SGLC_DIR) or os.path.basename(path) in _SKIPPED_FILES
