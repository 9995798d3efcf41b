"""Slow and greedy HTTP clients cannot hold the server: a request's headers and body must arrive
within their deadlines (else 408 and closed), open connections are capped per client address and
in all (429 / 503 at once), and neither the deadlines nor the caps cut an answer being streamed or
an idle kept-alive connection.

One in-process runtime on the real default model, HTTP on 127.0.0.1 with 1 s deadlines; raw
sockets play the slow clients (other loopback addresses, 127.0.0.2 and up, other clients).
"""
from __future__ import annotations

import http.client
import json
import socket
import time

import pytest

from grpc_helpers import runtime_fixture

from server_helpers import http_base, wait_idle
from sglc_runtime.server.limits import ServerLimits

pytestmark = pytest.mark.model

LIMITS = ServerLimits(max_header_seconds=1, max_body_seconds=1, max_connections_per_client=4, max_connections=16)

runtime = runtime_fixture(8192, http_port=0, limits=LIMITS)


@pytest.fixture(scope="module")
def address(runtime) -> tuple[str, int]:
    host, port = http_base(runtime).removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def guard(runtime):
    """The HTTP server's connection guard, once no connection of an earlier test is open."""
    (http,) = [f for f in runtime.frontends if f.kind == "http"]
    _wait_until(lambda: http.guard.num_open == 0, "connections of earlier tests to close")
    return http.guard


