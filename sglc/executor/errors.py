"""Errors of program execution: which node (or primitive) failed, where, and why.

Both are one-line :class:`~sglc.errors.SglcError` messages, so the CLI prints them without a
traceback and batch results can store them as the input's ``"error"``.
"""
from __future__ import annotations

from typing import Optional

from sglc.errors import BackendError, SglcError

__all__ = ["BackendError", "ExecutionError", "describe", "wrap"]


class ExecutionError(SglcError):
    """A node of a program failed. The message reads
    ``while executing %judgment (gen) at essay_judge.py:34: <reason>``."""

    def __init__(self, node_name: str, op: str, source: str, reason: str) -> None:
        self.node_name = node_name
        self.op = op
        self.source = source
        self.reason = reason
        where = f" at {source}" if source else ""
        super().__init__(f"while executing %{node_name} ({op}){where}: {reason}")


def describe(err: BaseException) -> str:
    """A one-line reason for an exception (its message, or its type when it has none)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(err, (SglcError, ValueError, TypeError, KeyError, FileNotFoundError)) and first:
        return first if not isinstance(err, KeyError) else first.strip("'\"")
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def wrap(err: BaseException, node_name: str, op: str, source: str) -> ExecutionError:
    """`err` as an ExecutionError naming the node (an ExecutionError passes through unchanged)."""
    if isinstance(err, ExecutionError):
        return err
    return ExecutionError(node_name, op, source, describe(err))


def first_line(message: Optional[str]) -> str:
    """The first line of a message ('' for None)."""
    return (message or "").strip().splitlines()[0] if (message or "").strip() else ""
