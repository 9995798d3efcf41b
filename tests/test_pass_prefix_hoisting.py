"""prefix_hoisting: text every fork child starts with is computed once before the fork, and no
prompt, captured variable or stream text changes (default); aggressive mode changes prompts and says so.

A small reference renderer gives each stream's text with placeholders for values (``<arg:x>``,
``<gen:node>``, ``[user]``...) following fork semantics: a child starts with its parent's text at
the fork; a concatenate-and-append join appends each child's text after that point.
"""
from __future__ import annotations

import itertools
import os
import runpy
from typing import NamedTuple, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir_strategies import _Builder, texts, valid_graphs
from sglc.frontend.function import SglFunction
from sglc.ir import Graph, Guard, Node, Op, ValueType
from sglc.ir.verify import guard_chain, verify
from sglc.passes.fork_hints import fork_hints
from sglc.passes.merge_constants import merge_constants
from sglc.passes.prefix_hoisting import REWRITES_KEY, aggressive_prefix_hoisting, prefix_hoisting, shared_cut

SAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")
SAMPLES = {
    "essay_judge": "essay_judge", "few_shot_qa": "few_shot_qa", "tree_of_thought": "tree_of_thought",
    "multi_turn_chat": "multi_turn_chat", "json_extraction": "json_extraction", "react_agent": "react_agent",
    "call_other_program": "research_brief",
}


# ----- the reference prompt renderer -----
class Rendering(NamedTuple):
    observed: dict  # ("prompt", gen) / ("value", node) / ("final", stream) -> text or value
    fork_text: dict  # fork name -> the text its children start with


def render_path(g: Graph, cases: dict[str, int]) -> Rendering:
    """Run `g` symbolically for one outcome of every branch (`cases`: branch name -> case)."""
    text: dict[int, str] = {0: ""}
    values: dict[Node, object] = {}
    variables: dict[int, dict[str, object]] = {0: {}}
    scopes: dict[int, list[int]] = {}
    observed: dict = {}
    fork_text: dict[str, str] = {}
    for node in g.nodes:
        if any(cases[gd.branch.name] != gd.case for gd in guard_chain(node)):
            continue
        s, op = node.stream, node.op
        if op is Op.ARGUMENT:
            values[node] = f"<arg:{node.attrs['name']}>"
        elif op is Op.CONSTANT_TEXT:
            text[s] += node.attrs["text"]
        elif op is Op.APPEND:
            text[s] += str(values[node.inputs[0]])
        elif op in (Op.ROLE_BEGIN, Op.ROLE_END):
            text[s] += f"[{'/' if op is Op.ROLE_END else ''}{node.attrs['role']}]"
        elif op in (Op.IMAGE, Op.VIDEO):
            text[s] += f"<{op.value}:{values[node.inputs[0]] if node.inputs else node.attrs['path']}>"
        elif op in (Op.GEN, Op.SELECT):
            observed[("prompt", node.name)] = text[s]
            values[node] = f"<{op.value}:{node.name}>"
            variables[s][node.attrs["name"]] = values[node]
            text[s] += values[node]
        elif op is Op.VARIABLE:
            source = values[node.inputs[0]]
            values[node] = source[node.attrs["name"]] if isinstance(source, dict) else source
            observed[("value", node.name)] = values[node]
        elif op is Op.STREAM_TEXT:
            values[node] = observed[("value", node.name)] = text[s]
        elif op is Op.VAR_SCOPE_BEGIN:
            scopes.setdefault(s, []).append(len(text[s]))
        elif op is Op.VAR_SCOPE_END:
            values[node] = observed[("value", node.name)] = text[s][scopes[s].pop():]
            variables[s][node.attrs["name"]] = values[node]
        elif op is Op.FORK:
            fork_text[node.name] = text[s]
        elif op is Op.GET_FORK_ITEM:
            text[s], variables[s] = fork_text[node.inputs[0].name], {}
        elif op is Op.JOIN:
            children = [i.stream for i in node.inputs[1:]]
            start = len(fork_text[node.inputs[0].name])
            if node.attrs["mode"] == "concate_and_append":
                text[s] += "".join(text[c][start:] for c in children)
            values[node] = {v: tuple(variables[c].get(v) for c in children) for v in node.attrs.get("variables") or []}
    for s, t in text.items():
        observed[("final", s)] = t
    return Rendering(observed, fork_text)


def branch_paths(g: Graph, limit: int = 64) -> list[dict[str, int]]:
    branches = [n for n in g.nodes if n.op is Op.BRANCH]
    combos = itertools.product(*(range(len(b.attrs["cases"])) for b in branches))
    return [{b.name: c for b, c in zip(branches, combo)} for combo in itertools.islice(combos, limit)]


