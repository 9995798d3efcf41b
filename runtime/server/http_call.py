"""One HTTP call's engine work and its answers, shared by every endpoint module: the HttpError
answer (OpenAI's error shape), Started (the call's CallGroup with its JSON answer and SSE stream),
and the finished output of one call (internal aborts raise)."""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable

from .calls import CallGroup
from .service import abort_kind

__all__ = ["HttpError", "Started", "check_abort", "finished"]


class HttpError(Exception):
    """An HTTP error answer in OpenAI's shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.code, self.param = status, type_, code, param


class Started:
    """One HTTP call's engine requests (``group``: every one it started) and its two answers:
    ``answer()`` the JSON once ``group.wait_done()`` returned, or ``events()`` the SSE stream."""

    def __init__(self, group: CallGroup, answer: Callable[[], Any], events: Callable[[], AsyncIterator[str]]) -> None:
        self.group = group
        self.answer = answer
        self.events = events


def finished(call: Any) -> Any:
    """A finished GenerateCall's GenerateOutput (after wait_done). Internal aborts raise."""
    out = call.final_chunk().output
    if out is None:
        raise HttpError(500, "the request ended without an output", "server_error")
    check_abort(out.finish_reason)
    return out


def check_abort(reason: dict) -> None:
    if reason.get("type") == "abort":
        message = str(reason.get("message", "aborted"))
        kind = abort_kind(message)
        if kind == "unavailable":
            raise HttpError(503, message, "server_error", "unavailable")
        if kind == "internal":
            raise HttpError(500, message, "server_error", "internal")
