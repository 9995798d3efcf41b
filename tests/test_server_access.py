"""Who may drive the server and whether it stays available: the API key (HTTP, gRPC, the srt
backend, the openai client, `sglc run`), JSON-only bodies, same-origin, POST-only state changes,
and /health + /metrics answering while generation saturates the server.

One in-process runtime on the real default model started with an API key (HTTP + gRPC on loopback).
"""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import grpc
import openai
import pytest

from grpc_helpers import runtime_fixture

from server_helpers import (GREEDY_PROMPT, call, greedy_completion, greedy_grpc, grpc_address, http_base, post_json,
                            rpc_error, wait_idle)
from sglc.cli import main
from sglc.executor.backends.srt import SrtBackend
from sglc.wire.backend import GenParams, Prompt
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-sglc-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
GRPC_AUTH = (("authorization", f"Bearer {KEY}"),)


runtime = runtime_fixture(8192, http_port=0, api_key=KEY)


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


@pytest.fixture(scope="module")
def stub(runtime):
    channel = grpc.insecure_channel(grpc_address(runtime))
    yield pb_grpc.RuntimeStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def greedy(base) -> str:
    return greedy_completion(base, AUTH)


# ----- the API key -----
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}],
                         ids=["none", "wrong", "no-scheme"])
def test_http_without_the_key_is_401_in_openai_shape(base, headers):
    """Every endpoint but /health answers 401 {"error": {...}} without ``Authorization: Bearer KEY``."""
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/metrics"),
                         ("POST", "/flush_cache"), ("GET", "/get_model_info")):
        status, data = call(base, method, path, {"prompt": "x"} if method == "POST" else None, headers)
        assert status == 401, (path, data)
        error = json.loads(data)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["code"] == "invalid_api_key"


def test_health_stays_open_without_the_key(base):
    """/health needs no key (load balancers and probes carry none)."""
    status, data = call(base, "GET", "/health")
    assert status == 200 and json.loads(data)["status"] == "serving"


def test_the_openai_client_with_the_key_works_and_a_wrong_key_is_an_authentication_error(base, greedy):
    """The real openai client: the right key gets the greedy answer, a wrong one AuthenticationError."""
    good = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    r = good.completions.create(model="default", prompt=GREEDY_PROMPT, max_tokens=8, temperature=0)
    assert r.choices[0].text == greedy
    bad = openai.OpenAI(base_url=base + "/v1", api_key="sk-wrong", max_retries=0, timeout=120)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="default", prompt="x", max_tokens=1)


def test_grpc_without_the_key_is_unauthenticated_but_health_is_open(stub, greedy):
    """Every RPC but Health needs the metadata ``authorization: Bearer KEY``."""
    for metadata in (None, (("authorization", "Bearer wrong"),)):
        err = rpc_error(lambda: stub.ModelInfo(pb.ModelInfoRequest(), timeout=30, metadata=metadata))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "API key" in err.details()
        err = rpc_error(lambda: stub.Generate(pb.GenerateRequest(prompt=pb.Prompt(text="x")), timeout=30,
                                              metadata=metadata))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stub.Health(pb.HealthRequest(), timeout=30).status == pb.HealthResponse.SERVING
    assert greedy_grpc(stub, GRPC_AUTH) == greedy


def test_the_srt_backend_sends_the_key_from_its_argument_or_the_environment(runtime, greedy, monkeypatch):
    """SrtBackend(api_key=KEY) and $SGLC_API_KEY both authenticate; without a key calls fail."""
    params = GenParams(max_new_tokens=8, temperature=0)
    with SrtBackend(grpc_address(runtime), api_key=KEY) as backend:
        assert backend.generate(Prompt(GREEDY_PROMPT), params).text == greedy
    monkeypatch.setenv("SGLC_API_KEY", KEY)
    with SrtBackend(grpc_address(runtime)) as backend:
        assert backend.generate(Prompt(GREEDY_PROMPT), params).text == greedy
    monkeypatch.delenv("SGLC_API_KEY")
    with SrtBackend(grpc_address(runtime)) as backend:
        with pytest.raises(Exception, match="UNAUTHENTICATED"):
            backend.generate(Prompt(GREEDY_PROMPT), params)


