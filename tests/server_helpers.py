"""Helpers for the server hardening tests: an in-process runtime with HTTP and gRPC on loopback,
raw HTTP calls (any method, headers and bytes), streams the client abandons, and waiting until
the server has no call in flight."""
from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import grpc

from sglc.wire.proto import runtime_pb2 as pb

GREEDY_PROMPT = "The capital of France is"


def http_base(runtime: Any) -> str:
    (http,) = [f for f in runtime.frontends if f.kind == "http"]
    return f"http://{http.address}"


def grpc_address(runtime: Any) -> str:
    return runtime.frontends[0].address


def call(base: str, method: str, path: str, body: bytes | dict | None = None,
         headers: dict[str, str] | None = None, timeout: float = 120.0) -> tuple[int, bytes]:
    """One HTTP request; (status, body bytes). A dict body is sent as application/json."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = dict(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post_json(base: str, path: str, body: bytes | dict, headers: dict[str, str] | None = None,
              timeout: float = 120.0) -> tuple[int, Any]:
    """POST with ``Content-Type: application/json``; (status, parsed JSON body)."""
    status, data = call(base, "POST", path, body, {"Content-Type": "application/json", **(headers or {})}, timeout)
    return status, json.loads(data) if data else None


def raw_exchange(base: str, request: bytes, timeout: float = 60.0) -> bytes:
    """Send raw bytes on a fresh connection and read until the server closes or times out."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not data:
                break
            chunks.append(data)
            if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                break
        return b"".join(chunks)


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return False


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def open_then_abandon(base: str, path: str, body: dict, *, stream: bool, until: Any,
                      timeout: float = 60.0) -> bytes:
    """Send a request, wait until `until()` is true (e.g. the server runs its requests) and, for a
    stream, its first event arrived; then drop the connection. Returns what was read."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    data = json.dumps(body).encode()
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + f"{host}:{port}".encode()
                 + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode()
                 + b"\r\n\r\n" + data)
    got = b""
    deadline = time.monotonic() + timeout
    try:
        if stream:
            while b"data: " not in got:
                chunk = sock.recv(65536)
                assert chunk, f"the server closed the stream before its first event: {got[:300]!r}"
                got += chunk
        while not until():
            assert time.monotonic() < deadline, "the server never started the requests"
            time.sleep(0.01)
    finally:
        sock.close()
    return got


def wait_idle(runtime: Any, timeout: float = 30.0) -> float:
    """Seconds until the service has no call in flight and the engine runs nothing (AssertionError
    after `timeout`)."""
    t0 = time.monotonic()
    while True:
        stats = runtime.engine.stats()
        if runtime.service.num_active == 0 and stats.num_running == 0 and stats.num_waiting == 0:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, (
            f"still busy after {timeout} s: {runtime.service.num_active} calls active, "
            f"{stats.num_running} running, {stats.num_waiting} waiting")
        time.sleep(0.02)


def greedy_completion(base: str, headers: dict[str, str] | None = None) -> str:
    """The server's greedy 8-token completion of GREEDY_PROMPT (asserts a 200)."""
    status, out = post_json(base, "/v1/completions", {"prompt": GREEDY_PROMPT, "max_tokens": 8, "temperature": 0},
                            headers)
    assert status == 200, out
    return out["choices"][0]["text"]


def greedy_grpc(stub: Any, metadata: Any = None) -> str:
    """The server's greedy 8-token completion of GREEDY_PROMPT over gRPC."""
    request = pb.GenerateRequest(prompt=pb.Prompt(text=GREEDY_PROMPT),
                                 sampling=pb.SamplingParams(max_new_tokens=8, temperature=0.0))
    (last,) = [m for m in stub.Generate(request, timeout=120, metadata=metadata) if m.WhichOneof("response")]
    assert last.WhichOneof("response") == "complete", last
    return last.complete.text


def rpc_error(fn: Any) -> grpc.RpcError:
    """The RpcError `fn()` raises (AssertionError when it succeeds)."""
    try:
        result = fn()
        if hasattr(result, "__iter__") and not hasattr(result, "SerializeToString"):
            list(result)
    except grpc.RpcError as err:
        return err
    raise AssertionError("the call succeeded")


def assert_fuzzing_leaves_it_serving(runtime: Any, *, seed: int, seconds: float, hang_s: float) -> None:
    """Fuzz ``runtime`` over HTTP and gRPC (bench/server_fuzz.py): every request gets a 4xx /
    non-internal status or a normal answer, promptly; nothing logs a traceback; afterwards the same
    greedy answers as before and no call in flight. The engine's own state is the caller's to check."""
    from bench.server_fuzz import LogWatch, run_fuzz
    from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

    base = http_base(runtime)
    channel = grpc.insecure_channel(grpc_address(runtime))
    stub = pb_grpc.RuntimeStub(channel)
    before_http, before_grpc = greedy_completion(base), greedy_grpc(stub)
    with LogWatch() as watch:
        tally = run_fuzz(base, grpc_address(runtime), seconds=seconds, seed=seed, workers=4, timeout=hang_s)
        wait_idle(runtime, timeout=60)
    summary = tally.summary()
    print(f"\nfuzz: {summary['requests']} requests, {summary['clean_errors']} clean errors, "
          f"{summary['server_errors']} server errors, {summary['tracebacks']} tracebacks, {summary['hangs']} hangs, "
          f"{len(watch.tracebacks)} logged tracebacks; statuses {summary['statuses']}")
    assert tally.requests >= 50, summary
    assert not tally.server_errors, tally.server_errors[:5]
    assert not tally.tracebacks, tally.tracebacks[:5]
    assert not tally.hangs, tally.hangs[:5]
    assert not watch.tracebacks, watch.tracebacks[:5]
    kinds = set(summary["statuses"])
    assert {"http 200", "http 400", "grpc OK", "grpc INVALID_ARGUMENT"} <= kinds, kinds  # both ends reached
    assert greedy_completion(base) == before_http and greedy_grpc(stub) == before_grpc
    channel.close()
    wait_idle(runtime, timeout=30)
    assert runtime.service.num_active == 0
