"""The optional API key of `sglc serve` (``--api-key`` or the SGLC_API_KEY environment variable).

HTTP clients send ``Authorization: Bearer KEY`` (OpenAI style), gRPC clients the metadata
``authorization: Bearer KEY``. The plain health check stays open on both (load balancers and
liveness probes carry no key); everything else answers 401 / UNAUTHENTICATED without the key,
and so does every call that can start a generation: HTTP /health_generate and gRPC
``Health(check_generate=true)`` included (tests/test_auth_everywhere.py enumerates them).
The key's environment variable is part of the contract (:mod:`sglc.wire.auth`).
"""
from __future__ import annotations

import hmac
import os
from typing import Any, Callable

from sglc.wire.auth import API_KEY_ENV

__all__ = ["API_KEY_ENV", "OPEN_GRPC_CALLS", "OPEN_HTTP_PATHS", "bearer_matches", "resolve_api_key"]

OPEN_HTTP_PATHS = frozenset({"/health"})
#: gRPC methods open without the key, each with the test of which requests it lets through: the
#: interceptor sees only the method name, so a method open for some requests is checked per request.
#: Health(check_generate=true) runs a generation (as HTTP /health_generate), so it needs the key;
#: anything that is not a plain HealthRequest (a malformed one) is refused too.
OPEN_GRPC_CALLS: dict[str, Callable[[Any], bool]] = {
    "/sglc.runtime.Runtime/Health": lambda request: getattr(request, "check_generate", None) is False,
}


def resolve_api_key(given: str | None) -> str | None:
    """The key given, else $SGLC_API_KEY, else None (no key: the server is open). An empty
    string counts as none."""
    key = given if given is not None else os.environ.get(API_KEY_ENV)
    return key or None


def bearer_matches(header: str | bytes | None, key: str) -> bool:
    """True when `header` is ``Bearer KEY`` (scheme case-insensitive); constant-time compare."""
    if header is None:
        return False
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, token = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
