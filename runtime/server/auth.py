"""The optional API key of `sglc serve` (``--api-key`` or the SGLC_API_KEY environment variable).

HTTP clients send ``Authorization: Bearer KEY`` (OpenAI style), gRPC clients the metadata
``authorization: Bearer KEY``. Health stays open on both (load balancers and liveness probes
carry no key); everything else answers 401 / UNAUTHENTICATED without the key.
The key's environment variable is part of the contract (:mod:`sglc.wire.auth`).
"""
from __future__ import annotations

import hmac
import os

from sglc.wire.auth import API_KEY_ENV

__all__ = ["API_KEY_ENV", "OPEN_GRPC_METHODS", "OPEN_HTTP_PATHS", "bearer_matches", "resolve_api_key"]

OPEN_HTTP_PATHS = frozenset({"/health"})
OPEN_GRPC_METHODS = frozenset({"/sglc.runtime.Runtime/Health"})


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
