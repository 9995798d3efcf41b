"""Hypothesis strategies: random attribute values and random VALID graphs (streams, forks, joins,
branches with guards, var scopes, roles), built statement by statement like a tracer would."""
from __future__ import annotations

from hypothesis import strategies as st

from sglc.ir import Graph, Guard, Node, Op, ValueType
from sglc.ir.types import TEXT_LIKE

_BOUNDARY_INTS = st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30, -(10**30)])
scalar_values = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | _BOUNDARY_INTS
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
attr_values = st.recursive(
    scalar_values,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
attr_dicts = st.dictionaries(st.text(max_size=8), attr_values, max_size=3)
var_names = st.sampled_from(["answer", "x", "verdict", "judgment", "q_1", "ответ"])
texts = st.text(max_size=10)

SAMPLING = {
    "max_new_tokens": st.integers(1, 4096),
    "stop": st.text(min_size=1, max_size=3) | st.lists(st.text(min_size=1, max_size=3), max_size=3),  # "" never stops
    "stop_token_ids": st.lists(st.integers(0, 50000), max_size=3),
    "temperature": st.floats(0, 5) | st.integers(0, 2),
    "top_p": st.floats(0.01, 1.0),
    "top_k": st.sampled_from([-1, 1, 40]),
    "min_p": st.floats(0, 1),
    "frequency_penalty": st.floats(-2, 2),
    "presence_penalty": st.floats(-2, 2),
    "ignore_eos": st.booleans(),
    "regex": texts,  # NOTE: no random `fsm`: verify requires it compiled from the gen's constraint
}


class _Builder:
    def __init__(self, draw, max_nodes: int) -> None:
        self.draw = draw
        self.g = Graph(draw(st.text(max_size=8)))
        self.g.meta = draw(attr_dicts)
        self.budget = max_nodes

    def node(self, op: Op, inputs=(), attrs=None, type=None, stream=0, guard=None) -> Node:
        self.budget -= 1
        meta = self.draw(st.one_of(st.just({}), st.fixed_dictionaries({"source": st.text(max_size=10)})))
        return self.g.create_node(op, inputs, attrs or {}, type, stream, guard, meta)

    def block(self, stream: int, guard, visible: list[Node], in_role: bool, depth: int) -> None:
        """Random statements into `stream` under `guard`; `visible` lists usable values (extended)."""
        draw = self.draw
        for _ in range(draw(st.integers(0, 5))):
            if self.budget <= 0:
                return
            kind = draw(st.sampled_from(
                ["text", "text", "append", "gen", "select", "variable", "stream_text", "media", "cache",
                 "scope", "role", "fork", "branch"]))
            if kind == "text":
                self.node(Op.CONSTANT_TEXT, attrs={"text": draw(texts)}, stream=stream, guard=guard)
            elif kind == "append" and any(v.type in TEXT_LIKE for v in visible):
                value = draw(st.sampled_from([v for v in visible if v.type in TEXT_LIKE]))
                self.node(Op.APPEND, [value], stream=stream, guard=guard)
            elif kind == "gen":
                vtype = draw(st.sampled_from([ValueType.STR, ValueType.INT, ValueType.FLOAT, ValueType.BOOL]))
                attrs = {"name": draw(var_names)}
                attrs.update(draw(st.fixed_dictionaries({}, optional=SAMPLING)))
                attrs.update({f"x_{k}": v for k, v in draw(attr_dicts).items()})
                if vtype is not ValueType.STR:
                    attrs["dtype"] = vtype.value
                visible.append(self.node(Op.GEN, attrs=attrs, type=vtype, stream=stream, guard=guard))
            elif kind == "select":
                choices = draw(st.lists(texts, min_size=1, max_size=3, unique=True))
                visible.append(self.node(Op.SELECT, attrs={"name": draw(var_names), "choices": choices},
                                         stream=stream, guard=guard))
            elif kind == "variable":
                producers = [v for v in visible if v.op in (Op.GEN, Op.SELECT, Op.VAR_SCOPE_END, Op.JOIN)]
                if producers:
                    src = draw(st.sampled_from(producers))
                    if src.op is Op.JOIN:
                        if src.attrs["variables"]:
                            name = draw(st.sampled_from(src.attrs["variables"]))
                            visible.append(self.node(Op.VARIABLE, [src], {"name": name}, ValueType.LIST, stream, guard))
                    else:
                        visible.append(self.node(Op.VARIABLE, [src], {"name": src.attrs["name"]}, src.type, stream, guard))
            elif kind == "stream_text":
                visible.append(self.node(Op.STREAM_TEXT, stream=stream, guard=guard))
            elif kind == "media":
                op = draw(st.sampled_from([Op.IMAGE, Op.VIDEO]))
                attrs = {"num_frames": draw(st.integers(1, 64))} if op is Op.VIDEO else {}
                text_values = [v for v in visible if v.type in TEXT_LIKE]
                if text_values and draw(st.booleans()):
                    self.node(op, [draw(st.sampled_from(text_values))], attrs, stream=stream, guard=guard)
                else:
                    self.node(op, attrs={**attrs, "path": draw(st.text(min_size=1, max_size=8))}, stream=stream, guard=guard)
            elif kind == "cache":
                self.node(Op.CACHE_PREFIX, stream=stream, guard=guard)
            elif kind == "scope" and depth < 3:
                name = draw(var_names)
                self.node(Op.VAR_SCOPE_BEGIN, attrs={"name": name}, stream=stream, guard=guard)
                self.block(stream, guard, visible, in_role, depth + 1)
                visible.append(self.node(Op.VAR_SCOPE_END, attrs={"name": name}, stream=stream, guard=guard))
            elif kind == "role" and not in_role and depth < 3:
                role = draw(st.sampled_from(["system", "user", "assistant"]))
                self.node(Op.ROLE_BEGIN, attrs={"role": role}, stream=stream, guard=guard)
                self.block(stream, guard, visible, True, depth + 1)
                self.node(Op.ROLE_END, attrs={"role": role}, stream=stream, guard=guard)
            elif kind == "fork" and depth < 2:
                self.fork(stream, guard, visible, in_role, depth)
            elif kind == "branch" and depth < 2:
                choices = draw(st.lists(texts, min_size=1, max_size=3, unique=True))
                sel = self.node(Op.SELECT, attrs={"name": draw(var_names), "choices": choices}, stream=stream, guard=guard)
                br = self.node(Op.BRANCH, [sel], {"cases": list(choices)}, stream=stream, guard=guard)
                visible.append(sel)
                for case in range(len(choices)):
                    # NOTE: values made in a case stay visible only inside that case.
                    self.block(stream, Guard(br, case), list(visible), in_role, depth + 1)

    def fork(self, stream: int, guard, visible: list[Node], in_role: bool, depth: int) -> None:
        draw = self.draw
        n = draw(st.integers(1, 3))
        fork = self.node(Op.FORK, attrs={"n": n}, stream=stream, guard=guard)
        lasts, gathered = [], set()
        for index in range(n):
            child = self.g.new_stream()
            self.node(Op.GET_FORK_ITEM, [fork], {"index": index}, stream=child, guard=guard)
            child_visible = list(visible)
            self.block(child, guard, child_visible, in_role, depth + 1)
            visible.extend(v for v in child_visible if v not in visible)  # cross-stream reads are fine
            lasts.append(self.g.stream_nodes(child)[-1])
            gathered.update(v.attrs["name"] for v in child_visible if v.op in (Op.GEN, Op.SELECT))
        # A child that ends inside a branch case would need one join per case (as the tracer
        # makes); keep it simple and leave such forks unjoined.
        ends_in_case = any(last.guard != guard for last in lasts)
        if not ends_in_case and draw(st.booleans()):
            mode = draw(st.sampled_from(["gather_variable", "concate_and_append"]))
            variables = sorted(gathered)[: draw(st.integers(0, 3))]
            visible.append(self.node(Op.JOIN, [fork, *lasts], {"mode": mode, "variables": variables}, stream=stream, guard=guard))


@st.composite
def valid_graphs(draw, max_nodes: int = 40) -> Graph:
    """A random graph that passes verify()."""
    b = _Builder(draw, max_nodes)
    visible: list[Node] = []
    for name in draw(st.lists(st.sampled_from(["topic", "essay", "n", "flag", "items"]), max_size=3, unique=True)):
        vtype = draw(st.sampled_from([ValueType.ANY, ValueType.STR, ValueType.INT, ValueType.FLOAT,
                                      ValueType.BOOL, ValueType.LIST]))
        attrs = {"name": name}
        if draw(st.booleans()):
            attrs["default"] = draw(attr_values)
        visible.append(b.node(Op.ARGUMENT, attrs=attrs, type=vtype))
    b.block(0, None, visible, False, 0)
    return b.g
