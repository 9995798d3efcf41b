"""The sglc command: compile and inspect every sample; one-line errors with exit code 2."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from graph_pb_helpers import parse, seal
from sglc.cli import main
from sglc.ir.serialize import FORMAT_VERSION, encode, load

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "samples").glob("*.py"))
#: Files that hold more than one program name the one to compile.
SAMPLE_FUNCTION = {"call_other_program": "research_brief"}


def target(sample: Path) -> str:
    name = SAMPLE_FUNCTION.get(sample.stem)
    return f"{sample}:{name}" if name else str(sample)


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglc: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def essay_pb(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("essay") / "essay_judge.pb"
    assert main(["compile", str(ROOT / "samples" / "essay_judge.py"), "-o", str(out)]) == 0
    return out


def test_samples_exist():
    """The samples the CLI tests compile are present (C1's samples/)."""
    assert {p.stem for p in SAMPLES} >= {"essay_judge", "few_shot_qa", "tree_of_thought", "multi_turn_chat",
                                         "json_extraction", "react_agent", "call_other_program"}


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_compile_then_inspect_every_sample(sample, tmp_path, capsys):
    """compile writes a graph.pb that loads and verifies; inspect prints its listing and table."""
    out = tmp_path / f"{sample.stem}.pb"
    code, stdout, err = run_main(capsys, "compile", target(sample), "-o", str(out))
    assert code == 0, err
    graph = load(out)
    assert stdout.startswith("compiled ") and f"{len(graph)} nodes" in stdout and "passes that changed" in stdout
    code, stdout, err = run_main(capsys, "inspect", str(out), "--table")
    assert code == 0, err
    assert stdout.startswith(f"graph {graph.name}(")
    assert sum(1 for line in stdout.splitlines() if line.lstrip().startswith("%")) == 2 * len(graph)


def test_essay_judge_listing_shows_fork_streams_join_and_branch(essay_pb, capsys):
    """The essay judge prints the branch on `related`, the 3-way fork, its 3 streams and the join."""
    code, stdout, _ = run_main(capsys, "inspect", str(essay_pb))
    assert code == 0
    lines = [line.strip() for line in stdout.splitlines()]
    assert any(line.startswith("%branch : none = branch[cases=['yes', 'no']](%related)") for line in lines)
    assert "case 0 'yes' of %branch:" in lines and "case 1 'no' of %branch (no nodes)" in lines
    assert any(line.startswith("%fork : fork = fork[n=3]") for line in lines)
    for i in range(3):
        assert f"stream {i + 1} (item {i} of %fork):" in lines
        assert sum(1 for line in lines if line.startswith("%get_fork_item") and f"index={i}]" in line) == 1
    assert sum(1 for line in lines if line.startswith("%judgment") and "= gen[" in line) == 3
    join = next(line for line in lines if line.startswith("%join : none = join["))
    assert "(%fork, " in join and join.count("%") == 5


def test_inspect_writes_dot(essay_pb, tmp_path, capsys):
    """--dot writes Graphviz text with a cluster per stream."""
    dot = tmp_path / "g.dot"
    code, _, err = run_main(capsys, "inspect", str(essay_pb), "--dot", str(dot))
    assert code == 0 and "wrote" in err
    text = dot.read_text()
    num_streams = load(essay_pb).num_streams
    assert num_streams >= 4  # stream 0 and the fork's three children (hoisting may add one)
    assert text.startswith('digraph "essay_judge"') and text.count("subgraph cluster_stream_") == num_streams


def test_compile_default_output_is_named_after_the_function(tmp_path, capsys, monkeypatch):
    """Without -o, compile writes FUNCTION.pb in the current folder."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, "compile", str(ROOT / "samples" / "few_shot_qa.py"))
    assert code == 0, err
    assert (tmp_path / "few_shot_qa.pb").is_file()


def test_a_file_whose_programs_one_calls_the_other_compiles_the_caller_and_says_so(capsys, tmp_path):
    """Two programs, one calling the other (issue #29): compile picks the one no other program calls and
    says which on one stderr line; a wrong :name lists the programs."""
    path = ROOT / "samples" / "call_other_program.py"
    code, out, err = run_main(capsys, "compile", str(path), "-o", str(tmp_path / "x.pb"))
    assert code == 0 and "compiled research_brief" in out
    assert err == ("sglc compile: call_other_program.py defines 2 programs (answer_with_citation, research_brief); "
                   "compiling research_brief, the one no other calls (answer_with_citation is called by it; pick "
                   "another with call_other_program.py:NAME)\n")
    code, _, err = run_main(capsys, "compile", f"{path}:nope", "-o", str(tmp_path / "x.pb"))
    assert_one_line_error(code, err, "no @sgl.function named 'nope'", "answer_with_citation, research_brief")


def test_a_file_with_two_unrelated_programs_needs_a_name(capsys, tmp_path):
    """Two programs neither calls (or a program called by a program called by it...): no guess, a list."""
    path = tmp_path / "two.py"
    path.write_text("import sglc as sgl\n\n@sgl.function\ndef a(s):\n    s += 'a'\n\n"
                    "@sgl.function\ndef b(s):\n    s += 'b'\n")
    code, _, err = run_main(capsys, "compile", str(path), "-o", str(tmp_path / "x.pb"))
    assert_one_line_error(code, err, "defines 2 programs (a, b); 2 of them are called by no other (a, b)", ":NAME")


def test_the_program_no_other_calls_is_found_through_separate_program_calls(capsys, tmp_path):
    """`d = helper(x=...)` (a separate-program call) also counts as calling: the caller is compiled."""
    path = tmp_path / "calls.py"
    path.write_text("import sglc as sgl\n\n@sgl.function\ndef helper(s, x):\n    s += x + sgl.gen('y', max_tokens=2)"
                    "\n\n@sgl.function\ndef main(s):\n    d = helper(x='hi')\n    s += d['y']\n\n"
                    "@sgl.function\ndef other_helper(s):\n    s += 'z'\n\n@sgl.function\ndef top(s):\n"
                    "    main(s)\n    other_helper(s)\n")
    code, out, err = run_main(capsys, "compile", str(path), "-o", str(tmp_path / "x.pb"))
    assert code == 0 and "compiled top" in out and "compiling top, the one no other calls" in err


def test_compile_errors_are_one_line(tmp_path, capsys):
    """A missing file, a file with no program, a trace error and a crashing program each give one line."""
    code, _, err = run_main(capsys, "compile", str(tmp_path / "missing.py"))
    assert_one_line_error(code, err, "missing.py: no such file")

    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert_one_line_error(*run_main(capsys, "compile", str(empty))[::2], "defines no @sgl.function")

    bad = tmp_path / "bad_if.py"
    bad.write_text("import sglc as sgl\n\n@sgl.function\ndef prog(s):\n    s += sgl.gen('x')\n"
                   "    if s['x']:\n        s += 'yes'\n")
    code, _, err = run_main(capsys, "compile", str(bad), "-o", str(tmp_path / "o.pb"))
    assert_one_line_error(code, err, "bad_if.py:6")

    crash = tmp_path / "crash.py"
    crash.write_text("import sglc as sgl\n\nraise RuntimeError('no config')\n")
    code, _, err = run_main(capsys, "compile", str(crash))
    assert_one_line_error(code, err, "loading", "crash.py:3: RuntimeError: no config")


def _newer_version(data: bytes) -> bytes:
    msg = parse(data)
    msg.format_version = FORMAT_VERSION + 1
    return seal(msg)  # NOTE: a valid checksum, as a newer sglc would write


@pytest.mark.parametrize("kind", ["truncated", "random", "newer", "empty"])
def test_malformed_graph_pb_gives_one_line_and_exit_2(kind, essay_pb, tmp_path, capsys):
    """Truncated, random, newer-version and empty files: one `sglc: error:` line, exit 2, no traceback."""
    data = essay_pb.read_bytes()
    bad = {
        "truncated": data[: len(data) // 2],
        "random": bytes(random.Random(7).randrange(256) for _ in range(500)),
        "newer": _newer_version(data),
        "empty": b"",
    }[kind]
    path = tmp_path / f"{kind}.pb"
    path.write_bytes(bad)
    code, stdout, err = run_main(capsys, "inspect", str(path))
    assert_one_line_error(code, err, f"{kind}.pb: ")
    assert stdout == ""
    if kind == "newer":
        assert f"format version {FORMAT_VERSION + 1} is newer than this sglc supports ({FORMAT_VERSION}); upgrade sglc" in err


def test_graph_pb_holding_an_invalid_graph_is_refused(tmp_path, capsys):
    """A well-formed file whose graph fails verify is refused with the verify message."""
    from sglc.ir import Graph, Op

    g = Graph()
    g.create_node(Op.GEN, attrs={"name": "x", "max_new_tokens": 0})
    path = tmp_path / "invalid.pb"
    path.write_bytes(encode(g))
    code, _, err = run_main(capsys, "inspect", str(path))
    assert_one_line_error(code, err, "invalid graph: verify: %x (gen)")


def test_missing_graph_file(tmp_path, capsys):
    """Inspecting a file that does not exist is a one-line error."""
    assert_one_line_error(*run_main(capsys, "inspect", str(tmp_path / "no.pb"))[::2], "no.pb: No such file")


def test_run_with_a_missing_graph_is_one_line_exit_2(tmp_path, capsys):
    """`sglc run` on a graph.pb that does not exist prints one line and exits 2 (no model loaded)."""
    code, _, err = run_main(capsys, "run", str(tmp_path / "nope.pb"), "--input", str(tmp_path / "x.jsonl"))
    assert_one_line_error(code, err, "nope.pb")


def test_serve_with_an_unknown_model_path_is_one_line_exit_2(tmp_path, capsys):
    """`sglc serve --model /no/such/dir` names the path in one line and exits 2."""
    code, _, err = run_main(capsys, "serve", "--model", str(tmp_path / "no_such_model"), "--port", "0")
    assert_one_line_error(code, err, "no_such_model")


def test_python_dash_m_runs_the_cli_in_a_subprocess(tmp_path):
    """`python -m sglc.cli` compiles and, on a random-bytes file, prints one line and exits 2."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp_path / "essay.pb"
    ok = subprocess.run([sys.executable, "-m", "sglc.cli", "compile", str(ROOT / "samples" / "essay_judge.py"),
                         "-o", str(out)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "5 streams" in ok.stdout
    junk = tmp_path / "junk.pb"
    junk.write_bytes(bytes(range(256)) * 3)
    bad = subprocess.run([sys.executable, "-m", "sglc.cli", "inspect", str(junk)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("sglc: error: ") and len(bad.stderr.strip().splitlines()) == 1


def test_serve_constraint_flags_reach_the_engine_config(capsys, monkeypatch):
    """--constraint-budget / --constraint-workers end up in EngineConfig.constraint_compiler."""
    from sglc_runtime.server import launch

    captured = []
    monkeypatch.setattr(launch, "serve", lambda config: captured.append(config) or 0)
    code, _, _ = run_main(capsys, "serve", "--port", "0", "--constraint-budget",
                          "max_dfa_states=20000,max_compile_seconds=2.5", "--constraint-workers", "2")
    assert code == 0
    compiler = captured[0].engine_config().constraint_compiler
    assert (compiler.budget.max_dfa_states, compiler.budget.max_compile_seconds, compiler.num_workers) == (20000, 2.5, 2)
    assert compiler.budget.max_nfa_states == 50_000  # unnamed limits keep their defaults


@pytest.mark.parametrize("flags, on", [([], True), (["--no-precompute"], False)])
def test_serve_no_precompute_reaches_both_engines_configs(capsys, monkeypatch, flags, on):
    from sglc_runtime.server import launch

    captured = []
    monkeypatch.setattr(launch, "serve", lambda config: captured.append(config) or 0)
    code, _, _ = run_main(capsys, "serve", "--port", "0", *flags)
    assert code == 0
    assert captured[0].engine_config().precompute is on and captured[0].native_engine_config().precompute is on


@pytest.mark.parametrize("flags, expected", [
    ([], ("int4", "bfloat16")),  # the default model ships as Q4_1: kept at 4 bits on a CPU
    (["--dtype", "float32"], ("none", "float32")),
    (["--dtype", "bfloat16"], ("int4", "bfloat16")),
    (["--quantization", "none"], ("none", "float32")),
    (["--quantization", "int8"], ("int8", "bfloat16")),
    (["--device", "cpu", "--model", "SmolLM2-135M-Instruct"], ("int4", "bfloat16")),
])
def test_serve_picks_its_precision_with_quantization_auto(capsys, monkeypatch, flags, expected):
    """`sglc serve` defaults to --quantization auto: int4 for the default model on a CPU unless
    float32 is asked for (the library's EngineConfig keeps float32 unless told)."""
    from sglc_runtime.engine.engine_config import EngineConfig
    from sglc_runtime.server import launch

    captured = []
    monkeypatch.setattr(launch, "serve", lambda config: captured.append(config) or 0)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert run_main(capsys, "serve", "--port", "0", *flags)[0] == 0
    config = captured[0].engine_config()
    assert (config.quantization, config.dtype) == expected
    assert EngineConfig().quantization == "none"
    assert EngineConfig(quantization="auto", model="/some/other/model").quantization == "none"
    assert EngineConfig(quantization="auto", device="cuda").quantization == "none"


def test_serve_constraint_budget_with_an_unknown_limit_exits_2_naming_it(capsys):
    """An unknown --constraint-budget entry is refused by name before anything loads."""
    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", "0", "--constraint-budget", "max_states=3"])
    assert info.value.code == 2
    assert "unknown constraint budget entry 'max_states=3'" in capsys.readouterr().err


def test_an_error_quoting_a_huge_value_prints_one_short_line():
    """Errors that quote a user's value are cut to MAX_ERROR_LINE characters (graph.pb fuzz found 10 kB lines)."""
    from sglc.errors import MAX_ERROR_LINE, one_line_error

    line = one_line_error("bad name " + "x" * 10_000 + "\nsecond line")
    assert len(line) < MAX_ERROR_LINE + 40 and line.endswith("(9509 more characters)")
    assert one_line_error("short\nmore") == "short"
