"""`sglc run`: usage errors (exit 2), per-input failures (exit 1, results kept), and every sample
compiled and run end to end on the embedded runtime (model tests)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglc.cli import main

ROOT = Path(__file__).resolve().parent.parent
#: Samples run here through `sglc run` on the embedded runtime: the CLI path does not depend on the
#: program, so three that cover a plain gen, a lowered regex and a program calling another. Every
#: sample runs through the CLI against `sglc serve` (tests/test_run_against_serve.py, every input)
#: and compiled on the embedded runtime against recorded outputs (tests/test_golden_samples.py).
SAMPLES = ["few_shot_qa", "json_extraction", "call_other_program:research_brief"]

TINY = '''import sglc as sgl

@sgl.function
def tiny(s, q):
    s += "Q: " + q + "\\nA:" + sgl.gen("a", max_tokens=2, temperature=0)
'''


@pytest.fixture()
def tiny_graph(tmp_path) -> Path:
    program = tmp_path / "tiny.py"
    program.write_text(TINY)
    graph = tmp_path / "tiny.pb"
    assert main(["compile", str(program), "-o", str(graph)]) == 0
    return graph


def test_an_input_line_that_is_not_a_json_object_is_a_usage_error(tmp_path, tiny_graph, capsys):
    """Exit 2, naming the file and line, before any backend starts."""
    args = tmp_path / "args.jsonl"
    args.write_text('{"q": "fine"}\n["not", "an", "object"]\n')
    assert main(["run", str(tiny_graph), "--input", str(args), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"sglc: error: {args}:2: each line must be a JSON object" in err
    assert "embedded runtime" not in err


def test_invalid_json_and_a_bad_graph_are_usage_errors(tmp_path, tiny_graph, capsys):
    """Malformed JSON and a file that is not a graph.pb both exit 2 with one line."""
    args = tmp_path / "args.jsonl"
    args.write_text('{"q": \n')
    assert main(["run", str(tiny_graph), "--input", str(args)]) == 2
    assert f"{args}:1: not valid JSON" in capsys.readouterr().err
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"definitely not protobuf")
    args.write_text('{"q": "x"}\n')
    assert main(["run", str(junk), "--input", str(args)]) == 2
    assert capsys.readouterr().err.startswith("sglc: error: ")


def test_an_unavailable_backend_fails_every_input_with_exit_1(tmp_path, tiny_graph, capsys):
    """The embedded runtime cannot start (no such model): each input gets an error line; exit 1."""
    args = tmp_path / "args.jsonl"
    args.write_text('{"q": "a"}\n{"q": "b"}\n')
    out = tmp_path / "out.jsonl"
    missing = tmp_path / "no-such-model"
    status = main(["run", str(tiny_graph), "--model", str(missing), "--input", str(args), "--output", str(out),
                   "--no-progress"])
    assert status == 1
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in lines] == [0, 1]
    assert all(r["error"].startswith("backend unavailable: ") and "no-such-model" in r["error"] for r in lines)
    err = capsys.readouterr().err
    assert "sglc: input 0 failed: backend unavailable" in err and "2 input(s), 0 ok, 2 failed" in err


def test_an_unreachable_endpoint_fails_the_inputs_without_hanging(tmp_path, tiny_graph, capsys):
    """--endpoint with nothing listening: every input fails with a one-line reason; exit 1."""
    pytest.importorskip("sglc.executor.backends.srt")
    args = tmp_path / "args.jsonl"
    args.write_text('{"q": "a"}\n{"q": "b"}\n')
    out = tmp_path / "out.jsonl"
    status = main(["run", str(tiny_graph), "--endpoint", "127.0.0.1:9", "--input", str(args), "--output", str(out),
                   "--no-progress", "--timeout", "120"])
    assert status == 1
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all(r["error"] for r in lines)
    assert "2 failed" in capsys.readouterr().err


@pytest.mark.model
def test_a_failing_input_is_reported_and_the_others_are_kept(tmp_path, tiny_graph, capsys):
    """Embedded runtime: input 1 lacks its argument -> its line has the error, exit 1, others ok."""
    args = tmp_path / "args.jsonl"
    args.write_text('{"q": "2+2?"}\n{"question": "wrong name"}\n{"q": "3+3?"}\n')
    out = tmp_path / "out.jsonl"
    assert main(["run", str(tiny_graph), "--input", str(args), "--output", str(out), "--no-progress"]) == 1
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["error"] is None for r in lines] == [True, False, True]
    assert lines[1]["error"] == "unknown argument(s) question; the program takes q"
    assert lines[0]["variables"]["a"] == lines[0]["text"].rsplit("A:", 1)[1]
    err = capsys.readouterr().err
    assert "starting the embedded runtime" in err and "sglc: input 1 failed: unknown argument(s) question" in err


@pytest.mark.model
@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_compile_and_run_on_the_embedded_runtime(tmp_path, sample, capsys, monkeypatch):
    """`sglc compile` then `sglc run` (no endpoint): exit 0, one result per input, no errors, variables set."""
    monkeypatch.chdir(ROOT)  # sample args use repository-relative paths (samples/assets/...)
    file, _, function = sample.partition(":")
    target = f"samples/{file}.py" + (f":{function}" if function else "")
    graph = tmp_path / f"{file}.pb"
    assert main(["compile", target, "-o", str(graph)]) == 0
    first_line = (ROOT / "samples" / f"{file}.args.jsonl").read_text().splitlines()[0]
    args = tmp_path / "args.jsonl"
    args.write_text(first_line + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["run", str(graph), "--input", str(args), "--output", str(out), "--no-progress"]) == 0
    [result] = [json.loads(x) for x in out.read_text().splitlines()]
    assert result["error"] is None and result["arguments"] == json.loads(first_line)
    assert result["variables"] and result["text"] and result["calls"]
    assert all(c["prompt_tokens"] > 0 for c in result["calls"])


def test_a_graph_whose_meta_is_of_the_wrong_type_is_a_usage_error(tmp_path, tiny_graph, capsys):
    """meta num_api_spec_tokens that is not a number: exit 2, one line naming it, before any backend starts."""
    from graph_pb_helpers import parse, seal

    msg = parse(tiny_graph.read_bytes())
    msg.meta.entries.add(key="num_api_spec_tokens").value.string_value = "abc"
    tiny_graph.write_bytes(seal(msg))
    args = tmp_path / "args.jsonl"
    args.write_text('{"q": "a"}\n')
    assert main(["run", str(tiny_graph), "--input", str(args), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "meta num_api_spec_tokens='abc'" in err and "embedded runtime" not in err
