"""prefix_hoisting: text every fork child starts with is computed once before the fork, and no
prompt, captured variable or stream text changes (default); aggressive mode changes prompts and says so.

Prompts are compared with the reference renderer in prompt_rendering.py; random graphs are in
test_pass_prefix_hoisting_random.py.
"""
from __future__ import annotations

from typing import Optional

import pytest

from prompt_rendering import SAMPLES, assert_same_prompts, fork_prefix, load_sample, render_path
from sglc.ir import Graph, Guard, Op, ValueType
from sglc.ir.verify import verify
from sglc.passes.fork_hints import fork_hints
from sglc.passes.merge_constants import merge_constants
from sglc.passes.prefix_hoisting import REWRITES_KEY, aggressive_prefix_hoisting, prefix_hoisting, shared_cut


# ----- small hand-built graphs -----
def fork_graph(child_parts: list[list], mode: Optional[str] = "gather_variable", guard: bool = False) -> Graph:
    """Stream 0: "Intro.", a fork whose child i appends child_parts[i] (str, ("role", r), ("end", r),
    ("arg", None), ("gen", name)), a join, then a gen reading the parent's text."""
    g = Graph("forked")
    arg = g.create_node(Op.ARGUMENT, attrs={"name": "topic"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Intro."}, meta={"source": "p.py:1"})
    gd = None
    if guard:
        sel = g.create_node(Op.SELECT, attrs={"name": "go", "choices": ["yes", "no"]})
        gd = Guard(g.create_node(Op.BRANCH, [sel], attrs={"cases": ["yes", "no"]}), 0)
    fork = g.create_node(Op.FORK, attrs={"n": len(child_parts)}, guard=gd, meta={"source": "p.py:2"})
    lasts = []
    for index, parts in enumerate(child_parts):
        stream = g.new_stream()
        last = g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": index}, stream=stream, guard=gd)
        for part in parts:
            if isinstance(part, str):
                last = g.create_node(Op.CONSTANT_TEXT, attrs={"text": part}, stream=stream, guard=gd)
            elif part[0] in ("role", "end"):
                op = Op.ROLE_BEGIN if part[0] == "role" else Op.ROLE_END
                last = g.create_node(op, attrs={"role": part[1]}, stream=stream, guard=gd)
            elif part[0] == "arg":
                last = g.create_node(Op.APPEND, [arg], stream=stream, guard=gd)
            else:
                last = g.create_node(Op.GEN, attrs={"name": part[1]}, stream=stream, guard=gd)
        lasts.append(last)
    if mode is not None:
        join = g.create_node(Op.JOIN, [fork, *lasts], attrs={"mode": mode, "variables": ["x"]}, guard=gd)
        g.create_node(Op.VARIABLE, [join], attrs={"name": "x"}, type=ValueType.LIST, guard=gd)
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Verdict:"}, guard=gd)
    g.create_node(Op.GEN, attrs={"name": "verdict"}, guard=gd)
    verify(g)
    return g


def hoist(g: Graph) -> Graph:
    """Default-mode hoisting that must have changed something, keep prompts and verify."""
    result = prefix_hoisting(g)
    assert result.modified
    verify(result.graph)
    assert_same_prompts(g, result.graph)
    return result.graph


# ----- the default rewrite -----
def test_shared_role_and_text_move_before_the_fork_in_a_new_stream():
    """Children '[user]Rate: A' and '[user]Rate: B' share '[user]Rate:'; prompts stay identical."""
    g = fork_graph([[("role", "user"), "Rate: A", ("end", "user"), ("gen", "x")],
                    [("role", "user"), "Rate: B", ("end", "user"), ("gen", "x")]])
    out = hoist(g)
    assert fork_prefix(g, "fork") == "Intro."
    assert fork_prefix(out, "fork") == "Intro.[user]Rate:"
    outer = out.find("fork_prefix")
    assert outer.attrs == {"n": 1, "hoisted": True} and outer.stream == 0 and outer.source == "p.py:2"
    inner_stream = out.find("fork").stream
    assert [n.op for n in out.stream_nodes(inner_stream)] == [
        Op.GET_FORK_ITEM, Op.ROLE_BEGIN, Op.CONSTANT_TEXT, Op.FORK, Op.ROLE_END, Op.JOIN]
    assert [n.attrs["text"] for n in out.nodes if n.op is Op.CONSTANT_TEXT and n.stream in (1, 2)] == [" A", " B"]


def test_the_parent_stream_text_after_the_fork_is_unchanged():
    """The parent's later prompt does not see the hoisted text (it lives in the new stream only)."""
    g = fork_graph([["Shared text. ", ("gen", "x")], ["Shared text. ", ("gen", "x")]])
    out = hoist(g)
    cases: dict[str, int] = {}
    assert render_path(out, cases).observed[("prompt", "verdict")] == "Intro.Verdict:"
    assert fork_prefix(out, "fork") == "Intro.Shared text. "


def test_children_made_only_of_shared_text_are_gathered_by_their_fork_item():
    """When a child's every node moves, the join gathers its GET_FORK_ITEM instead."""
    g = fork_graph([["same"], ["same"]])
    out = hoist(g)
    join = out.find("join")
    assert [i.op for i in join.inputs[1:]] == [Op.GET_FORK_ITEM, Op.GET_FORK_ITEM]
    assert fork_prefix(out, "fork") == "Intro.same"


def test_append_of_the_same_argument_moves_too():
    """'Topic: <arg> then A/B' shares 'Topic: <arg:topic> then'."""
    g = fork_graph([["Topic: ", ("arg", None), " then A", ("gen", "x")],
                    ["Topic: ", ("arg", None), " then B", ("gen", "x")]])
    out = hoist(g)
    assert fork_prefix(out, "fork") == "Intro.Topic: <arg:topic> then"


def test_nothing_moves_past_a_gen_or_a_differing_node():
    """Shared text after a child's first gen stays in the child."""
    g = fork_graph([[("gen", "x"), "same"], [("gen", "x"), "same"]])
    result = prefix_hoisting(g)
    assert not result.modified and result.graph is g


def test_concatenate_join_forks_are_left_alone():
    """A concatenate-and-append join copies each child's text after the fork: sharing it would change that."""
    g = fork_graph([["Plan 1", ("gen", "x")], ["Plan 2", ("gen", "x")]], mode="concate_and_append")
    assert not prefix_hoisting(g).modified


def test_a_fork_joined_under_a_later_branch_is_left_alone():
    """Joins guarded by a branch decided after the fork would make the new stream wait on it: not hoisted."""
    g = Graph()
    fork = g.create_node(Op.FORK, attrs={"n": 2})
    lasts = []
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": index}, stream=stream)
        lasts.append(g.create_node(Op.CONSTANT_TEXT, attrs={"text": f"Shared {index}"}, stream=stream))
    sel = g.create_node(Op.SELECT, attrs={"name": "c", "choices": ["a", "b"]})
    br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["a", "b"]})
    for case in range(2):
        g.create_node(Op.JOIN, [fork, *lasts], attrs={"mode": "gather_variable"}, guard=Guard(br, case))
    verify(g)
    assert not prefix_hoisting(g).modified


