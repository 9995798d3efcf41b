"""Fuzzing graph.pb through the real CLI: every sample compiled by `sglc compile`, then mutated
(bit flips, cuts, inserted bytes, and decoded-damaged-resealed messages: see graph_pb_mutations).

Invariant: `sglc inspect` and `sglc run` never show a traceback and never hang on a mutant; each
either accepts it or ends with exit status 1/2 and one-line errors naming the problem. Seeded, so
a failure reproduces; the counts (files tried / clean errors / accepted / crashes) are printed.
The `sglc run` part runs against a real runtime (`sglc serve`'s server in-process on loopback,
default model) and is marked `model`.
"""
from __future__ import annotations

import contextlib
import io
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from graph_pb_helpers import parse, seal
from graph_pb_mutations import mutate
from grpc_helpers import runtime_fixture
from sglc.cli import main

ROOT = Path(__file__).resolve().parent.parent
SEED = 20240612
SAMPLES = ["essay_judge", "few_shot_qa", "tree_of_thought", "multi_turn_chat", "json_extraction", "react_agent",
           "call_other_program:research_brief"]
MUTANTS_PER_SAMPLE = 30
SUBPROCESS_MUTANTS = 8
RUN_MUTANTS = 16
#: Seconds one in-process `sglc inspect` may take before it counts as a hang.
HANG_S = 30
#: Seconds one `sglc run` subprocess may take before it counts as a hang; its inputs time out
#: (a clean per-input failure) after INPUT_TIMEOUT_S.
RUN_HANG_S = 180
INPUT_TIMEOUT_S = 30
#: Share of the run mutants that only move attributes to the edges of their valid ranges, so they
#: pass verify and reach the executor and the runtime (most other mutants are refused on load).
RUN_EDGE_SHARE = 0.5


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, bytes]:
    """Every sample compiled by the real `sglc compile`: name -> graph.pb bytes."""
    out = tmp_path_factory.mktemp("compiled")
    graphs = {}
    for target in SAMPLES:
        name = target.split(":")[0]
        program = f"samples/{name}.py" + (f":{target.split(':')[1]}" if ":" in target else "")
        path = out / f"{name}.pb"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["compile", str(ROOT / program), "-o", str(path)]) == 0
        graphs[name] = path.read_bytes()
    return graphs


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def classify(status, err: str, escaped: BaseException | None) -> str:
    """accepted | clean (exit 1/2, every error one line) | crash | hang."""
    if isinstance(escaped, Hang):
        return "hang"
    if escaped is not None or "Traceback" in err:
        return "crash"
    lines = err.strip().splitlines()
    if status == 0:
        return "accepted"
    if status == 2 and len(lines) == 1 and lines[0].startswith("sglc: error: ") and len(lines[0]) < 1000:
        return "clean"
    failed = [line for line in lines if line.startswith("sglc: input ")]
    if status == 1 and failed and all(" failed: " in line and len(line) < 2000 for line in failed):
        return "clean"
    return "crash"


