"""End to end: `sglc compile` every sample, `sglc run --backend srt` it against ONE `sglc serve`
subprocess on loopback, and check every output line; then kill a server mid-batch.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpc_helpers import ROOT, ServeProcess
from sglc.cli import main as sglc_main

pytestmark = pytest.mark.model

SAMPLES = {  # sample -> compile target (call_other_program holds two programs)
    "call_other_program": "samples/call_other_program.py:research_brief",
    "essay_judge": "samples/essay_judge.py",
    "few_shot_qa": "samples/few_shot_qa.py",
    "json_extraction": "samples/json_extraction.py",
    "multi_turn_chat": "samples/multi_turn_chat.py",
    "react_agent": "samples/react_agent.py",
    "tree_of_thought": "samples/tree_of_thought.py",
}
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def sample_module(name: str):
    spec = importlib.util.spec_from_file_location(f"_sample_{name}", ROOT / "samples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sglc_run(graph: Path, endpoint: str, inputs: Path, output: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sglc.cli", "run", str(graph), "--backend", "srt",
                             "--endpoint", endpoint, "--input", str(inputs), "--output", str(output),
                             "--no-progress", *extra],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_constraints(name: str, variables: dict) -> None:
    """The constrained variables of each sample have the shape their regex/choices demand."""
    if name == "essay_judge":
        assert variables["related"] in ("yes", "no")
        if variables["related"] == "yes":
            assert re.fullmatch(sample_module(name).VERDICT_REGEX, variables["verdict"]), variables["verdict"]
    elif name == "json_extraction":
        assert re.fullmatch(sample_module(name).PERSON_REGEX, variables["record"]), variables["record"]
    elif name == "react_agent":
        assert variables["action"] in sample_module(name).ACTIONS
        if "expression" in variables:
            assert re.fullmatch(r"[0-9+\-*/(). ]{1,40}", variables["expression"])
    elif name == "tree_of_thought":
        assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", variables["answer"]), variables["answer"]


def test_every_sample_runs_against_sglc_serve(tmp_path):
    """Each sample, compiled by `sglc compile` and run by `sglc run --backend srt --endpoint` against one
    `sglc serve`, exits 0 with one result per input, in order, with no error, the input's arguments,
    its variables (constraints respected), text and per-call metadata; the server reuses cached prefixes."""
    graphs = {}
    for name, target in SAMPLES.items():
        graphs[name] = tmp_path / f"{name}.pb"
        assert sglc_main(["compile", str(ROOT / target), "-o", str(graphs[name])]) == 0
    with ServeProcess("--kv-slots", "16384") as server:
        runs = {name: sglc_run(graphs[name], server.address, ROOT / "samples" / f"{name}.args.jsonl",
                               tmp_path / f"{name}.out.jsonl") for name in SAMPLES}
        outcomes = {name: (proc.wait(900), proc.communicate()[1]) for name, proc in runs.items()}
        from sglc.executor.backends.srt import SrtBackend

        with SrtBackend(server.address) as backend:
            metrics = backend.metrics()
    for name, (code, err) in outcomes.items():
        assert code == 0, f"{name}: exit {code}\n{err}"
        assert "Traceback" not in err, err
        inputs = read_jsonl(ROOT / "samples" / f"{name}.args.jsonl")
        results = read_jsonl(tmp_path / f"{name}.out.jsonl")
        assert len(results) == len(inputs), name
        for i, (args, res) in enumerate(zip(inputs, results)):
            assert res["index"] == i and res["error"] is None, (name, i, res.get("error"))
            assert res["arguments"] == args, (name, i)
            assert res["variables"] and all(v is not None for v in res["variables"].values()), (name, i)
            assert res["text"], (name, i)
            assert res["calls"] and all(c["prompt_tokens"] > 0 for c in res["calls"]), (name, i)
            check_constraints(name, res["variables"])
    assert metrics["cached_tokens"] > 0 and metrics["num_invalid"] == 0 and metrics["num_errors"] == 0


STORY = '''import sglc as sgl


@sgl.function
def story(s, topic):
    s += "Write a long story about " + topic + ".\\n"
    s += sgl.gen("story", max_tokens=96, ignore_eos=True, temperature=0)
'''


def test_killing_the_server_mid_batch_fails_the_rest_keeps_the_done_and_a_restart_serves(tmp_path):
    """SIGKILL of `sglc serve` while `sglc run` works through a batch: the run ends (no hang) with exit 1,
    keeps the finished results, gives each failed input a one-line error (also on stderr); `sglc run`
    against a server restarted on the same port then succeeds."""
    program = tmp_path / "story.py"
    program.write_text(STORY)
    graph = tmp_path / "story.pb"
    assert sglc_main(["compile", str(program), "-o", str(graph)]) == 0
    topics = ["a cat", "the sea", "a robot", "winter", "a castle", "the moon", "a train", "a garden"]
    inputs = tmp_path / "topics.jsonl"
    inputs.write_text("".join(json.dumps({"topic": t}) + "\n" for t in topics))
    out = tmp_path / "out.jsonl"

    server = ServeProcess().start()
    port = server.port
    try:
        run = sglc_run(graph, server.address, inputs, out, "--concurrency", "2")
        deadline = time.monotonic() + 600
        while not (out.exists() and len(out.read_text().splitlines()) >= 2):
            assert run.poll() is None, run.communicate()[1]
            assert time.monotonic() < deadline, "the first results never arrived"
            time.sleep(0.1)
        server.kill()
        code = run.wait(180)  # bounded: a hang fails here
        err = run.communicate()[1]
        assert code == 1, err
        results = read_jsonl(out)
        assert [r["index"] for r in results] == list(range(len(topics)))
        done = [r for r in results if r["error"] is None]
        failed = [r for r in results if r["error"] is not None]
        assert len(done) >= 2 and failed, [r["error"] for r in results]
        assert all(r["variables"]["story"] for r in done)
        for r in failed:
            assert "\n" not in r["error"] and "UNAVAILABLE" in r["error"], r["error"]
            assert re.search(rf"^sglc: input {r['index']} failed: .+$", err, re.MULTILINE), err
        assert "Traceback" not in err, err

        server = ServeProcess(port=port).start()
        again = tmp_path / "again.jsonl"
        inputs.write_text("".join(json.dumps({"topic": t}) + "\n" for t in topics[:2]))
        rerun = sglc_run(graph, server.address, inputs, again)
        assert rerun.wait(600) == 0, rerun.communicate()[1]
        assert [r["error"] for r in read_jsonl(again)] == [None, None]
    finally:
        server.kill()