def test_an_unjoined_fork_is_hoisted_without_a_join():
    """A fork nobody joins still shares its children's prefix; no join is invented."""
    g = fork_graph([["Go left", ("gen", "x")], ["Go right", ("gen", "x")]], mode=None)
    out = hoist(g)
    assert fork_prefix(out, "fork") == "Intro.Go"
    assert not [n for n in out.nodes if n.op is Op.JOIN]


def test_a_guarded_fork_keeps_its_guard_on_everything_it_gains():
    """Nodes made or moved for a fork under a branch case carry that case's guard."""
    g = fork_graph([["Same start x", ("gen", "x")], ["Same start y", ("gen", "x")]], guard=True)
    out = hoist(g)
    fork = out.find("fork")
    new_stream = [n for n in out.nodes if n.stream == fork.stream]
    assert all(n.guard == fork.guard and n.guard is not None for n in new_stream)
    assert out.find("fork_prefix").guard == fork.guard
    assert fork_prefix(out, "fork", {"branch": 0}) == "Intro.<select:go>Same start"


def test_a_child_node_under_another_guard_stops_hoisting():
    """Text guarded by a branch inside one child is never moved across that guard."""
    g = Graph()
    fork = g.create_node(Op.FORK, attrs={"n": 2})
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": index}, stream=stream)
        sel = g.create_node(Op.SELECT, attrs={"name": "c", "choices": ["a"]}, stream=stream)
        br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["a"]}, stream=stream)
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": "same"}, stream=stream, guard=Guard(br, 0))
    assert not prefix_hoisting(g).modified