def test_sglc_run_api_key_reaches_the_server(runtime, tmp_path, capsys, monkeypatch):
    """`sglc run --backend srt --api-key KEY` runs a sample against the keyed server; without it, it fails."""
    monkeypatch.delenv("SGLC_API_KEY", raising=False)
    graph = tmp_path / "few_shot_qa.pb"
    assert main(["compile", str(ROOT / "samples" / "few_shot_qa.py"), "-o", str(graph)]) == 0
    args = ROOT / "samples" / "few_shot_qa.args.jsonl"
    out = tmp_path / "out.jsonl"
    common = ["run", str(graph), "--backend", "srt", "--endpoint", grpc_address(runtime), "--input", str(args),
              "--output", str(out), "--no-progress"]
    assert main(common + ["--api-key", KEY]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 3 and all(r.get("error") is None for r in results), results
    capsys.readouterr()
    assert main(common) != 0
    assert "UNAUTHENTICATED" in capsys.readouterr().err + out.read_text()


# ----- content type, origin, methods -----
def test_json_endpoints_need_application_json(base):
    """A text/plain (or form) POST, what a web page may send without a CORS preflight, is 415."""
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, data = call(base, "POST", "/v1/completions", body, {"Content-Type": ctype, **AUTH})
        assert status == 415 and "application/json" in json.loads(data)["error"]["message"], data
    status, _ = call(base, "POST", "/generate", b'{"text": "x"}', AUTH)  # no content type at all
    assert status == 415


def test_a_foreign_origin_is_refused(base, runtime):
    """A request a page on another site sends (Origin: that site) is 403, whatever it carries."""
    headers = {"Origin": "http://evil.example", "Content-Type": "text/plain", **AUTH}
    status, data = call(base, "POST", "/flush_cache", b"", headers)
    assert status == 403 and "cross-origin" in json.loads(data)["error"]["message"]
    status, _ = call(base, "POST", "/v1/completions", b'{"prompt": "x"}', headers)
    assert status == 403


def test_state_changing_endpoints_are_post_only(base):
    """GET /flush_cache is 405 (a link or an <img> cannot flush); POST works."""
    status, data = call(base, "GET", "/flush_cache", None, AUTH)
    assert status == 405 and "error" in json.loads(data)
    status, data = call(base, "POST", "/flush_cache", b"", AUTH)
    assert status in (200, 409) and "flushed" in json.loads(data)


# ----- availability -----
def _hold(base: str, body: dict) -> socket.socket:
    """Send a completion request and keep the connection open without reading."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                 f"Authorization: Bearer {KEY}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_health_and_metrics_answer_within_a_second_while_generation_is_saturated(runtime, base):
    """With 56 long generations in flight (more than the thread pool has threads), /health and
    /metrics each answer in under a second; dropping the 56 connections then cancels them all."""
    wait_idle(runtime)
    n = 56
    sockets = [_hold(base, {"prompt": f"Story {i}:", "max_tokens": 300, "ignore_eos": True}) for i in range(n)]
    try:
        deadline = time.monotonic() + 120
        while runtime.service.num_active < n:
            assert time.monotonic() < deadline, f"only {runtime.service.num_active} of {n} requests started"
            time.sleep(0.05)
        latencies = {"/health": [], "/metrics": []}
        for _ in range(5):
            for path in latencies:
                t0 = time.monotonic()
                status, data = call(base, "GET", path, None, AUTH, timeout=30)
                latencies[path].append(time.monotonic() - t0)
                assert status == 200, data
            time.sleep(0.2)
        assert runtime.service.num_active == n, "the generations ended before the measurement did"
        print(f"\nunder {n} concurrent generations: " + ", ".join(
            f"{p} max {max(v) * 1000:.0f} ms" for p, v in latencies.items()))
        for path, values in latencies.items():
            assert max(values) < 1.0, (path, values)
    finally:
        for sock in sockets:
            sock.close()
    wait_idle(runtime, timeout=30)
