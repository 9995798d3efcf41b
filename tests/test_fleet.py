"""`sglc fleet`: the real sglang-router in front of real `sglc serve` workers on loopback. It
starts, registers every worker, forwards /generate, and stops every process it started on
SIGTERM or when it is killed (no orphans)."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from fleet_helpers import ROOT, FleetProcess, alive, wait_gone, worker_metrics

pytestmark = pytest.mark.model

#: sglang-router 0.3.2's Prometheus exporter port when none is given.
ROUTER_DEFAULT_METRICS_PORT = 29000


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_fleet_serves_through_the_router_and_leaves_no_process_behind(sig):
    """Two workers behind the router answer /generate at the router's URL; SIGTERM stops the
    router and both workers (exit 0), and SIGKILL of the fleet process still takes them down. The
    router's default metrics port is held meanwhile (as by another router on the machine): the
    fleet's router takes a free one instead of panicking."""
    fleet = FleetProcess(dp=2)
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", ROUTER_DEFAULT_METRICS_PORT))
        held.listen()
    except OSError:
        pass  # NOTE: already taken by someone else: the case under test all the same
    try:
        fleet.start()
        listed = json.loads(urllib.request.urlopen(f"{fleet.url}/workers", timeout=10).read())
        assert {w["url"] for w in listed["workers"]} == {url for url, _, _ in fleet.workers}
        answer = post(f"{fleet.url}/generate", {"text": "The capital of France is",
                                                  "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
        assert answer["meta_info"]["completion_tokens"] == 3
        served = sum(worker_metrics(url)["num_requests"] for url, _, _ in fleet.workers)
        assert served == 1
        pids = fleet.pids()
        assert all(alive(p) for p in pids)
        code = fleet.stop(sig)
        assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
        assert wait_gone(pids) == [], "processes left running after the fleet stopped"
        if sig == signal.SIGTERM:
            log = "".join(fleet.stderr)
            assert "sglc fleet: stopped" in log
            # NOTE: the router reads the model's local tokenizer; a hub lookup would need the network
            assert not [line for line in fleet.stderr if "tokenizer" in line.lower()], log
    finally:
        fleet.kill_everything()
        held.close()


def test_missing_router_is_a_one_line_error_naming_the_extra():
    """Without sglang-router installed, `sglc fleet` starts nothing and says which extra to install."""
    code = ("import sys; sys.modules['sglang_router'] = None\n"
            "from sglc.cli import main; sys.exit(main(['fleet', '--dp', '1']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "sglang_router is not installed: pip install 'sglc[fleet]'" in proc.stderr
    assert "worker" not in proc.stderr and proc.stdout == ""