def test_per_child_variable_reads_do_not_move():
    """Children appending their own VARIABLE nodes (even of one producer) keep them: values, not text."""
    g = Graph()
    gen = g.create_node(Op.GEN, attrs={"name": "x"})
    fork = g.create_node(Op.FORK, attrs={"n": 2})
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": index}, stream=stream)
        var = g.create_node(Op.VARIABLE, [gen], attrs={"name": "x"}, stream=stream)
        g.create_node(Op.APPEND, [var], stream=stream)
    assert not prefix_hoisting(g).modified


def test_gathered_lists_and_outer_joins_still_resolve():
    """Nested: a child's inner fork is hoisted; the outer join gathers the new join, variables read the old one."""
    g = Graph("nested")
    outer = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [outer], attrs={"index": 0}, stream=child)
    inner = g.create_node(Op.FORK, attrs={"n": 2}, stream=child)
    lasts = []
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [inner], attrs={"index": index}, stream=stream)
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": f"Answer {index}:"}, stream=stream)
        lasts.append(g.create_node(Op.GEN, attrs={"name": "a"}, stream=stream))
    join = g.create_node(Op.JOIN, [inner, *lasts], attrs={"mode": "gather_variable", "variables": ["a"]}, stream=child)
    read = g.create_node(Op.VARIABLE, [join], attrs={"name": "a"}, type=ValueType.LIST, stream=child)
    g.create_node(Op.JOIN, [outer, read], attrs={"mode": "concate_and_append", "variables": []})
    verify(g)
    out = hoist(g)
    assert out.find("variable").inputs == (out.find("join"),)
    assert fork_prefix(out, "fork_1") == "Answer"
    # The outer join still gathers the child's last node, which did not change here.
    assert out.find("join_1").inputs[1] is out.find("variable")


def test_an_outer_join_that_gathered_the_hoisted_join_gathers_the_new_one():
    """When the hoisted fork's join was its stream's last node, the outer join now gathers its replacement."""
    g = Graph("nested")
    outer = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [outer], attrs={"index": 0}, stream=child)
    inner = g.create_node(Op.FORK, attrs={"n": 2}, stream=child)
    lasts = []
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [inner], attrs={"index": index}, stream=stream)
        lasts.append(g.create_node(Op.CONSTANT_TEXT, attrs={"text": f"Say {index}"}, stream=stream))
    join = g.create_node(Op.JOIN, [inner, *lasts], attrs={"mode": "gather_variable", "variables": []}, stream=child)
    g.create_node(Op.JOIN, [outer, join], attrs={"mode": "concate_and_append", "variables": []})
    out = hoist(g)
    assert out.find("join_1").inputs[1] is out.find("join_prefix")


def test_an_outer_join_that_gathered_the_unjoined_fork_gathers_the_hoisted_one():
    """An unjoined fork that was its stream's last node is replaced, for the outer join, by the one-way fork."""
    g = Graph("nested")
    outer = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [outer], attrs={"index": 0}, stream=child)
    inner = g.create_node(Op.FORK, attrs={"n": 2}, stream=child)
    for index in range(2):
        stream = g.new_stream()
        g.create_node(Op.GET_FORK_ITEM, [inner], attrs={"index": index}, stream=stream)
        g.create_node(Op.CONSTANT_TEXT, attrs={"text": f"Say {index}"}, stream=stream)
    g.create_node(Op.JOIN, [outer, inner], attrs={"mode": "gather_variable", "variables": []})
    out = hoist(g)
    assert out.find("join").inputs[1] is out.find("fork_1_prefix")


def test_the_input_graph_is_not_changed():
    """The pass is pure: the graph it is given keeps its signature."""
    g = fork_graph([["Rate: A"], ["Rate: B"]])
    before = g.signature()
    assert prefix_hoisting(g).modified
    assert g.signature() == before


def test_a_second_run_changes_nothing():
    """Idempotent: the hoisted graph is a fixed point (one-way hoisted forks are not hoisted again)."""
    g = fork_graph([[("role", "user"), "Rate: A", ("end", "user")], [("role", "user"), "Rate: B", ("end", "user")]])
    once = prefix_hoisting(g).graph
    again = prefix_hoisting(once)
    assert not again.modified and again.graph is once


