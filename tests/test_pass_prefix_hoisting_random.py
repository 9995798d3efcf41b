"""prefix_hoisting on random graphs (hypothesis): no prompt, captured variable or stream text changes."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir_strategies import _Builder, texts, valid_graphs
from prompt_rendering import assert_same_prompts, branch_paths, render_path
from sglc.ir import Graph, Node, Op, ValueType
from sglc.ir.verify import verify
from sglc.passes.fork_hints import fork_hints
from sglc.passes.merge_constants import merge_constants
from sglc.passes.prefix_hoisting import prefix_hoisting


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
