"""What an HTTP request must satisfy before an endpoint does any work for it.

- ``RequestGuard`` (ASGI middleware, before routing), in this order: the ``Host`` header names
  this server (host_allowlist.py: 400 otherwise, the DNS-rebinding defence); the API key
  (``Authorization: Bearer KEY``; 401 in OpenAI's error shape; /health stays open); the
  ``Origin``, when sent, names an allowed host on this server's port (403 otherwise: a web page
  must not drive the server; browsers always send Origin on cross-site POSTs, other clients do
  not send it); every POST says ``Content-Type: application/json`` unless it has no body (415
  otherwise: this rules out the CORS "simple requests" a page may send without asking; SGLang's
  client and ``requests.post(url + "/flush_cache")`` send no body).
- ``read_json_object``: the JSON endpoints' body: ``Content-Type: application/json`` (charset
  utf-8 if any; 415 otherwise), at most ``max_request_bytes`` (413, from Content-Length and
  counted while reading), UTF-8 without a byte-order mark (400 naming the encoding sent), strict
  JSON (no NaN / Infinity, no key twice in one object), at most ``max_json_depth`` levels,
  strings of valid Unicode, an object.

Every refusal is a 4xx whose message names the rule and, for a limit, its value.
"""
from __future__ import annotations

import codecs
import json
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from . import openai_protocol as proto
from .auth import OPEN_HTTP_PATHS, bearer_matches
from .host_allowlist import HostAllowList
from .http_call import HttpError
from .limits import ServerLimits, utf8_or_error
from sglc.wire.prompt import RequestError

__all__ = ["RequestGuard", "read_json_object"]


class RequestGuard:
    """ASGI middleware: Host, API key, Origin and POST content-type checks for every HTTP request."""

    def __init__(self, app: ASGIApp, api_key: str | None = None, allowed_hosts: HostAllowList | None = None) -> None:
        self.app = app
        self.api_key = api_key
        self.allowed_hosts = allowed_hosts if allowed_hosts is not None else HostAllowList()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> JSONResponse | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        host = headers.get("host")  # NOTE: absent only from non-browser HTTP/1.0 clients: allowed
        if host is not None and not self.allowed_hosts.allows_header(host):
            return _refuse(400, f"the Host header {host[:200]!r} is not a name of this server (DNS-rebinding "
                                "protection: only loopback names and the bound address are allowed; add names with "
                                "sglc serve --allowed-hosts NAME,...)", "host_not_allowed")
        if self.api_key and scope.get("path") not in OPEN_HTTP_PATHS \
                and not bearer_matches(headers.get("authorization"), self.api_key):
            return JSONResponse(proto.error_body("missing or incorrect API key: send the header "
                                                 "'Authorization: Bearer KEY' (sglc serve --api-key / SGLC_API_KEY)",
                                                 code="invalid_api_key"),
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        origin = headers.get("origin")
        if origin is not None and not self.allowed_hosts.allows_origin(origin, host, scope.get("scheme", "http")):
            return _refuse(403, f"cross-origin requests are refused (Origin {origin[:200]!r} is not an allowed host "
                                "on this server's port; sglc serve --allowed-hosts NAME[:PORT],... adds one)",
                           "cross_origin")
        if scope.get("method") == "POST":
            media = _media_type(headers.get("content-type"))
            if (media is not None and media != "application/json") or (media is None and _has_body(headers)):
                return _refuse(415, _media_message(media), "unsupported_media_type")
        return None


def _refuse(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse(proto.error_body(message, code=code), status_code=status)


def _media_type(content_type: str | None) -> str | None:
    return None if content_type is None else content_type.split(";", 1)[0].strip().lower()


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "").strip()
    return "transfer-encoding" in headers or bool(length.lstrip("0"))  # NOTE: "Content-Length: 0" is no body


def _media_message(media: str | None) -> str:
    return (f"a POST body must be JSON: send 'Content-Type: application/json' (got "
            f"{media or 'no content type'!r}); a POST without a body needs no content type")


async def read_json_object(request: Request, limits: ServerLimits) -> dict:
    """The request's JSON object body, within the limits (HttpError 413 / 415 / 400 otherwise)."""
    content_type = request.headers.get("content-type", "")
    media = _media_type(content_type)
    if media != "application/json":
        raise HttpError(415, f"this endpoint takes a JSON body: send 'Content-Type: application/json' "
                             f"(got {media or 'no content type'!r})", code="unsupported_media_type")
    charset = _charset(content_type)
    if charset not in (None, "utf-8", "utf8"):
        raise HttpError(415, f"JSON bodies must be UTF-8 (RFC 8259): the Content-Type says charset={charset[:40]!r}",
                        code="unsupported_media_type")
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


def _charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


#: Byte-order marks, longest first (UTF-32-LE's starts with UTF-16-LE's).
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32-LE"), (codecs.BOM_UTF32_BE, "UTF-32-BE"), (codecs.BOM_UTF8, "UTF-8"),
         (codecs.BOM_UTF16_LE, "UTF-16-LE"), (codecs.BOM_UTF16_BE, "UTF-16-BE"))


def _utf8_text(raw: bytes) -> str:
    """The body as text: UTF-8 without a byte-order mark (RFC 8259 §8.1), else HttpError 400
    naming what was sent. NOTE: json.loads(bytes) would silently accept a BOM, UTF-16 and UTF-32."""
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise HttpError(400, f"the request body starts with a {name} byte-order mark: JSON bodies must be UTF-8 "
                                 "without a byte-order mark")
    # NOTE: JSON text starts with an ASCII character, so NUL bytes among the first four are UTF-16/32
    head = raw[:4]
    if len(head) == 4 and 0 in head:
        encoding = json.detect_encoding(raw).upper().replace("_", "-")
        raise HttpError(400, f"the request body looks like {encoding} (NUL bytes): JSON bodies must be UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HttpError(400, f"the request body is not UTF-8 (invalid byte at offset {err.start}): JSON bodies "
                             "must be UTF-8") from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    body = dict(pairs)
    if len(body) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return body


def parse_json_object(raw: bytes, max_depth: int) -> dict:
    """Strict JSON (HttpError 400 naming the problem): UTF-8 without a BOM, an object, no key
    twice in one object, no NaN/Infinity, numbers that fit a float, at most `max_depth` levels,
    strings of valid Unicode."""
    try:
        body = json.loads(_utf8_text(raw) or "{}", parse_constant=_no_constant, parse_float=_finite_float,
                          object_pairs_hook=_object_without_duplicates)
    except _DuplicateKey as err:
        raise HttpError(400, f"the request body has the key {err.key[:80]!r} twice in one JSON object (duplicate "
                             "keys are refused: which one counts would be ambiguous)", param=err.key[:80]) from None
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
