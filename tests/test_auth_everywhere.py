"""With an API key, nothing that can start work is open: every gRPC method of the service
descriptor and every HTTP route of the app is enumerated (so a new endpoint cannot be added open
by accident) and called without the key. Only the plain health check answers; a generation check
(gRPC ``Health(check_generate=true)``, HTTP /health_generate) needs the key like a generation.

One in-process runtime on the real default model with a key (HTTP + gRPC on loopback).
"""
from __future__ import annotations

import grpc
import pytest

from grpc_helpers import runtime_fixture
from server_helpers import call, grpc_address, http_base, rpc_error
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc_runtime.server.http_server import build_app

pytestmark = pytest.mark.model

KEY = "sk-sglc-auth-everywhere"
GRPC_AUTH = (("authorization", f"Bearer {KEY}"),)
#: What answers without the key. Adding to it is a decision, never an accident: this test names it.
OPEN_HTTP = {("GET", "/health")}

runtime = runtime_fixture(4096, http_port=0, api_key=KEY)


@pytest.fixture(scope="module")
def stub(runtime):
    channel = grpc.insecure_channel(grpc_address(runtime))
    yield pb_grpc.RuntimeStub(channel)
    channel.close()


def keyless_grpc_calls() -> list[tuple[str, object]]:
    """(method name, request) for every method of the Runtime service, with a request that would
    start work where the method can (a prompt, a generation check)."""
    requests = {"Generate": pb.GenerateRequest(prompt=pb.Prompt(text="x"), sampling=pb.SamplingParams(max_new_tokens=1)),
                "Score": pb.ScoreRequest(prompt=pb.Prompt(text="x"), choices=["a", "b"]),
                "CachePrefix": pb.CachePrefixRequest(prompt=pb.Prompt(text="x")),
                "Health": pb.HealthRequest(check_generate=True)}
    service = pb.DESCRIPTOR.services_by_name["Runtime"]
    return [(m.name, requests.get(m.name) or getattr(pb, m.input_type.name)()) for m in service.methods]


@pytest.mark.parametrize("metadata", [None, (("authorization", "Bearer wrong"),)], ids=["none", "wrong"])
def test_every_grpc_method_refuses_a_call_without_the_key(runtime, stub, metadata):
    """Each method of the service descriptor, Health(check_generate=true) included, is
    UNAUTHENTICATED without the key, and none of them reached the engine."""
    before = runtime.service.metrics()["num_requests"]
    for name, request in keyless_grpc_calls():
        err = rpc_error(lambda: getattr(stub, name)(request, timeout=60, metadata=metadata))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (name, err.code(), err.details())
        assert "authorization: Bearer KEY" in err.details(), (name, err.details())
    assert runtime.service.metrics()["num_requests"] == before


def test_grpc_health_is_open_only_for_the_plain_check(stub):
    """A plain Health needs no key (probes carry none); check_generate=true runs a generation and
    needs it, and with the key it answers SERVING."""
    assert stub.Health(pb.HealthRequest(), timeout=30).status == pb.HealthResponse.SERVING
    err = rpc_error(lambda: stub.Health(pb.HealthRequest(check_generate=True), timeout=30))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "generation" in err.details()
    keyed = stub.Health(pb.HealthRequest(check_generate=True), timeout=120, metadata=GRPC_AUTH)
    assert keyed.status == pb.HealthResponse.SERVING


def test_a_malformed_health_request_without_the_key_is_refused_not_parsed_open(runtime):
    """Bytes that do not parse as a HealthRequest are refused (UNAUTHENTICATED), not let through."""
    channel = grpc.insecure_channel(grpc_address(runtime))
    try:
        health = channel.unary_unary("/sglc.runtime.Runtime/Health", request_serializer=lambda b: b,
                                     response_deserializer=pb.HealthResponse.FromString)
        err = rpc_error(lambda: health(b"\xff\xff\xff", timeout=30))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()


def http_routes(runtime) -> list[tuple[str, str]]:
    """(method, path) of every route the HTTP app serves (the app as the server builds it)."""
    app = build_app(runtime.service, api_key=KEY)
    return sorted((method, route.path) for route in app.routes for method in getattr(route, "methods", ()) or ()
                  if method != "HEAD")


def test_the_enumeration_sees_the_generation_routes(runtime):
    """The route list really is the app's (a guard against enumerating nothing)."""
    routes = set(http_routes(runtime))
    assert {("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("POST", "/generate"),
            ("GET", "/health_generate"), ("GET", "/health")} <= routes


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}], ids=["none", "wrong"])
def test_every_http_route_but_health_answers_401_without_the_key(runtime, headers):
    """Every route of the app, /health_generate included, answers 401 without the key; only the
    routes in OPEN_HTTP answer, and no request reached the engine."""
    base = http_base(runtime)
    before = runtime.service.metrics()["num_requests"]
    opened = set()
    for method, path in http_routes(runtime):
        body = {"prompt": "x", "text": "x", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1} \
            if method == "POST" else None
        status, data = call(base, method, path, body, headers)
        if status != 401:
            opened.add((method, path))
    assert opened == OPEN_HTTP
    assert runtime.service.metrics()["num_requests"] == before


def test_http_health_generate_runs_with_the_key(runtime):
    """/health_generate with the key runs its one-token generation and answers 200."""
    status, _ = call(http_base(runtime), "GET", "/health_generate", None, {"Authorization": f"Bearer {KEY}"})
    assert status == 200