def inspect_in_process(path: Path) -> tuple[str, str]:
    """Run `sglc inspect PATH` in this process; (classification, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    escaped: BaseException | None = None
    status = None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["inspect", str(path)])
    except BaseException as exc:  # noqa: BLE001 - anything escaping main() is a crash (or a hang)
        escaped = exc
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if escaped is not None and not isinstance(escaped, Hang):
        return "crash", f"{type(escaped).__name__}: {escaped}"
    return classify(status, err.getvalue(), escaped), err.getvalue()


def report(title: str, counts: Counter, problems: list[str]) -> str:
    tried = sum(counts.values())
    line = (f"{title}: {tried} files tried, {counts['clean']} clean errors, {counts['accepted']} accepted, "
            f"{counts['crash']} crashes, {counts['hang']} hangs")
    return line + "".join(f"\n  {p}" for p in problems[:10])


def test_sglc_inspect_gives_one_line_errors_on_mutated_graphs(compiled, tmp_path, capsys):
    """No mutant of a real graph makes `sglc inspect` print a traceback or hang; errors are one line."""
    rng = random.Random(SEED)
    counts: Counter = Counter()
    problems: list[str] = []
    by_kind: Counter = Counter()
    for name, data in compiled.items():
        for i in range(MUTANTS_PER_SAMPLE):
            what, mutant = mutate(data, rng)
            path = tmp_path / f"{name}_{i}.pb"
            path.write_bytes(mutant)
            verdict, err = inspect_in_process(path)
            counts[verdict] += 1
            by_kind[(what.split("+")[0], verdict)] += 1
            if verdict in ("crash", "hang"):
                problems.append(f"{name} #{i} ({what}): {verdict}: {err.strip()[-300:]}")
    with capsys.disabled():
        print("\n" + report("graph.pb fuzz, sglc inspect (in-process)", counts, problems))
    assert counts["clean"] > counts["accepted"], "most mutants must be refused (else the mutator is broken)"
    assert not problems, report("sglc inspect", counts, problems)


def test_sglc_inspect_subprocess_exits_1_or_2_with_one_line(compiled, tmp_path):
    """The installed entry point (a real process) refuses mutants with exit 2 and one stderr line."""
    rng = random.Random(SEED + 1)
    counts: Counter = Counter()
    problems: list[str] = []
    names = sorted(compiled)
    for i in range(SUBPROCESS_MUTANTS):
        name = names[i % len(names)]
        what, mutant = mutate(compiled[name], rng)
        path = tmp_path / f"{name}_{i}.pb"
        path.write_bytes(mutant)
        try:
            done = subprocess.run([sys.executable, "-m", "sglc.cli", "inspect", str(path)], capture_output=True,
                                  text=True, cwd=ROOT, timeout=120)
            verdict = classify(done.returncode, done.stderr, None)
            detail = done.stderr
        except subprocess.TimeoutExpired:
            verdict, detail = "hang", ""
        counts[verdict] += 1
        if verdict in ("crash", "hang"):
            problems.append(f"{name} #{i} ({what}): {verdict}: {detail.strip()[-300:]}")
    assert not problems, report("sglc inspect (subprocess)", counts, problems)
    assert counts["clean"] >= 1


# ----- sglc run against a real runtime -----
runtime = runtime_fixture(4096)
#: The samples `sglc run` is fuzzed on (each gen capped to a few tokens, so runs stay short).
RUN_SAMPLES = ["few_shot_qa", "json_extraction", "essay_judge", "multi_turn_chat"]
MAX_TOKENS_FOR_RUN = 3


def capped(data: bytes) -> bytes:
    """The graph with every gen's max_new_tokens set to MAX_TOKENS_FOR_RUN (a valid edit, resealed)."""
    msg = parse(data)
    for node in msg.nodes:
        for entry in node.attrs.entries:
            if entry.key == "max_new_tokens":
                entry.value.int_value = MAX_TOKENS_FOR_RUN
    return seal(msg)


def sglc_run(path: Path, args: Path, out: Path, endpoint: str) -> tuple[str, str]:
    command = [sys.executable, "-m", "sglc.cli", "run", str(path), "--backend", "srt", "--endpoint", endpoint,
               "--input", str(args), "--output", str(out), "--no-progress", "--timeout", str(INPUT_TIMEOUT_S)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=RUN_HANG_S)
    except subprocess.TimeoutExpired:
        return "hang", ""
    return classify(done.returncode, done.stderr, None), done.stderr


@pytest.mark.model
def test_sglc_run_on_mutated_graphs_runs_or_refuses_cleanly(compiled, runtime, tmp_path, capsys):
    """`sglc run` against a real runtime: every mutant runs or ends with exit 1/2 and one-line errors."""
    endpoint = runtime.frontends[0].address
    rng = random.Random(SEED + 2)
    counts: Counter = Counter()
    problems: list[str] = []
    for name in RUN_SAMPLES[:2]:  # NOTE: the unmutated graphs must run, or the harness proves nothing
        args = tmp_path / f"{name}.args.jsonl"
        args.write_text((ROOT / "samples" / f"{name}.args.jsonl").read_text().splitlines()[0] + "\n")
        path = tmp_path / f"{name}.pb"
        path.write_bytes(capped(compiled[name]))
        verdict, err = sglc_run(path, args, tmp_path / f"{name}.out.jsonl", endpoint)
        assert verdict == "accepted", err
    for i in range(RUN_MUTANTS):
        name = RUN_SAMPLES[i % len(RUN_SAMPLES)]
        args = tmp_path / f"{name}.args.jsonl"
        args.write_text((ROOT / "samples" / f"{name}.args.jsonl").read_text().splitlines()[0] + "\n")
        what, mutant = mutate(capped(compiled[name]), rng, edge_share=RUN_EDGE_SHARE)
        path = tmp_path / f"run_{name}_{i}.pb"
        path.write_bytes(mutant)
        verdict, err = sglc_run(path, args, tmp_path / f"run_{i}.out.jsonl", endpoint)
        counts[verdict] += 1
        if verdict in ("crash", "hang"):
            problems.append(f"{name} #{i} ({what}): {verdict}: {err.strip()[-400:]}")
    with capsys.disabled():
        print("\n" + report("graph.pb fuzz, sglc run (real runtime)", counts, problems))
    assert not problems, report("sglc run", counts, problems)
