"""Project-wide exceptions. Each carries a one-line message fit to print as `sglc: error: ...`.

The CLI catches :class:`SglcError` at the edge and prints it without a traceback, so every error
a user can cause (a bad program, a bad file) should be one of these.
"""
from __future__ import annotations


class SglcError(Exception):
    """Base of the errors a user can cause; `str(err)` is a one-line message."""


class VerifyError(SglcError):
    """A graph broke an IR invariant; the message names the node, its op and its source line."""


class GraphFormatError(SglcError):
    """A graph.pb could not be read (malformed, truncated, newer format) or written."""


class PassError(SglcError):
    """A compiler pass failed or left an invalid graph; the message names the pass."""


class BackendError(SglcError):
    """A model backend call failed (server down, deadline exceeded, request refused); the
    message names the endpoint and the call."""


#: The longest error line the command line prints: messages that quote a user's value (a name,
#: a pattern, a prompt) stay readable however long the value was.
MAX_ERROR_LINE = 500


def one_line_error(message: str, limit: int = MAX_ERROR_LINE) -> str:
    """The first line of ``message``, cut to ``limit`` characters with a note of how much was cut."""
    text = message.strip()
    line = text.splitlines()[0] if text else ""
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... ({len(line) - limit} more characters)"
