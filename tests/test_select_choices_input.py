"""select(choices=ARGUMENT): the choices are a runtime input of the SELECT node (HellaSwag's shape).

Compiled whenever the result is not compared in a branch; a branch still needs constant choices
and says so. Eager and compiled agree (test_eager.py / test_compiled_program.py run the
`hellaswag_choices_argument` case of test_executor_support.py, the latter on the real model)."""
from __future__ import annotations

import pytest
from test_executor_support import ScriptedBackend, hellaswag_choices_argument

import sglc as sgl
from sglc.executor.program import ProgramError
from sglc.ir import Op
from sglc.errors import VerifyError
from sglc.ir.serialize import decode, encode
from sglc.ir.verify import verify

ENDINGS = [" drank it slowly.", " drove to the moon.", " folded the river."]


def test_choices_from_an_argument_become_the_selects_input():
    """The SELECT reads the `endings` argument and has no constant choices; the graph verifies
    and survives graph.pb."""
    graph = hellaswag_choices_argument.compile().graph
    [select] = [n for n in graph.nodes if n.op is Op.SELECT]
    assert "choices" not in select.attrs and [i.attrs["name"] for i in select.inputs] == ["endings"]
    verify(graph)
    assert decode(encode(graph)) == graph


def test_the_compiled_select_picks_one_of_the_given_endings():
    """Each input brings its own endings; the chosen one is among them and is appended."""
    prog = hellaswag_choices_argument.compile()
    states = prog.run_batch([{"context": "A", "endings": ENDINGS}, {"context": "B", "endings": [" x", " y"]}],
                            backend=ScriptedBackend())
    assert states[0]["ending"] in ENDINGS and states[1]["ending"] in [" x", " y"]
    assert all(s.error() is None and s["ending"] in s.text() for s in states)


@pytest.mark.parametrize("endings, message", [
    (" just one string", "select choices must be a non-empty list of distinct strings"),
    ([" same", " same"], "select choices must be a non-empty list of distinct strings"),
    ([], "select choices must be a non-empty list of distinct strings"),
])
def test_bad_choices_at_run_time_fail_naming_the_select(endings, message):
    """An input whose endings are not a list of distinct strings fails at %ending, nothing else."""
    with pytest.raises(ProgramError, match=message) as info:
        hellaswag_choices_argument.compile().run(context="A", endings=endings, backend=ScriptedBackend())
    assert "%ending (select)" in str(info.value)


def test_a_branch_on_choices_from_an_argument_is_refused_naming_both():
    """Comparing the result in an `if` needs the choices at compile time; the error says how."""
    @sgl.function
    def branchy(s, endings):
        s += "Pick:" + sgl.select("ending", choices=endings)
        if s["ending"] == " yes":
            s += "!"

    with pytest.raises(sgl.TraceError, match=r"its choices come from argument 'endings' at run time, and a branch "
                                               r"needs them at compile time.*--bind endings=JSON"):
        branchy.trace()


def test_a_branch_compiles_once_the_choices_are_bound():
    """With the argument bound, the choices are constant and the branch compiles as before."""
    @sgl.function
    def branchy(s, endings):
        s += "Pick:" + sgl.select("ending", choices=endings)
        if s["ending"] == " yes":
            s += "!"

    graph = branchy.trace(endings=[" yes", " no"])
    assert any(n.op is Op.BRANCH for n in graph.nodes)


def test_verify_refuses_a_select_with_neither_choices_nor_an_input():
    """A SELECT without choices must have exactly one list input."""
    @sgl.function
    def constant(s):
        s += "Pick:" + sgl.select("ending", choices=[" yes", " no"])

    graph = constant.trace()
    [select] = [n for n in graph.nodes if n.op is Op.SELECT]
    del select.attrs["choices"]
    with pytest.raises(VerifyError, match="takes one input holding the choices"):
        verify(graph)
