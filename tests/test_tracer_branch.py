"""Branching on a select: one trace per outcome, merged under a BRANCH node with guards."""
import os

import pytest

import sglc as sgl
from sglc.frontend.errors import TraceError
from sglc.ir import Op
from sglc.ir.verify import verify

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line number of the unique line in this file that ends with `# @marker`."""
    with open(__file__) as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def ops(nodes):
    return [n.op for n in nodes]


def guarded(graph, branch, case):
    return [n for n in graph.nodes if n.guard is not None and n.guard.branch is branch and n.guard.case == case]


def texts(nodes):
    return [n.attrs["text"] for n in nodes if n.op is Op.CONSTANT_TEXT]


@sgl.function
def tool_router(s, question):
    s += "Q: " + question + "\nTool: "
    s += sgl.select("tool", choices=["search", "calculator", "none"])
    if s["tool"] == "search":  # @router-if
        s += "\nQuery: " + sgl.gen("query", stop="\n")
    elif s["tool"] == "calculator":
        s += "\nExpression: " + sgl.gen("expr", regex=r"[0-9+*/() -]+")
    s += "\nAnswer: " + sgl.gen("answer", max_tokens=32)


def test_shared_prefix_appears_once_without_guards():
    """Nodes before the first comparison are shared by all cases and carry no guard."""
    g = tool_router.trace()
    verify(g)
    branch = next(n for n in g.nodes if n.op is Op.BRANCH)
    prefix = g.nodes[: g.nodes.index(branch)]
    assert ops(prefix) == [Op.ARGUMENT, Op.CONSTANT_TEXT, Op.APPEND, Op.CONSTANT_TEXT, Op.SELECT]
    assert all(n.guard is None for n in prefix)
    assert branch.inputs == (prefix[-1],) and branch.attrs == {"cases": ["search", "calculator", "none"]}
    assert branch.source == f"{HERE}:{line_of('router-if')}"


def test_each_case_holds_its_trace_suffix_under_its_guard():
    """if/elif/else on one select is one BRANCH; case i holds exactly the nodes traced for choice i."""
    g = tool_router.trace()
    [branch] = [n for n in g.nodes if n.op is Op.BRANCH]
    after = g.nodes[g.nodes.index(branch) + 1:]
    assert all(n.guard is not None and n.guard.branch is branch for n in after)
    search, calc, none = (guarded(g, branch, c) for c in range(3))
    assert len(search) + len(calc) + len(none) == len(after)
    assert [n.attrs["name"] for n in search if n.op is Op.GEN] == ["query", "answer"]
    assert [n.attrs["name"] for n in calc if n.op is Op.GEN] == ["expr", "answer"]
    assert [n.attrs["name"] for n in none if n.op is Op.GEN] == ["answer"]
    assert texts(none) == ["\nAnswer: "]


def test_not_equal_and_in_compile_like_equality():
    """`!=` and `in (...)` on a select result branch on the same outcomes."""
    @sgl.function
    def prog(s):
        s += sgl.select("mood", choices=["happy", "sad", "angry"])
        if s["mood"] != "happy":
            s += " :("
        if s["mood"] in ("sad", "angry"):
            s += " (negative)"

    g = prog.trace()
    verify(g)
    [branch] = [n for n in g.nodes if n.op is Op.BRANCH]
    assert [texts(guarded(g, branch, c)) for c in range(3)] == [[], [" :(", " (negative)"], [" :(", " (negative)"]]


def test_early_return_makes_that_case_shorter():
    """`return` in one case ends that case; the other case continues."""
    @sgl.function
    def prog(s):
        s += sgl.select("ok", choices=["yes", "no"])
        if s["ok"] == "no":
            return
        s += "continue " + sgl.gen("rest")

    g = prog.trace()
    verify(g)
    [branch] = [n for n in g.nodes if n.op is Op.BRANCH]
    assert ops(guarded(g, branch, 0)) == [Op.CONSTANT_TEXT, Op.GEN]
    assert guarded(g, branch, 1) == []
    assert g.nodes[-1].op is Op.GEN


def test_nested_branch_is_guarded_by_the_outer_case():
    """A comparison inside a case creates an inner BRANCH guarded by that case."""
    @sgl.function
    def prog(s):
        s += sgl.select("a", choices=["x", "y"])
        if s["a"] == "x":
            s += sgl.select("b", choices=["p", "q"])
            if s["b"] == "p":  # @inner-if
                s += "xp"
            else:
                s += "xq"
        else:
            s += "y"

    g = prog.trace()
    verify(g)
    outer, inner = [n for n in g.nodes if n.op is Op.BRANCH]
    assert inner.guard == (outer, 0) and inner.source == f"{HERE}:{line_of('inner-if')}"
    inner_select = inner.inputs[0]
    assert inner_select.guard == (outer, 0)
    assert texts(guarded(g, inner, 0)) == ["xp"] and texts(guarded(g, inner, 1)) == ["xq"]
    assert texts(guarded(g, outer, 1)) == ["y"]


def test_sequential_branches_nest_in_every_case():
    """Two independent comparisons give 2x2 traces: the second BRANCH appears under each case."""
    @sgl.function
    def prog(s):
        s += sgl.select("a", choices=["0", "1"])
        s += "A" if s["a"] == "1" else "a"
        s += sgl.select("b", choices=["0", "1"])
        s += "B" if s["b"] == "1" else "b"

    g = prog.trace()
    verify(g)
    branches = [n for n in g.nodes if n.op is Op.BRANCH]
    assert len(branches) == 3
    leaves = sorted(
        "".join(texts(guarded(g, outer_case_branch, c)))
        for outer_case_branch in branches[1:] for c in range(2)
    )
    assert leaves == ["B", "B", "b", "b"]
    assert sorted("".join(texts(guarded(g, branches[0], c))) for c in range(2)) == ["A", "a"]


def test_fork_inside_a_case_gets_distinct_streams():
    """Streams created in different cases get different ids in the merged graph."""
    @sgl.function
    def prog(s):
        s += sgl.select("mode", choices=["wide", "narrow"])
        n = 3 if s["mode"] == "wide" else 2
        forks = s.fork(n)
        forks += sgl.gen("idea", max_tokens=8)
        forks.join()

    g = prog.trace()
    verify(g)
    items = [n for n in g.nodes if n.op is Op.GET_FORK_ITEM]
    assert len(items) == 5 and len({n.stream for n in items}) == 5 and g.num_streams == 6
    for node in g.nodes:
        if node.stream != 0:
            assert node.guard is not None


def test_branch_on_a_select_in_a_child_stream():
    """A select inside a fork child can branch; the BRANCH lives in the select's stream."""
    @sgl.function
    def prog(s):
        forks = s.fork(2)
        for f in forks:
            f += sgl.select("vote", choices=["yes", "no"])
        if forks[0]["vote"] == "yes":
            forks[0] += " because " + sgl.gen("why")
        forks.join()

    g = prog.trace()
    verify(g)
    [branch] = [n for n in g.nodes if n.op is Op.BRANCH]
    assert branch.stream == 1 and branch.inputs[0].stream == 1
    assert [n.op for n in guarded(g, branch, 0) if n.stream == 1] == [Op.CONSTANT_TEXT, Op.GEN]
    join_yes, join_no = [n for n in g.nodes if n.op is Op.JOIN]
    assert join_yes.guard == (branch, 0) and join_no.guard == (branch, 1)
    assert join_yes.inputs[1].op is Op.GEN  # child 0's last node on the "yes" path
    assert join_no.inputs[1] is branch  # on the "no" path, child 0 ends with the BRANCH itself


