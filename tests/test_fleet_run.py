"""A compiled graph run with `sglc run --backend sglang` through the real sglang-router in front of
two real `sglc serve` workers (loopback): the same greedy outputs as one worker alone, every
request of one prefix group on one worker (cache_aware, read from the workers' /metrics), and a
worker killed mid-run loses nothing but the inputs it held, each with a clear error (or retried)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fleet_helpers import ROOT, FleetProcess, worker_metrics
from grpc_helpers import ServeProcess
from sglc.cli import main as sglc_main

pytestmark = pytest.mark.model

ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
PROGRAM = '''
import sglc as sgl

@sgl.function
def ask(s, context, question):
    s += context + "\\nQuestion: " + question + "\\nAnswer:"
    s += sgl.gen("answer", max_tokens=4, temperature=0, stop="\\n")
    s += "\\nIs the answer right? "
    s += sgl.select("verdict", choices=["yes", "no"])
    s += "\\nA three-digit code: " + sgl.gen("code", max_tokens=6, temperature=0, regex=r"[0-9]{3}")
'''
CONTEXTS = {
    "france": "Notes on France. " + " ".join(f"France fact {i}: Paris is the capital and the Seine runs "
                                               f"through it." for i in range(12)),
    "ocean": "Notes on oceans. " + " ".join(f"Ocean fact {i}: the Pacific is the largest and deepest ocean "
                                             f"on Earth." for i in range(12)),
}
QUESTIONS = ["What is the capital?", "Name a river.", "Which is largest?"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fleet_run")
    (folder / "ask.py").write_text(PROGRAM)
    assert sglc_main(["compile", str(folder / "ask.py"), "-o", str(folder / "ask.pb")]) == 0
    return folder / "ask.pb"


@pytest.fixture(scope="module")
def fleet():
    # NOTE: health checks every second, so the router notices a dead or restarted worker quickly
    with FleetProcess("--router-arg=--health-check-interval-secs", "--router-arg=1", dp=2) as f:
        yield f


def write_inputs(path: Path, group: str) -> Path:
    path.write_text("".join(json.dumps({"context": CONTEXTS[group], "question": q}) + "\n" for q in QUESTIONS))
    return path


def sglc_run(graph: Path, endpoint: str, inputs: Path, output: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sglc.cli", "run", str(graph), "--backend", "sglang",
                             "--endpoint", endpoint, "--input", str(inputs), "--output", str(output),
                             "--no-progress", *extra],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_ok(*args) -> list[dict]:
    proc = sglc_run(*args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in args[3].read_text().splitlines()]


def requests_per_worker(fleet) -> list[float]:
    return [worker_metrics(url)["num_requests"] for url, _, _ in fleet.workers]


def precomputes(fleet) -> int:
    return sum(worker_metrics(url)["precomputes"] for url, _, _ in fleet.workers)


def test_router_gives_single_worker_outputs_and_keeps_each_prefix_group_on_one_worker(fleet, graph, tmp_path):
    """Greedy outputs through the router equal one worker's; every request of a group (sharing a long
    context) lands on one worker, and the select and the regex gen obey their constraints."""
    single_worker = fleet.workers[0][0]
    for group in CONTEXTS:
        inputs = write_inputs(tmp_path / f"{group}.jsonl", group)
        alone = run_ok(graph, single_worker, inputs, tmp_path / f"{group}.alone.jsonl", "--concurrency", "1")
        before, precomputed = requests_per_worker(fleet), precomputes(fleet)
        routed = run_ok(graph, fleet.url, inputs, tmp_path / f"{group}.routed.jsonl", "--concurrency", "1")
        delta = [b - a for a, b in zip(before, requests_per_worker(fleet))]
        # NOTE: the gen "answer" is followed by constant text: its hint's continuation, in the rid
        assert precomputes(fleet) > precomputed, "no precompute behind the router"
        assert [r["variables"] for r in routed] == [r["variables"] for r in alone]
        for r in routed:
            assert r["variables"]["verdict"] in ("yes", "no")
            assert re.fullmatch(r"[0-9]{3}", r["variables"]["code"]), r["variables"]["code"]
        assert sorted(delta)[0] == 0 and sorted(delta)[1] > 0, f"group {group} spread over workers: {delta}"
    calls = [c for r in routed for c in r.get("calls", [])]
    assert calls and any(c.get("cached_tokens", 0) > 0 for c in calls), "no cached tokens in the results' metadata"


def test_streaming_through_the_router_equals_the_plain_answer(fleet):
    """generate_stream through the router (SSE passed on by it) joins to the non-streamed greedy text."""
    from sglc.wire.backend import GenParams, Prompt
    from sglc.executor.backends.sglang_http import SGLangBackend

    backend = SGLangBackend(fleet.url, timeout=120)
    try:
        params = GenParams(max_new_tokens=6, temperature=0)
        prompt = Prompt("The capital of France is Paris. The capital of Italy is")
        plain = backend.generate(prompt, params)
        pieces: list[str] = []
        streamed = backend.generate_stream(prompt, params, pieces.append)
        assert "".join(pieces) == streamed.text == plain.text and plain.text.strip()
        assert not backend.is_sglc, "behind the router the fsm extension must not be used"
    finally:
        backend.close()


def test_program_hints_reach_the_workers_through_the_router(fleet):
    """sglang-router drops ``program_hint``, so behind it the SGLang backend sends a hint in the
    request id and ends a program on every worker: the worker that ran a hinted call holds its text
    for the program (end_program releases it), the answer is the unhinted one, and an unhinted
    program releases nothing."""
    from sglc.executor.backends.sglang_http import SGLangBackend
    from sglc.wire.backend import GenParams, Prompt
    from sglc.wire.program_hint import ProgramHint

    backend = SGLangBackend(fleet.url)
    try:
        assert not backend.is_sglc
        assert sorted(backend.sglc_workers) == sorted(url.rstrip("/") for url, _, _ in fleet.workers)
        params = GenParams(max_new_tokens=4, temperature=0.0)
        text = CONTEXTS["ocean"] + "\nQuestion: Which is largest?\nAnswer:"
        plain = backend.generate(Prompt(text), params)
        hinted = backend.generate(Prompt(text, hint=ProgramHint("fleet-prog", next_use=0, lease_ms=60_000)), params)
        assert hinted.text == plain.text
        assert backend.end_program("fleet-prog") > 0
        assert backend.end_program("fleet-prog") == 0  # already released
        assert backend.end_program("never-hinted") == 0
    finally:
        backend.close()
    assert SGLangBackend(fleet.workers[0][0]).sglc_workers == ()  # one server: its own program_hint field


def test_a_continuation_is_precomputed_behind_the_router(fleet):
    """The request id carries the hint's continuation through the router: the worker that ran the
    call prefills prompt + output + continuation, and the program's next call, which the router's
    cache_aware policy sends to the same worker, finds all but its last token cached."""
    from sglc.executor.backends.sglang_http import SGLangBackend
    from sglc.wire.backend import GenParams, Prompt
    from sglc.wire.program_hint import NEVER, ProgramHint

    def busy() -> bool:
        return any(worker_metrics(url)["precomputes_pending"] for url, _, _ in fleet.workers)

    backend = SGLangBackend(fleet.url)
    try:
        params = GenParams(max_new_tokens=4, temperature=0.0)
        text = CONTEXTS["france"] + "\nQuestion: Name a river.\nAnswer:"
        then = "\nIs the answer right? Think about the rivers of France / Europe first, then say yes or no:"
        before = precomputes(fleet)
        first = backend.generate(Prompt(text, hint=ProgramHint("fleet-cont", 0, 60_000, continuation=then)), params)
        deadline = time.monotonic() + 60  # NOTE: counted when held; then wait until it has run
        while (precomputes(fleet) == before or busy()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert precomputes(fleet) == before + 1 and not busy()
        nxt = backend.generate(Prompt(text + first.text + then, hint=ProgramHint("fleet-cont", NEVER)), params)
        assert nxt.meta.cached_tokens == nxt.meta.prompt_tokens - 1, nxt.meta
        assert backend.end_program("fleet-cont") > 0
    finally:
        backend.close()


def test_a_killed_worker_loses_only_its_inputs_with_a_clear_error(fleet, graph, tmp_path):
    """Kill one worker mid-run: every input either has the single-worker answer (it ran on the live
    worker, or was retried before any token came back) or a per-input error naming the failed call;
    the run finishes, and later inputs still go to the live worker. (Runs last: it kills a worker.)"""
    lines = [json.dumps({"context": CONTEXTS[g] + f" Variant {i}.", "question": q})
             for i in range(3) for g in CONTEXTS for q in QUESTIONS[:2]]
    inputs = tmp_path / "many.jsonl"
    inputs.write_text("\n".join(lines) + "\n")
    reference = run_ok(graph, fleet.workers[0][0], inputs, tmp_path / "reference.jsonl", "--concurrency", "4")
    out = tmp_path / "killed.jsonl"
    before = requests_per_worker(fleet)
    t0 = time.monotonic()
    proc = sglc_run(graph, fleet.url, inputs, out, "--concurrency", "4")
    busy: list[int] = []
    while not busy and proc.poll() is None and time.monotonic() - t0 < 120:  # kill a worker that has work
        time.sleep(0.5)
        busy = [i for i, (a, b) in enumerate(zip(before, requests_per_worker(fleet))) if b > a]
    assert busy and proc.poll() is None, "the run ended before any worker could be killed"
    fleet.killed = busy[0]
    os.kill(fleet.workers[busy[0]][2], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == len(lines), err
    failed = [r for r in results if r.get("error")]
    print(f"worker killed mid-run: {len(failed)} of {len(lines)} inputs failed; run took {time.monotonic() - t0:.1f} s; "
          f"first error: {failed[0]['error'] if failed else None}")
    for r, ref in zip(results, reference):
        if not r.get("error"):
            assert r["variables"] == ref["variables"]
        else:
            assert "sglang backend" in r["error"] and "failed" in r["error"], r["error"]
    assert proc.returncode == (1 if failed else 0), err
    assert len(failed) < len(lines), "every input failed: the live worker took nothing"
    # the router stops sending to the dead worker: a new run succeeds entirely on the live one
    again = run_ok(graph, fleet.url, write_inputs(tmp_path / "again.jsonl", "france"), tmp_path / "again.out.jsonl")
    assert len(again) == len(QUESTIONS) and not any(r.get("error") for r in again)


def test_a_restarted_worker_rejoins(fleet, graph, tmp_path):
    """After the kill above, a new `sglc serve` on the dead worker's HTTP port is healthy again in the
    router's worker list and takes requests (router health checks every second; the fleet shortens the
    router's circuit-breaker timeout, which the failed requests on the killed worker opened). Runs last."""
    url = fleet.workers[fleet.killed][0]
    port = url.rsplit(":", 1)[1]
    with ServeProcess("--http-port", port) as revived:
        deadline = time.monotonic() + 60
        while True:
            listed = json.loads(urllib.request.urlopen(f"{fleet.url}/workers", timeout=10).read())["workers"]
            if any(w["url"] == url and w.get("is_healthy") for w in listed):
                break
            assert time.monotonic() < deadline, f"the restarted worker is not healthy in the router: {listed}"
            time.sleep(0.5)
        for i in range(8):  # distinct texts: cache_aware sends an unmatched prefix to the smaller tree
            body = {"text": f"{i} Fresh document number {i * 7919}: " + f"w{i} " * (30 + i),
                    "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
            request = urllib.request.Request(f"{fleet.url}/generate", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=120).read()
        listed = json.loads(urllib.request.urlopen(f"{fleet.url}/workers", timeout=10).read())["workers"]
        assert worker_metrics(url)["num_requests"] > 0, f"the restarted worker took no request: {listed}"
        revived.kill()

