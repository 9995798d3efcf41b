"""`sglc compile --bind NAME=JSON` (arguments fixed at compile time, Python defaults where a value
is needed) and `sglc run --temperature/--max-new-tokens/--seed` (run-level sampling)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglc.cli import main
from sglc.ir import Op
from sglc.ir.serialize import load

FORK_PROGRAM = '''import sglc as sgl

@sgl.function
def ideas(s, topic, n=3):
    s += "Topic: " + topic + "\\n"
    forks = s.fork(n)
    for i, f in enumerate(forks):
        f += "Idea " + str(i + 1) + ":" + sgl.gen("idea", max_tokens=6, stop="\\n")
    forks.join()
    s += "Best:" + sgl.gen("best", stop="\\n")
'''

NO_DEFAULT = '''import sglc as sgl

@sgl.function
def ideas(s, topic, n):
    forks = s.fork(n)
    forks.join()
'''


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ideas.py"
    path.write_text(text)
    return path


def _num_forked(graph_path: Path) -> int:
    """How many fork children generate an idea."""
    return sum(1 for n in load(graph_path).nodes if n.op is Op.GEN and n.attrs["name"] == "idea")


def test_a_fork_count_with_a_python_default_compiles_to_that_default(tmp_path, capsys):
    """n=3 by default: the graph forks 3 streams, takes only `topic`, and stderr says what was fixed."""
    out = tmp_path / "g.pb"
    assert main(["compile", str(_write(tmp_path, FORK_PROGRAM)), "-o", str(out)]) == 0
    assert _num_forked(out) == 3 and load(out).meta["arg_names"] == ["topic"]
    assert "n is needed at compile time: fixed to its default 3 (choose another with --bind n=JSON)" \
        in capsys.readouterr().err


def test_bind_fixes_arguments_at_compile_time(tmp_path):
    """--bind n=2 forks 2 streams; --bind topic='"tea"' leaves the graph without arguments."""
    out = tmp_path / "g.pb"
    program = str(_write(tmp_path, FORK_PROGRAM))
    assert main(["compile", program, "-o", str(out), "--bind", "n=2", "--bind", 'topic="tea"']) == 0
    assert _num_forked(out) == 2 and load(out).meta["arg_names"] == []


def test_a_fork_count_without_default_says_to_bind_it(tmp_path, capsys):
    """No default, no --bind: one line naming the argument and the --bind that fixes it."""
    assert main(["compile", str(_write(tmp_path, NO_DEFAULT)), "-o", str(tmp_path / "g.pb")]) == 2
    err = capsys.readouterr().err
    assert 'cannot use argument "n" as the size of s.fork()' in err and "--bind n=JSON" in err


@pytest.mark.parametrize("flag, message", [
    ("m=2", "--bind m: ideas has no such parameter (its parameters: topic, n)"),
])
def test_bind_of_an_unknown_parameter_is_one_line(tmp_path, capsys, flag, message):
    """A --bind naming no parameter of the program: exit 2 and the parameters it has."""
    assert main(["compile", str(_write(tmp_path, FORK_PROGRAM)), "--bind", flag]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["compile", "p.py", "--bind", "n=two"], "the value of n must be JSON"),
    (["compile", "p.py", "--bind", "3=1"], "expected NAME=JSON"),
    (["run", "g.pb", "-i", "a.jsonl", "--temperature", "-1"], "expected a finite number >= 0"),
    (["run", "g.pb", "-i", "a.jsonl", "--temperature", "hot"], "expected a number >= 0"),
    (["run", "g.pb", "-i", "a.jsonl", "--max-new-tokens", "0"], "expected an integer >= 1"),
    (["run", "g.pb", "-i", "a.jsonl", "--seed", "-3"], "expected an integer >= 0"),
])
def test_bad_flag_values_exit_2_naming_the_problem(capsys, argv, message):
    """Malformed --bind / sampling values are usage errors before anything loads."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.model
def test_greedy_cli_run_of_a_bound_fork_matches_eager(tmp_path, capsys):
    """`sglc compile --bind n=2` + `sglc run --temperature 0 --max-new-tokens 5` gives the variables
    of the eager run(n=2, temperature=0, max_new_tokens=5) on the same model."""
    import sglc as sgl
    from sglc.cli import find_program, load_module

    program = _write(tmp_path, FORK_PROGRAM)
    graph = tmp_path / "g.pb"
    assert main(["compile", str(program), "-o", str(graph), "--bind", "n=2"]) == 0
    args = tmp_path / "args.jsonl"
    args.write_text('{"topic": "city gardens"}\n')
    out = tmp_path / "out.jsonl"
    assert main(["run", str(graph), "-i", str(args), "-o", str(out), "--no-progress",
                 "--temperature", "0", "--max-new-tokens", "5", "--seed", "1"]) == 0
    [result] = [json.loads(line) for line in out.read_text().splitlines()]
    fn = find_program(load_module(program), program, None)
    backend = sgl.Runtime()
    try:
        eager = fn.run(topic="city gardens", n=2, temperature=0, max_new_tokens=5, seed=1, backend=backend)
    finally:
        backend.close()
    assert result["error"] is None and len(result["variables"]["idea"]) == 2
    assert result["variables"] == eager.result.variables and result["text"] == eager.text()
    [best] = [c for c in result["calls"] if c["node"] == "best"]  # the one gen without its own max_tokens
    assert best["completion_tokens"] <= 5


def test_prog_compile_also_fixes_a_needed_default_with_a_warning():
    """In Python, compile() takes the fork count's default too and warns naming it; bound wins."""
    import sglc as sgl

    @sgl.function
    def ideas(s, topic, n=2):
        forks = s.fork(n)
        for f in forks:
            f += topic + sgl.gen("idea", max_tokens=2)
        forks.join()

    with pytest.warns(UserWarning, match=r"n is needed at compile time: fixed to its default 2"):
        program = ideas.compile()
    assert program.arg_names == ["topic"]
    assert sum(1 for node in ideas.compile(n=3).graph.nodes if node.op is Op.GEN) == 3
