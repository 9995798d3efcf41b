"""PassManager: runs passes in order, verifies after each, and names the pass that failed."""
from __future__ import annotations

import pytest

from sglc.ir.verify import verify

from ir_samples import every_op_graph, linear_graph
from sglc.errors import PassError, VerifyError
from sglc.ir import Graph, Op
from sglc.passes import PassManager, PassResult, default_pipeline, merge_constants


def noop(g: Graph) -> PassResult:
    return PassResult(g, False)


def add_text(g: Graph) -> PassResult:
    g = g.copy()
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "!"})
    return PassResult(g, True)


def break_graph(g: Graph) -> PassResult:
    g = g.copy()
    g.find("essay").attrs["max_new_tokens"] = -1
    return PassResult(g, True)


def crash(g: Graph) -> PassResult:
    raise KeyError("boom")


def test_runs_passes_in_order_and_reports_which_changed():
    """Passes run in list order on each other's output; changed_by names the modifying ones."""
    order = []

    def first(g):
        order.append("first")
        return add_text(g)

    def second(g):
        order.append("second")
        assert g.nodes[-1].attrs == {"text": "!"}
        return noop(g)

    pm = PassManager([first, second])
    result = pm.run(linear_graph())
    assert order == ["first", "second"] and result.modified and pm.changed_by == ["first"]


def test_unmodified_run_returns_the_same_graph():
    """With no pass modifying, run returns modified=False and the input graph."""
    g = linear_graph()
    result = PassManager([noop, merge_constants]).run(g)
    assert result == (g, False)


def test_a_pass_that_breaks_the_graph_is_named():
    """A pass leaving an invalid graph raises PassError naming the pass and the verify problem."""
    with pytest.raises(PassError, match=r"pass break_graph left an invalid graph: verify: %essay \(gen\)"):
        PassManager([noop, break_graph]).run(linear_graph())


def test_a_pass_that_crashes_is_named():
    """An exception inside a pass becomes PassError naming the pass, chained to the cause."""
    with pytest.raises(PassError, match="pass crash failed: KeyError") as info:
        PassManager([crash]).run(linear_graph())
    assert isinstance(info.value.__cause__, KeyError)


def test_an_invalid_input_graph_is_not_blamed_on_a_pass():
    """An input that fails verify raises VerifyError before any pass runs."""
    g = linear_graph()
    g.find("essay").attrs["max_new_tokens"] = 0
    with pytest.raises(VerifyError):
        PassManager([crash]).run(g)


def test_verify_each_false_skips_verification():
    """With verify_each=False a breaking pass is not caught by the manager."""
    result = PassManager([break_graph], verify_each=False).run(linear_graph())
    assert result.graph.find("essay").attrs["max_new_tokens"] == -1


def test_a_pass_must_return_a_pass_result():
    """Returning something other than (Graph, bool) is a PassError naming the pass."""
    def bad(g):
        return g

    with pytest.raises(PassError, match="pass bad returned Graph, not a PassResult"):
        PassManager([bad]).run(linear_graph())


def test_default_pipeline_runs_its_passes_in_order_and_verifies():
    """The default pipeline merges constants, hoists, hints forks, and yields a valid graph."""
    pm = default_pipeline()
    assert pm.names[:4] == ["merge_constants", "prefix_hoisting", "fork_hints", "merge_constants"]
    g = every_op_graph()
    g.find("verdict").attrs.pop("json_schema")  # one constraint per gen (see the test below)
    result = pm.run(g)
    assert result.modified and "merge_constants" in pm.changed_by and "fork_hints" in pm.changed_by
    assert "fsm" in result.graph.find("verdict").attrs
    verify(result.graph)


def test_default_pipeline_names_a_gen_with_two_constraints():
    """A gen with both regex and json_schema fails in lower_constraints, naming the node."""
    with pytest.raises(PassError, match=r"lower_constraints.*%verdict.*one constraint"):
        default_pipeline().run(every_op_graph())


def test_aggressive_pipeline_is_opt_in():
    """Only aggressive=True selects the prompt-changing hoisting rewrite."""
    assert "aggressive_prefix_hoisting" not in default_pipeline().names
    assert "aggressive_prefix_hoisting" in default_pipeline(aggressive=True).names