def test_comparing_with_a_value_outside_the_choices_names_it():
    """A comparison with a non-choice is a TraceError naming the value and the choices."""
    @sgl.function
    def prog(s):
        s += sgl.select("related", choices=["yes", "no"])
        if s["related"] == "maybe":  # @bad-choice
            s += "?"

    with pytest.raises(TraceError, match=rf"^{HERE}:{line_of('bad-choice')}: cannot compare the result of "
                                         r"select\(\"related\"\) with 'maybe': it is not one of its choices "
                                         r"\['yes', 'no'\]"):
        prog.trace()


def test_comparing_two_symbolic_values_is_an_error():
    """Two selects compared with each other cannot be resolved per choice."""
    @sgl.function
    def prog(s):
        s += sgl.select("a", choices=["x", "y"]) + sgl.select("b", choices=["x", "y"])
        if s["a"] == s["b"]:
            s += "same"

    with pytest.raises(TraceError, match=r'select\("a"\) with the result of select\("b"\)'):
        prog.trace()


def test_nondeterministic_program_is_detected():
    """Traces that differ before their branch point (e.g. global state) are an error, not a wrong graph."""
    calls = []

    @sgl.function
    def prog(s):
        calls.append(1)
        s += "run " + str(len(calls))
        s += sgl.select("a", choices=["x", "y"])
        if s["a"] == "x":
            s += "!"

    with pytest.raises(TraceError, match="traced differently on two runs"):
        prog.trace()


def test_too_many_paths_is_an_error():
    """The number of traces is bounded; exceeding it suggests the eager interpreter."""
    @sgl.function
    def prog(s):
        for i in range(4):
            s += sgl.select(f"b{i}", choices=["0", "1"])
            if s[f"b{i}"] == "1":
                s += "+"

    assert len([n for n in prog.trace().nodes if n.op is Op.BRANCH]) == 1 + 2 + 4 + 8
    with pytest.raises(TraceError, match="more than 8 paths"):
        prog.trace(max_traces=8)


def test_branch_graphs_reuse_no_node_across_cases():
    """Each node is in the graph once and every input precedes its user (a valid merged graph)."""
    g = tool_router.trace()
    seen = set()
    for node in g.nodes:
        assert all(i.name in seen for i in node.inputs)
        seen.add(node.name)
    assert len(seen) == len(g.nodes)
