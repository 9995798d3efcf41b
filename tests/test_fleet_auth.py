"""`sglc fleet` with an API key closes both directions: the real sglang-router (0.3.2) answers 401 to
a client without the key and forwards a keyed one to a worker (adding the key), the workers refuse
keyless direct calls (HTTP and gRPC), and the router's health checks of the workers keep working
(/health is open). The key reaches no command line. Which router routes still answer without the
key is pinned here: none of them starts a generation (docs/fleet.md lists them).

One fleet of one real `sglc serve` worker, its key from $SGLC_API_KEY as `sglc serve` takes it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import sglang

from fleet_helpers import ROOT, FleetProcess, worker_metrics
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

pytestmark = pytest.mark.model

KEY = "sk-sglc-fleet-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
GENERATE = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
#: The router's routes that answer a keyless GET (sglang-router 0.3.2): its own health and state, the
#: model list from its registry, and /engine_metrics, which fetches every worker's /metrics with the
#: router's key (the one thing a keyless client reads from a worker; counters, no prompts).
ROUTER_OPEN = {"/health", "/liveness", "/readiness", "/health_generate", "/get_server_info", "/v1/models",
               "/engine_metrics"}
#: Router routes that reach a worker (or change state): each refuses a keyless client.
ROUTER_CLOSED = [("POST", "/generate"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
                 ("POST", "/flush_cache"), ("GET", "/get_model_info"), ("GET", "/workers"), ("GET", "/get_loads")]


@pytest.fixture(scope="module")
def fleet():
    with FleetProcess(dp=1, env={"SGLC_API_KEY": KEY}) as f:
        yield f


def request(url: str, method: str = "GET", body: dict | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={**({"Content-Type": "application/json"} if data else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def served(fleet) -> float:
    return sum(worker_metrics(url, api_key=KEY)["num_requests"] for url, _, _ in fleet.workers)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}], ids=["none", "wrong"])
def test_the_router_refuses_a_client_without_the_key(fleet, headers):
    """Every router route that reaches a worker answers 401 without the key, and no worker ran anything."""
    before = served(fleet)
    for method, path in ROUTER_CLOSED:
        status, body = request(fleet.url + path, method, GENERATE if method == "POST" else None, headers)
        assert status == 401, (method, path, status, body[:200])
    assert served(fleet) == before


def test_a_keyed_client_is_answered_through_the_router_by_a_worker(fleet):
    """With the key, /generate at the router is answered by the worker (the router adds the key)."""
    before = served(fleet)
    status, body = request(f"{fleet.url}/generate", "POST", GENERATE, AUTH)
    assert status == 200, body[:300]
    assert json.loads(body)["meta_info"]["completion_tokens"] == 3
    assert served(fleet) == before + 1


def test_sglangs_own_client_with_the_key_runs_a_program_through_the_router(fleet):
    """SGLang's RuntimeEndpoint(api_key=KEY) runs a gen through the router; without the key it cannot
    even connect (its /get_model_info is refused)."""
    @sglang.function
    def prog(s):
        s += "The capital of France is"
        s += sglang.gen("answer", max_tokens=3, temperature=0)

    state = prog.run(backend=sglang.RuntimeEndpoint(fleet.url, api_key=KEY))
    assert state["answer"].strip()
    with pytest.raises(Exception, match="API key"):
        sglang.RuntimeEndpoint(fleet.url)


def test_the_workers_refuse_keyless_direct_calls_but_health_stays_open(fleet):
    """A worker's HTTP /generate is 401 and its gRPC Generate UNAUTHENTICATED without the key; its
    /health (what the router's health checks hit) answers 200."""
    for url, grpc_address, _ in fleet.workers:
        assert request(f"{url}/generate", "POST", GENERATE)[0] == 401
        assert request(f"{url}/health")[0] == 200
        with grpc.insecure_channel(grpc_address) as channel:
            stub = pb_grpc.RuntimeStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                list(stub.Generate(pb.GenerateRequest(prompt=pb.Prompt(text="x")), timeout=60))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_what_the_router_answers_without_the_key_starts_no_generation(fleet):
    """The router's keyless routes are exactly ROUTER_OPEN, and calling them runs nothing on a worker."""
    before = served(fleet)
    opened = {path for path in ROUTER_OPEN | {p for _, p in ROUTER_CLOSED}
              if request(fleet.url + path)[0] == 200}
    assert opened == ROUTER_OPEN
    assert served(fleet) == before


def test_the_key_is_on_no_command_line_of_the_router_or_the_workers(fleet):
    """The key reaches the router and workers through the environment: `ps` shows it nowhere."""
    for pid in fleet.pids():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert KEY.encode() not in cmdline, pid


def test_a_malformed_key_is_a_usage_error_before_anything_starts():
    """`sglc fleet --api-key 'a b'` starts nothing and says what a key must be."""
    proc = subprocess.run([sys.executable, "-m", "sglc.cli", "fleet", "--dp", "1", "--api-key", "a b"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "API key" in proc.stderr and proc.stdout == ""
