"""What an HTTP request must satisfy before an endpoint does any work for it.

- ``RequestGuard`` (ASGI middleware, before routing): the API key (``Authorization: Bearer KEY``;
  401 in OpenAI's error shape; /health stays open) and same-origin (a request whose ``Origin``
  header names another site is refused with 403: a web page on this machine must not drive the
  server; browsers always send Origin on cross-site POSTs, other clients do not send it).
- ``read_json_object``: the JSON endpoints' body: ``Content-Type: application/json`` (415
  otherwise, which also rules out the CORS "simple requests" a page may send without asking),
  at most ``max_request_bytes`` (413, from Content-Length and counted while reading), strict JSON
  (no NaN / Infinity), at most ``max_json_depth`` levels, strings of valid Unicode, an object.

Every refusal is a 4xx whose message names the rule and, for a limit, its value.
"""
from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from . import openai_protocol as proto
from .auth import OPEN_HTTP_PATHS, bearer_matches
from .http_call import HttpError
from .limits import ServerLimits, utf8_or_error
from sglc.wire.prompt import RequestError

__all__ = ["RequestGuard", "read_json_object"]


class RequestGuard:
    """ASGI middleware: API key and same-origin checks for every HTTP request."""

    def __init__(self, app: ASGIApp, api_key: str | None = None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> JSONResponse | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if self.api_key and scope.get("path") not in OPEN_HTTP_PATHS \
                and not bearer_matches(headers.get("authorization"), self.api_key):
            return JSONResponse(proto.error_body("missing or incorrect API key: send the header "
                                                 "'Authorization: Bearer KEY' (sglc serve --api-key / SGLC_API_KEY)",
                                                 code="invalid_api_key"),
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, headers.get("host", "")):
            return JSONResponse(proto.error_body(f"cross-origin requests are refused (Origin {origin[:200]!r} is "
                                                 "not this server)", code="cross_origin"), status_code=403)
        return None


def _same_origin(origin: str, host: str) -> bool:
    try:
        netloc = urlsplit(origin.strip()).netloc
    except ValueError:
        return False
    return bool(netloc) and netloc.lower() == host.strip().lower()


async def read_json_object(request: Request, limits: ServerLimits) -> dict:
    """The request's JSON object body, within the limits (HttpError 413 / 415 / 400 otherwise)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise HttpError(415, f"this endpoint takes a JSON body: send 'Content-Type: application/json' "
                             f"(got {media or 'no content type'!r})", code="unsupported_media_type")
    limit = limits.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise HttpError(400, f"Content-Length must be a number of bytes, got {declared[:40]!r}")
        if int(declared) > limit:
            raise HttpError(413, f"the request body has {int(declared)} bytes, over the server limit "
                                 f"max_request_bytes={limit} (sglc serve --limit max_request_bytes=N)",
                            code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # NOTE: a chunked body (no Content-Length) is cut off here
            raise HttpError(413, f"the request body has more than {limit} bytes, over the server limit "
                                 f"max_request_bytes={limit} (sglc serve --limit max_request_bytes=N)",
                            code="request_too_large")
        chunks.append(chunk)
    return parse_json_object(b"".join(chunks), limits.max_json_depth)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a 64-bit float")
    return value


def parse_json_object(raw: bytes, max_depth: int) -> dict:
    """Strict JSON (HttpError 400 naming the problem): an object, no NaN/Infinity, numbers that
    fit a float, at most `max_depth` levels, strings of valid Unicode."""
    try:
        body = json.loads(raw or b"{}", parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise HttpError(400, f"the request body is nested more than {max_depth} levels deep (server limit "
                             f"max_json_depth={max_depth})") from None
    except (ValueError, UnicodeDecodeError) as err:  # NOTE: JSONDecodeError and int() digit limits are ValueErrors
        raise HttpError(400, f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the request body must be a JSON object")
    try:
        _check_tree(body, max_depth)
    except RequestError as err:
        raise HttpError(400, str(err)) from None
    return body


def _check_tree(body: Any, max_depth: int) -> None:
    """Depth and string validity, iteratively (a deep body must not exhaust the Python stack)."""
    stack: list[tuple[Any, int, str]] = [(body, 1, "$")]
    while stack:
        value, depth, where = stack.pop()
        if depth > max_depth:
            raise HttpError(400, f"the request body is nested more than {max_depth} levels deep at {where[:80]} "
                                 f"(server limit max_json_depth={max_depth})")
        if isinstance(value, dict):
            for key, item in value.items():
                utf8_or_error(f"the key {where[:80]}.{key[:40]!r}", key)
                if isinstance(item, (dict, list)):
                    stack.append((item, depth + 1, f"{where}.{key[:40]}"))
                elif isinstance(item, str):
                    utf8_or_error(f"the field {where[:80]}.{key[:40]}", item)
        else:
            for i, item in enumerate(value):
                if isinstance(item, (dict, list)):
                    stack.append((item, depth + 1, f"{where}[{i}]"))
                elif isinstance(item, str):
                    utf8_or_error(f"the item {where[:80]}[{i}]", item)