def assert_same_prompts(before: Graph, after: Graph) -> None:
    """Every prompt, value and original stream's final text is the same on every branch path."""
    for cases in branch_paths(before):
        old, new = render_path(before, cases).observed, render_path(after, cases).observed
        for key, value in old.items():
            assert new.get(key) == value, f"{key} changed on path {cases}"
        extra = {k for k in new if k not in old}
        assert all(k[0] == "final" and k[1] >= before.num_streams for k in extra), extra


def fork_prefix(g: Graph, fork: str, cases: Optional[dict[str, int]] = None) -> str:
    return render_path(g, cases or {b: 0 for b in branch_paths(g)[0]}).fork_text[fork]


def load_sample(name: str) -> Graph:
    namespace = runpy.run_path(os.path.join(SAMPLES_DIR, f"{name}.py"), run_name=f"sample_{name}")
    program = namespace[SAMPLES[name]]
    assert isinstance(program, SglFunction)
    return program.trace()


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


# ----- random graphs -----
class _SharedPrefixBuilder(_Builder):
    """Random valid graphs whose forks' children start with shared text (and sometimes a role)."""

    def fork(self, stream: int, guard, visible: list[Node], in_role: bool, depth: int) -> None:
        draw = self.draw
        n = draw(st.integers(1, 3))
        fork = self.node(Op.FORK, attrs={"n": n}, stream=stream, guard=guard)
        role = None if in_role else draw(st.sampled_from([None, "user", "assistant"]))
        words = st.text(alphabet=st.sampled_from("ab \n"), max_size=6)
        shared = draw(st.lists(st.one_of(words, st.just("append")), max_size=3))
        appendable = [v for v in visible if v.type in (ValueType.ANY, ValueType.STR)]
        stem = draw(words)
        lasts, gathered = [], set()
        for index in range(n):
            child = self.g.new_stream()
            self.node(Op.GET_FORK_ITEM, [fork], {"index": index}, stream=child, guard=guard)
            if role:
                self.node(Op.ROLE_BEGIN, attrs={"role": role}, stream=child, guard=guard)
            for part in shared:
                if part != "append":
                    self.node(Op.CONSTANT_TEXT, attrs={"text": part}, stream=child, guard=guard)
                elif appendable:
                    self.node(Op.APPEND, [appendable[0]], stream=child, guard=guard)
            self.node(Op.CONSTANT_TEXT, attrs={"text": stem + draw(words)}, stream=child, guard=guard)
            child_visible = list(visible)
            self.block(child, guard, child_visible, in_role or role is not None, depth + 1)
            if role:
                self.node(Op.ROLE_END, attrs={"role": role}, stream=child, guard=guard)
            visible.extend(v for v in child_visible if v not in visible)
            lasts.append(self.g.stream_nodes(child)[-1])
            gathered.update(v.attrs["name"] for v in child_visible if v.op in (Op.GEN, Op.SELECT))
        if all(last.guard == guard for last in lasts) and draw(st.booleans()):
            mode = draw(st.sampled_from(["gather_variable", "gather_variable", "concate_and_append"]))
            variables = sorted(gathered)[: draw(st.integers(0, 3))]
            visible.append(self.node(Op.JOIN, [fork, *lasts], {"mode": mode, "variables": variables},
                                     stream=stream, guard=guard))


@st.composite
def shared_prefix_graphs(draw, max_nodes: int = 40) -> Graph:
    b = _SharedPrefixBuilder(draw, max_nodes)
    visible: list[Node] = [b.node(Op.ARGUMENT, attrs={"name": "topic"}, type=ValueType.STR)]
    b.node(Op.CONSTANT_TEXT, attrs={"text": draw(texts)})
    b.block(0, None, visible, False, 0)
    if not any(n.op is Op.FORK for n in b.g.nodes):
        b.fork(0, None, visible, False, 0)
    return b.g


def _check_random(g: Graph) -> None:
    verify(g)
    result = prefix_hoisting(g)
    verify(result.graph)
    assert_same_prompts(g, result.graph)
    assert not prefix_hoisting(result.graph).modified
    for fork in (n for n in result.graph.nodes if n.op is Op.FORK):
        # NOTE: a fork's prefix can only grow: the text its children start with never shrinks.
        if fork.name in {n.name for n in g.nodes}:
            for cases in branch_paths(g, limit=4):
                old = render_path(g, cases).fork_text.get(fork.name)
                new = render_path(result.graph, cases).fork_text.get(fork.name)
                assert old is None or new.startswith(old)
    full = merge_constants(fork_hints(merge_constants(result.graph).graph).graph).graph
    verify(full)
    assert_same_prompts(g, full)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shared_prefix_graphs())
def test_random_graphs_with_shared_child_prefixes_keep_prompts(g: Graph):
    """On random valid graphs whose fork children share text, prompts never change and the result is a fixed point."""
    _check_random(g)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(valid_graphs())
def test_random_valid_graphs_keep_prompts(g: Graph):
    """On any random valid graph the result verifies, keeps every prompt and is a fixed point."""
    _check_random(g)
