"""The HTTP server's connection guard: slow clients (slowloris) and connection floods.

uvicorn (h11) bounds only an idle keep-alive connection; a client that sends its request headers
or body a byte at a time holds a connection (a file descriptor, a parser, a handler waiting on
the body) for as long as it likes. :class:`GuardedH11Protocol` adds, per connection:

- **headers**: a request's headers must be complete within ``max_header_seconds`` of its first
  byte (a fresh connection: of being accepted), else 408 and the connection is closed;
- **body**: its body must be complete within ``max_body_seconds`` of its headers, else 408 and
  closed (the handler waiting on the body sees a disconnect, which cancels what it started);
- **connections**: at most ``max_connections_per_client`` open connections per client address and
  ``max_connections`` in all; one more is answered 429 (per client, ``Retry-After: 1``) or 503 (in
  all) and closed at once, before anything is read. Logged at most once a minute per address.

Only reading the request is timed. Once its last byte arrived no deadline runs, so an answer (an
SSE stream of minutes, a long generation) is never cut here, and an idle kept-alive connection
(the sglang-router's and the SGLang client's pools) is left to uvicorn's ``timeout_keep_alive``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import openai_protocol as proto
from .limits import ServerLimits

__all__ = ["ConnectionGuard", "GuardedH11Protocol"]

log = logging.getLogger(__name__)

_LOG_EVERY_S = 60.0
_REASONS = {408: "Request Timeout", 429: "Too Many Requests", 503: "Service Unavailable"}


class ConnectionGuard:
    """One server's open connections by client address, and what it refused or timed out.

    Used only on the server's event loop (uvicorn's thread), so it takes no lock.
    """

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.open_by_client: dict[str, int] = {}
        self.num_open = 0
        self.num_refused = 0
        self.num_timed_out = 0
        self._last_logged: dict[tuple[str, str], float] = {}

    def admit(self, client: str) -> tuple[int, str, str] | None:
        """None: admitted and counted until :meth:`release`; else (status, message, limit) to refuse it."""
        per_client = self.open_by_client.get(client, 0)
        if self.num_open >= self.limits.max_connections:
            refusal = (503, f"the server has {self.num_open} open connections, its limit max_connections="
                            f"{self.limits.max_connections} (sglc serve --limit max_connections=N)", "max_connections")
        elif per_client >= self.limits.max_connections_per_client:
            refusal = (429, f"client {client} has {per_client} open connections, the server limit "
                            f"max_connections_per_client={self.limits.max_connections_per_client} "
                            f"(sglc serve --limit max_connections_per_client=N)", "max_connections_per_client")
        else:
            self.open_by_client[client] = per_client + 1
            self.num_open += 1
            return None
        self.num_refused += 1
        self.note(refusal[2], client, f"HTTP connection refused: {refusal[1]}")
        return refusal

    def release(self, client: str) -> None:
        """An admitted connection closed."""
        left = self.open_by_client[client] - 1
        if left:
            self.open_by_client[client] = left
        else:
            del self.open_by_client[client]
        self.num_open -= 1

    def timed_out(self, client: str, message: str) -> None:
        self.num_timed_out += 1
        self.note("timeout", client, f"HTTP connection closed: {message}")

    def note(self, kind: str, client: str, message: str) -> None:
        """Log `message` unless this kind of event from this client was logged in the last minute
        (3,000 stalled connections make one line, not 3,000)."""
        now = time.monotonic()
        key = (kind, client)
        if now - self._last_logged.get(key, -_LOG_EVERY_S) < _LOG_EVERY_S:
            return
        if len(self._last_logged) > 4096:  # NOTE: many addresses (IPv6) must not grow this without bound
            self._last_logged = {k: t for k, t in self._last_logged.items() if now - t < _LOG_EVERY_S}
        self._last_logged[key] = now
        log.warning("%s (more like it within a minute are not logged)", message)


def _answer(status: int, message: str, limit: str) -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 answer in OpenAI's error shape, written raw: the
    h11 state machine cannot send a response before a request (or in the middle of its body)."""
    body = json.dumps(proto.error_body(message, "server_error" if status == 503 else "invalid_request_error",
                                       param=limit, code=status)).encode()
    head = [f"HTTP/1.1 {status} {_REASONS[status]}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close"]
    if status == 429:
        head.append("retry-after: 1")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guard's connection caps and request read deadlines.

    Built by uvicorn with its own arguments plus ``guard=`` (pass ``functools.partial(
    GuardedH11Protocol, guard=...)`` as ``uvicorn.Config(http=...)``).
    """

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self._counted: str | None = None  # the client address the guard counts this connection under
        self._reading = ""  # "headers", "body" or "" (no request being read: no deadline)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else "unknown"
        refusal = self.guard.admit(client)
        if refusal is not None:
            transport.write(_answer(*refusal))
            transport.close()
            return
        self._counted = client
        self._start("headers")  # NOTE: a connection that never sends a byte is a slow client too

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        if self._counted is not None:
            self.guard.release(self._counted)
            self._counted = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._reading and self.conn.their_state is h11.IDLE:
            self._start("headers")  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        self._follow()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes h11 cannot parse (a malformed chunk of a body, say), made the
        request's only answer: a handler already started for it (one that refused the request
        without reading the body) must not send a second one on the finished connection, which
        h11 refuses with a LocalProtocolError and uvicorn logs as a traceback."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # NOTE: its send() is a no-op, its receive() says http.disconnect
            if cycle.response_started:  # NOTE: mid-answer: no 400 can follow, only the close
                self.transport.close()
                return
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # NOTE: may parse a pipelined request buffered meanwhile
        self._follow()

    def _follow(self) -> None:
        """Move the deadline along with h11's view of the request being read."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._reading != "body":
                self._start("body")
        elif state is h11.IDLE:
            if self._reading == "" and self.conn.trailing_data[0]:
                self._start("headers")  # part of a pipelined request waits in h11's buffer
        else:  # DONE (the request is read: the answer is never timed), MUST_CLOSE, CLOSED, ERROR
            self._stop()

    def _start(self, reading: str) -> None:
        self._stop()
        if self.transport is None or self.transport.is_closing():
            return
        seconds = self.guard.limits.max_header_seconds if reading == "headers" else self.guard.limits.max_body_seconds
        self._reading = reading
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._reading = ""

    def _expired(self) -> None:
        reading, self._deadline, self._reading = self._reading, None, ""
        if self.transport.is_closing():
            return
        limit = "max_header_seconds" if reading == "headers" else "max_body_seconds"
        message = (f"the request {reading} did not arrive within {limit}={getattr(self.guard.limits, limit)} s "
                   f"(sglc serve --limit {limit}=N)")
        self.guard.timed_out(self._counted or "unknown", message)
        # NOTE: answer only a client that sent part of a request and got no answer yet; a
        # connection that never sent a byte is closed silently (as nginx does)
        started = self.cycle is not None and self.cycle.response_started and reading == "body"
        if not started and (reading == "body" or self.conn.trailing_data[0]):
            self.transport.write(_answer(408, message, limit))
        self.transport.close()  # the handler waiting on the body gets http.disconnect