def _wait_until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _connect(address: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(15)
    sock.bind((source, 0))
    sock.connect(address)
    return sock


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and the seconds that took."""
    t0, got = time.monotonic(), b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got, time.monotonic() - t0


def _error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def _post_head(address: tuple[str, int], length: int, path: str = "/v1/completions") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _health_kept_alive(address: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    """A connection that was answered GET /health and stays open (kept alive, nothing timed)."""
    sock = _connect(address, source)
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\n\r\n".encode())
    response = http.client.HTTPResponse(sock)
    response.begin()
    assert response.status == 200 and response.read(), response.status
    return sock


def test_half_the_headers_then_a_stall_is_408_and_closed_after_the_header_deadline(address, guard):
    """A client that stops in the middle of its headers is answered 408 naming max_header_seconds, then closed."""
    with _connect(address) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        answer, seconds = _read_until_closed(sock)
    status, error = _error(answer)
    assert status == 408 and error["param"] == "max_header_seconds", answer
    assert "max_header_seconds=1" in error["message"]
    assert seconds > 0.8, seconds  # NOTE: not before the deadline; the socket's 15 s timeout bounds the rest
    assert guard.num_timed_out >= 1


def test_a_connection_that_never_sends_is_closed_after_the_header_deadline(address, guard):
    """A silent connection is closed (without an answer: it asked nothing) after max_header_seconds."""
    with _connect(address) as sock:
        answer, seconds = _read_until_closed(sock)
    assert answer == b"" and seconds > 0.8, (answer, seconds)


def test_a_stalled_body_is_408_and_closed_and_leaves_nothing_running(runtime, address, guard):
    """A body that stops arriving is answered 408 naming max_body_seconds, then closed; the handler that
    waited for it ends and the connection is no longer counted."""
    with _connect(address) as sock:
        sock.sendall(_post_head(address, 200) + b'{"prompt": "The capital')
        answer, seconds = _read_until_closed(sock)
    status, error = _error(answer)
    assert status == 408 and error["param"] == "max_body_seconds", answer
    assert seconds > 0.8, seconds  # NOTE: not before the deadline; the socket's 15 s timeout bounds the rest
    wait_idle(runtime, timeout=10)
    _wait_until(lambda: guard.num_open == 0, "the timed-out connection to be released")


def test_a_body_sent_slowly_but_within_its_deadline_is_answered(address, guard):
    """Pieces of headers and body 0.2 s apart, all within the deadlines, get a normal answer."""
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0}).encode()
    head = _post_head(address, len(body))
    with _connect(address) as sock:
        for piece in (head[:20], head[20:], body[:10], body[10:]):
            sock.sendall(piece)
            time.sleep(0.2)
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 200, response.read()


def test_a_kept_alive_connection_idle_past_the_header_deadline_still_serves(address, guard):
    """Idle between requests is uvicorn's keep-alive (5 s), not a header deadline: the router's and the
    SGLang client's pooled connections are reused after a pause."""
    conn = http.client.HTTPConnection(*address, timeout=15)
    try:
        conn.request("GET", "/health")
        assert conn.getresponse().read() and conn.sock is not None
        local = conn.sock.getsockname()
        time.sleep(2.0)  # > max_header_seconds and max_body_seconds
        conn.request("GET", "/health")
        response = conn.getresponse()
        assert response.status == 200 and response.read()
        assert conn.sock.getsockname() == local, "the client had to reconnect"
    finally:
        conn.close()


def test_a_long_stream_is_not_cut_by_the_read_deadlines(runtime, address, guard):
    """Once a request is read nothing is timed: a streamed answer still delivers new events well after
    both deadlines have passed while the client was not reading."""
    # NOTE: far more tokens than any device makes in the pause; the client leaves after one more event
    body = json.dumps({"prompt": "Tell me a very long story.", "max_tokens": 2000, "ignore_eos": True,
                       "temperature": 0.8, "stream": True}).encode()
    with _connect(address) as sock:
        sock.sendall(_post_head(address, len(body)) + body)
        got = b""
        while b"data: " not in got:
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
        time.sleep(2.5)  # > both deadlines
        sock.setblocking(False)  # drain what was sent during the pause ...
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except BlockingIOError:
            pass
        assert b"[DONE]" not in got, "the stream ended during the pause: the test proves nothing"
        sock.settimeout(30)  # ... then an event generated after it must still arrive
        later = sock.recv(65536)
    assert b"data: " in later, f"the stream was cut: {later[:200]!r}"
    wait_idle(runtime, timeout=30)  # the client went away: its request is cancelled


def test_the_per_client_cap_refuses_the_next_connection_at_once_with_429(address, guard):
    """With max_connections_per_client open from one address the next one is answered 429 (Retry-After)
    at once and closed; another address is still served, and a slot freed is reused."""
    held = [_health_kept_alive(address) for _ in range(LIMITS.max_connections_per_client)]
    try:
        with _connect(address) as sock:
            answer, _ = _read_until_closed(sock)
        status, error = _error(answer)
        assert status == 429 and error["param"] == "max_connections_per_client", answer
        assert b"retry-after: 1" in answer.lower() and "127.0.0.1 has 4 open connections" in error["message"]
        _health_kept_alive(address, "127.0.0.2").close()  # another client is not refused
        held.pop().close()
        _wait_until(lambda: guard.open_by_client.get("127.0.0.1", 0) < 4, "the freed slot")
        held.append(_health_kept_alive(address))
    finally:
        for sock in held:
            sock.close()
    assert guard.num_refused >= 1


def test_the_global_cap_refuses_the_next_connection_at_once_with_503(address, guard):
    """With max_connections open in all (from several addresses) the next one is answered 503 and closed."""
    held = [_health_kept_alive(address, f"127.0.0.{1 + i // 4}") for i in range(LIMITS.max_connections)]
    try:
        with _connect(address, "127.0.0.9") as sock:
            answer, _ = _read_until_closed(sock)
        status, error = _error(answer)
        assert status == 503 and error["param"] == "max_connections", answer
    finally:
        for sock in held:
            sock.close()
    _wait_until(lambda: guard.num_open == 0, "every connection to be released")


def test_a_flood_of_refusals_is_logged_once_and_every_admitted_connection_is_released(caplog):
    """1,000 refused connections from one address make one log line; releasing what was admitted empties the counts."""
    from sglc_runtime.server.connection_guard import ConnectionGuard

    guard = ConnectionGuard(LIMITS)
    assert all(guard.admit("10.0.0.1") is None for _ in range(LIMITS.max_connections_per_client))
    with caplog.at_level("WARNING", logger="sglc_runtime.server.connection_guard"):
        refusals = [guard.admit("10.0.0.1") for _ in range(1000)]
    assert {r[0] for r in refusals} == {429} and guard.num_refused == 1000
    assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1
    assert guard.admit("10.0.0.2") is None  # another address has its own count
    for _ in range(LIMITS.max_connections_per_client):
        guard.release("10.0.0.1")
    guard.release("10.0.0.2")
    assert guard.num_open == 0 and guard.open_by_client == {}


def test_the_slow_body_soak_sees_every_slow_connection_closed_in_time(address, guard):
    """bench/soak_slow_body.py, briefly: each slow connection is closed within its deadline (none early,
    none left open) while /health and a generation are answered."""
    from bench.soak_slow_body import run_slow_body

    summary = run_slow_body(f"http://{address[0]}:{address[1]}", connections=9, header_s=1, body_s=1, sources=3,
                            drip=0.3, slack=3.0, tokens=2)
    assert summary["closed_by_server_in_time"] == 9, summary
    assert summary["still_open_after_deadline"] == summary["closed_early"] == summary["closed_late"] == 0, summary
    assert summary["by_kind"]["body"]["answers"] == {"408": 3} and summary["by_kind"]["silent"]["answers"] == {"None": 3}
    assert summary["health_ms"]["n"] and not summary["num_health_failures"], summary
    assert summary["generation_s"]["n"] and not summary["num_generation_failures"], summary


def test_a_malformed_body_after_a_refused_request_gets_one_answer_and_no_traceback(address, guard, caplog):
    """A request the guard refuses at once (a Host not allowed) whose chunked body is malformed:
    uvicorn answers the bad bytes with a 400 while the refusal is on its way; the refusal is then
    dropped instead of raising h11's LocalProtocolError in the app (a logged traceback)."""
    sock = _connect(address)
    sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
    answer, _ = _read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1 ") == 1, answer
    time.sleep(0.5)  # NOTE: the refused handler runs after the 400 was written
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records]