# ----- where a partial text is cut -----
@pytest.mark.parametrize("texts_, cut", [
    (["\nPlan 1: ", "\nPlan 2: "], len("\nPlan")),
    (["Evaluate: Clarity.", "Evaluate: Originality."], len("Evaluate:")),
    (["Hello", "Hello world"], len("Hello")),
    (["abc", "abd"], 0),  # no word end inside the common part
    ([" x", " y"], 0),  # the common part is whitespace only
    (["a  b", "a  c"], 1),  # a whitespace run is never split
    (["héllo wörld", "héllo wärld"], len("héllo")),
    (["日本語 です", "日本語 でした"], len("日本語")),
    (["line one\nA", "line one\nB"], len("line one")),
])
def test_shared_cut_ends_at_a_word_end(texts_, cut):
    """The cut is the last word end of the common prefix where every child continues with whitespace."""
    assert shared_cut(texts_) == cut


# ----- the traced samples -----
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_keep_every_prompt_and_reach_a_fixed_point(name):
    """On every sample, alone and in the default pipeline order, prompts stay the same and a rerun changes nothing."""
    traced = load_sample(name)
    merged = merge_constants(traced).graph
    hoisted = prefix_hoisting(merged).graph
    verify(hoisted)
    assert_same_prompts(traced, hoisted)
    full = merge_constants(fork_hints(hoisted).graph).graph
    verify(full)
    assert_same_prompts(traced, full)
    assert not prefix_hoisting(full).modified
    verify(aggressive_prefix_hoisting(merged).graph)


def test_essay_judge_children_share_the_user_turn_opening():
    """The three judgments' '[user]Evaluate the essay on one dimension:' is computed before the fork."""
    g = merge_constants(load_sample("essay_judge")).graph
    out = hoist(g)
    before, after = fork_prefix(g, "fork", {"branch": 0}), fork_prefix(out, "fork", {"branch": 0})
    assert after == before + "[user]Evaluate the essay on one dimension:"


def test_tree_of_thought_is_unchanged_because_its_joins_concatenate():
    """Tree-of-thought joins append each child's text; hoisting would change the final prompt, so none happens."""
    assert not prefix_hoisting(merge_constants(load_sample("tree_of_thought")).graph).modified


# ----- aggressive mode -----
def question_graph() -> Graph:
    g = Graph("qa")
    q = g.create_node(Op.ARGUMENT, attrs={"name": "q"})
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "user"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Question: "})
    g.create_node(Op.APPEND, [q], meta={"source": "qa.py:3"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": " Answer in one word."})
    g.create_node(Op.ROLE_END, attrs={"role": "user"})
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Not moved: another role segment."})
    g.create_node(Op.GEN, attrs={"name": "a"})
    verify(g)
    return g


def test_default_mode_never_reorders_around_argument_reads():
    """Without the opt-in, constant text after an argument read stays where the program put it."""
    g = question_graph()
    assert not prefix_hoisting(g).modified
    assert not prefix_hoisting(merge_constants(load_sample("few_shot_qa")).graph).modified


def test_aggressive_mode_moves_constants_ahead_of_the_first_argument_read_and_says_so():
    """The prompt changes to 'Question:  Answer in one word.<q>' and graph.meta records the rewrite."""
    g = question_graph()
    result = prefix_hoisting(g, aggressive=True)
    assert result.modified
    out = result.graph
    verify(out)
    prompt = render_path(out, {}).observed[("prompt", "a")]
    assert prompt == "[user]Question:  Answer in one word.<arg:q>[/user]Not moved: another role segment."
    assert render_path(g, {}).observed[("prompt", "a")] != prompt
    (line,) = out.meta[REWRITES_KEY]
    assert "--aggressive" in line and "%append" in line and "qa.py:3" in line
    assert REWRITES_KEY not in g.meta


def test_aggressive_mode_lengthens_the_batch_prefix_and_is_idempotent():
    """After the rewrite the batch hint covers the moved text; a second aggressive run changes nothing."""
    out = aggressive_prefix_hoisting(question_graph()).graph
    hinted = fork_hints(merge_constants(out).graph).graph
    hint = next(n for n in hinted.nodes if n.op is Op.CACHE_PREFIX)
    assert hint.attrs == {"scope": "batch"}
    assert hinted.stream_nodes(0)[hinted.stream_nodes(0).index(hint) + 1].op is Op.APPEND
    assert not aggressive_prefix_hoisting(out).modified
