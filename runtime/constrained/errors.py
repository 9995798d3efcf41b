"""Errors of the runtime's constraint compile service that are not about the constraint itself.

A constraint that is invalid or over its budget raises the FSM library's ValueErrors
(``sglc.fsm.FSMError``; a bad request). These two are about the server: it is busy, or a
compile worker broke. The server maps them to HTTP 429 / gRPC RESOURCE_EXHAUSTED and to an
internal error.
"""
from __future__ import annotations


class ConstraintCompilerBusy(RuntimeError):
    """Too many constraint compilations are in flight; retry later (HTTP 429 / RESOURCE_EXHAUSTED)."""


class ConstraintCompilerFailed(RuntimeError):
    """A compile worker process failed to start or died (an internal error, not the request's)."""
