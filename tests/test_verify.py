"""verify(): every valid graph passes; each broken invariant gets its own rejection."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir_samples import every_op_graph, linear_graph, src
from ir_strategies import valid_graphs
from sglc.errors import VerifyError
from sglc.ir import Graph, Guard, Op, ValueType
from sglc.ir.verify import verify


def forked(n: int = 2, join: bool = True) -> tuple[Graph, dict]:
    """stream 0: text, fork(n); each child: get_fork_item, gen; then join."""
    g = Graph("forked")
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "Q: "}, meta=src(1))
    fork = g.create_node(Op.FORK, attrs={"n": n}, meta=src(2))
    items, gens = [], []
    for i in range(n):
        stream = g.new_stream()
        items.append(g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": i}, stream=stream, meta=src(3)))
        gens.append(g.create_node(Op.GEN, attrs={"name": "answer", "max_new_tokens": 8}, stream=stream, meta=src(4)))
    parts = {"fork": fork, "items": items, "gens": gens}
    if join:
        parts["join"] = g.create_node(
            Op.JOIN, [fork, *gens], attrs={"mode": "gather_variable", "variables": ["answer"]}, meta=src(5)
        )
    return g, parts


def branched() -> tuple[Graph, dict]:
    g = Graph("branched")
    sel = g.create_node(Op.SELECT, attrs={"name": "tool", "choices": ["search", "answer"]}, meta=src(1))
    br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["search", "answer"]}, meta=src(2))
    a = g.create_node(Op.GEN, attrs={"name": "query"}, guard=Guard(br, 0), meta=src(3))
    b = g.create_node(Op.GEN, attrs={"name": "final"}, guard=Guard(br, 1), meta=src(5))
    return g, {"select": sel, "branch": br, "a": a, "b": b}


def rejects(g: Graph, *fragments: str) -> str:
    with pytest.raises(VerifyError) as info:
        verify(g)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ----- valid graphs -----
def test_valid_graphs_pass():
    """Hand-built graphs covering every op, forks, joins and branches verify cleanly."""
    for g in (linear_graph(), every_op_graph(), forked()[0], forked(join=False)[0], branched()[0], Graph()):
        verify(g)


def test_nested_branches_and_scopes_balanced_per_path_pass():
    """A var scope opened before a branch may close in each case (balance holds on every path)."""
    g2 = Graph("scoped")
    g2.create_node(Op.VAR_SCOPE_BEGIN, attrs={"name": "x"})
    sel = g2.create_node(Op.SELECT, attrs={"name": "c", "choices": ["a", "b"]})
    br = g2.create_node(Op.BRANCH, [sel], attrs={"cases": ["a", "b"]})
    sel2 = g2.create_node(Op.SELECT, attrs={"name": "d", "choices": ["p", "q"]}, guard=Guard(br, 0))
    br2 = g2.create_node(Op.BRANCH, [sel2], attrs={"cases": ["p", "q"]}, guard=Guard(br, 0))
    g2.create_node(Op.VAR_SCOPE_END, attrs={"name": "x"}, guard=Guard(br2, 0))
    g2.create_node(Op.VAR_SCOPE_END, attrs={"name": "x"}, guard=Guard(br2, 1))
    g2.create_node(Op.VAR_SCOPE_END, attrs={"name": "x"}, guard=Guard(br, 1))
    verify(g2)


# ----- the five required rejections -----
def test_use_before_definition_is_rejected():
    """A node whose input comes later in graph order is rejected, naming both nodes."""
    g = linear_graph()
    append = g.find("append")
    g.move_before(append, g.find("topic"))
    rejects(g, "%append (append) at essay_judge.py:2", "uses %topic before its definition")


def test_variable_naming_no_producer_is_rejected():
    """A VARIABLE whose input produces a different name (or no variable) is rejected."""
    g = linear_graph()
    g.find("variable").attrs["name"] = "missing"
    rejects(g, "%variable (variable)", "reads 'missing' from %essay, which produces 'essay'")
    g2 = Graph()
    text = g2.create_node(Op.CONSTANT_TEXT, attrs={"text": "x"})
    g2.create_node(Op.VARIABLE, [text], attrs={"name": "x"})
    rejects(g2, "which produces no variable")


def test_variable_reading_a_join_that_does_not_gather_it_is_rejected():
    """A VARIABLE may read a JOIN only for a name in its `variables`."""
    g, p = forked()
    g.create_node(Op.VARIABLE, [p["join"]], attrs={"name": "other"}, type=ValueType.LIST)
    rejects(g, "does not gather it")


def test_join_without_its_fork_is_rejected():
    """A JOIN whose first input is not a FORK is rejected."""
    g, p = forked()
    join = p["join"]
    g.set_inputs(join, [g.find("constant_text"), *join.inputs[1:]])
    rejects(g, "%join (join)", "first input must be a fork")


def test_duplicate_names_are_rejected():
    """Two nodes with one name are rejected."""
    g = linear_graph()
    g.find("append").name = "topic"
    rejects(g, "duplicate node name %topic")


def test_wrong_input_type_is_rejected():
    """APPEND of a FORK handle, GET_FORK_ITEM of a gen, BRANCH on a gen: each rejected."""
    g, p = forked()
    g.create_node(Op.APPEND, [p["fork"]], meta=src(9))
    rejects(g, "%append (append) at essay_judge.py:9", "has type fork, not a text-like value")

    g, p = forked(join=False)
    g.set_inputs(p["items"][1], [p["gens"][0]])
    rejects(g, "%get_fork_item_1", "first input must be a fork")

    g = linear_graph()
    g.create_node(Op.BRANCH, [g.find("essay")], attrs={"cases": ["a"]})
    rejects(g, "%branch (branch)", "not a select")


# ----- further rules -----
def test_foreign_node_is_rejected():
    """A node whose `graph` is another graph is rejected (ownership)."""
    g, other = linear_graph(), linear_graph()
    g.nodes.append(other.find("topic"))
    rejects(g, "belongs to another graph")


def test_inconsistent_users_are_rejected():
    """A node missing from its input's users is rejected."""
    g = linear_graph()
    g.find("topic").users.clear()
    rejects(g, "missing from the users of its input %topic")


def test_wrong_arity_is_rejected():
    """A CONSTANT_TEXT with an input is rejected."""
    g = linear_graph()
    g.set_inputs(g.find("constant_text"), [g.find("topic")])
    rejects(g, "takes 0 inputs, got 1")


@pytest.mark.parametrize(
    "op, attrs, fragment",
    [
        (Op.GEN, {}, "missing required attribute 'name'"),
        (Op.GEN, {"name": "x", "max_new_tokens": 0}, "must be an int in [1, 1048576]"),
        (Op.GEN, {"name": "x", "max_new_tokens": True}, "must be an int in [1, 1048576]"),
        (Op.GEN, {"name": "x", "max_new_tokens": 10**30}, "must be an int in [1, 1048576]"),
        (Op.GEN, {"name": "x", "temperature": float("inf")}, "must be a finite number"),
        (Op.GEN, {"name": "x", "temperature": 1e6}, "must be a number in [0, 10000]"),
        (Op.GEN, {"name": "x", "frequency_penalty": float("-inf")}, "must be a finite number"),
        (Op.GEN, {"name": "x", "stop_token_ids": [1, -5]}, "token ids"),
        (Op.GEN, {"name": "x", "top_k": 2**40}, "-1 or an int in [1, 2147483647]"),
        (Op.GEN, {"name": "x", "fsm": b"\x00"}, "must be a lowered FSM"),
        (Op.SELECT, {"name": "x", "choices": ["a"], "temperature": float("inf")}, "must be a finite number"),
        (Op.GEN, {"name": "x", "temperature": -0.1}, "temperature=-0.1"),
        (Op.GEN, {"name": "x", "top_p": 0.0}, "must be a number in (0, 1]"),
        (Op.GEN, {"name": "x", "top_k": 0}, "-1 or an int in [1, 2147483647]"),
        (Op.GEN, {"name": "x", "min_p": 1.5}, "must be a number in [0, 1]"),
        (Op.GEN, {"name": "x", "presence_penalty": 3}, "must be a number in [-2, 2]"),
        (Op.GEN, {"name": "x", "stop": ["a", 1]}, "a str or a list of str"),
        (Op.GEN, {"name": "x", "ignore_eos": 1}, "must be a bool"),
        (Op.GEN, {"name": "x", "dtype": "complex"}, "must be one of"),
        (Op.SELECT, {"name": "x", "choices": []}, "must not be empty"),
        (Op.SELECT, {"name": "x", "choices": ["a", "a"]}, "must not repeat"),
        (Op.ROLE_BEGIN, {"role": "robot"}, "must be one of"),
        (Op.FORK, {"n": 0}, "must be an int in [1, 65536]"),
        (Op.VIDEO, {"path": "v.mp4", "num_frames": 10**9}, "must be an int in [1, 65536]"),
        (Op.CONSTANT_TEXT, {"text": 3}, "must be str"),
    ],
)
def test_bad_attributes_are_rejected(op, attrs, fragment):
    """Missing required attributes, wrong Python types and out-of-range sampling values are rejected."""
    g = Graph()
    g.create_node(op, attrs=attrs)
    rejects(g, f"({op.value})", fragment)


def test_sampling_errors_name_the_node_and_its_source_line():
    """An out-of-range sampling value is reported with the node, its op and the user's file:line."""
    g = Graph()
    g.create_node(Op.GEN, attrs={"name": "x", "max_new_tokens": 10**30}, meta=src(7))
    rejects(g, "%x (gen) at essay_judge.py:7", "max_new_tokens=1000000000000000000000000000000")


def lowered_gen(**constraint) -> Graph:
    """One gen with `constraint`, lowered by the real pass (its fsm records its pattern)."""
    from sglc.passes.lower_constraints import lower_constraints

    g = Graph("lowered")
    g.create_node(Op.GEN, attrs={"name": "x", **constraint}, meta=src(9))
    return lower_constraints(g).graph


@pytest.mark.parametrize("constraint, edited", [
    ({"regex": "[0-9]+"}, {"regex": "[a-z]+"}),
    ({"json_schema": {"type": "integer"}}, {"json_schema": {"type": "string"}}),
    ({"dtype": "int"}, {"dtype": "bool"}),
    ({"choices": ["yes", "no"]}, {"choices": ["yes", "maybe"]}),
])
def test_a_lowered_fsm_must_come_from_the_constraint_the_gen_shows(constraint, edited):
    """A gen whose constraint attr was changed after lowering (fsm runs, attr shows) is rejected."""
    g = lowered_gen(**constraint)
    verify(g)
    g.find("x").attrs.update(edited)
    rejects(g, "%x (gen) at essay_judge.py:9", "fsm was compiled from", "recompile")


def test_a_lowered_fsm_without_exactly_one_constraint_is_rejected():
    """An fsm on a gen with no constraint attr, or with two, is rejected (nothing says what it runs)."""
    g = lowered_gen(regex="a+")
    del g.find("x").attrs["regex"]
    rejects(g, "exactly one of regex, json_schema, dtype, choices (got none)")
    g = lowered_gen(regex="a+")
    g.find("x").attrs["dtype"] = "int"
    rejects(g, "(got regex, dtype)")


def test_an_invalid_constraint_beside_a_lowered_fsm_is_rejected():
    """A json_schema that is no valid schema, next to an fsm, is rejected naming the attribute."""
    g = lowered_gen(json_schema={"type": "integer"})
    g.find("x").attrs["json_schema"] = "{not json"
    rejects(g, "attribute json_schema is not a valid constraint")


@pytest.mark.parametrize("meta, fragment", [
    ({"num_api_spec_tokens": "abc"}, "meta num_api_spec_tokens='abc': must be an int in [1, 1048576]"),
    ({"num_api_spec_tokens": 0}, "must be an int in [1, 1048576]"),
    ({"arg_names": "topic"}, "meta arg_names='topic': must be a list of str"),
    ({"arg_names": ["essay"]}, "meta arg_names=['essay'] differ from the graph's arguments (['topic'])"),
    ({"source_file": 3}, "meta source_file=3: must be str"),
    ({"prompt_rewrites": [1]}, "meta prompt_rewrites=[1]: must be a list of str"),
])
def test_graph_meta_entries_are_type_checked(meta, fragment):
    """The meta entries the compiler writes (and the executor reads) have their documented types."""
    g = linear_graph()
    g.meta.update(meta)
    rejects(g, fragment)


def test_wrong_output_type_is_rejected():
    """A SELECT typed INT and a VARIABLE typed unlike its producer are rejected."""
    g = Graph()
    g.create_node(Op.SELECT, attrs={"name": "x", "choices": ["a"]}, type=ValueType.INT)
    rejects(g, "output type 'int' is not str")
    g = linear_graph()
    g.find("variable").type = ValueType.INT
    rejects(g, "has type int, but %essay gives str")


def test_branch_cases_must_equal_select_choices():
    """A BRANCH whose cases differ from its select's choices is rejected."""
    g, p = branched()
    p["branch"].attrs["cases"] = ["answer", "search"]
    rejects(g, "differ from %tool's choices")


def test_guard_on_a_non_branch_or_out_of_range_case_is_rejected():
    """A guard must name an earlier BRANCH and a case index in range."""
    g, p = branched()
    p["b"].guard = Guard(p["branch"], 2)
    rejects(g, "guard case 2 out of range for %branch (2 cases)")
    g, p = branched()
    p["b"].guard = Guard(p["select"], 0)
    rejects(g, "a select, not a branch")


def test_using_a_value_from_another_case_is_rejected():
    """A node may not use a value that exists only under a branch case it is not under."""
    g, p = branched()
    g.create_node(Op.VARIABLE, [p["a"]], attrs={"name": "query"}, guard=Guard(p["branch"], 1))
    rejects(g, "exists only under case 0 of %branch")


def test_child_stream_must_begin_with_get_fork_item():
    """A stream other than 0 that does not begin with its GET_FORK_ITEM is rejected."""
    g, p = forked(join=False)
    g.move_before(p["gens"][0], p["items"][0])
    rejects(g, "stream 1 must begin with a get_fork_item")
    g = Graph()
    g.new_stream()
    rejects(g, "stream 1 has no nodes")


def test_stream_continuing_after_its_join_is_rejected():
    """No node of a joined child stream may follow the join (the join gathers its last node)."""
    g, p = forked()
    g.create_node(Op.CONSTANT_TEXT, attrs={"text": "late"}, stream=1)
    rejects(g, "stream 1 continues after it was joined")


def test_join_of_a_fork_in_another_stream_or_twice_is_rejected():
    """A JOIN must sit in its fork's stream, gather every child, and join a fork only once."""
    g, p = forked()
    g.create_node(Op.JOIN, list(p["join"].inputs), attrs={"mode": "gather_variable"})
    rejects(g, "is already joined by %join")
    g, p = forked(join=False)
    g.create_node(Op.JOIN, [p["fork"], p["gens"][0]], attrs={"mode": "gather_variable"})
    rejects(g, "last node of each of its 2 streams")


def test_join_must_gather_the_last_node_of_each_child():
    """A JOIN gathering an earlier node of a child stream (not its last) is rejected."""
    g, p = forked(join=False)
    items = p["items"]
    g.create_node(Op.JOIN, [p["fork"], items[0], p["gens"][1]], attrs={"mode": "gather_variable"})
    rejects(g, "gathers %get_fork_item, but the last node of stream 1 before it is %answer")


def test_one_join_per_exclusive_branch_case_passes():
    """A fork joined once in each case of a branch in a child stream is valid (one join per path)."""
    g = Graph("child_branch")
    fork = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 0}, stream=child)
    sel = g.create_node(Op.SELECT, attrs={"name": "v", "choices": ["y", "n"]}, stream=child)
    br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["y", "n"]}, stream=child)
    why = g.create_node(Op.GEN, attrs={"name": "why"}, stream=child, guard=Guard(br, 0))
    g.create_node(Op.JOIN, [fork, why], attrs={"mode": "gather_variable"}, guard=Guard(br, 0))
    g.create_node(Op.JOIN, [fork, br], attrs={"mode": "gather_variable"}, guard=Guard(br, 1))
    verify(g)
    g.create_node(Op.JOIN, [fork, br], attrs={"mode": "gather_variable"}, guard=Guard(br, 1))
    rejects(g, "%fork is already joined by %join_1")


def test_get_fork_item_index_out_of_range_or_repeated_is_rejected():
    """GET_FORK_ITEM index must be < n and unique per fork."""
    g, p = forked(join=False)
    p["items"][1].attrs["index"] = 2
    rejects(g, "index 2 out of range")
    g, p = forked(join=False)
    p["items"][1].attrs["index"] = 0
    rejects(g, "item 0 of %fork already exists")


def test_unbalanced_var_scope_is_rejected():
    """A var scope never closed, or closed under another name, is rejected."""
    g = Graph()
    g.create_node(Op.VAR_SCOPE_BEGIN, attrs={"name": "x"}, meta=src(3))
    rejects(g, "%var_scope_begin (var_scope_begin) at essay_judge.py:3", "never closed")
    g.create_node(Op.VAR_SCOPE_END, attrs={"name": "y"})
    rejects(g, "closes var scope 'y', but the innermost open one is 'x'")


def test_var_scope_closed_on_one_path_only_is_rejected():
    """Balance must hold along every branch path, not just in total."""
    g = Graph()
    g.create_node(Op.VAR_SCOPE_BEGIN, attrs={"name": "x"})
    sel = g.create_node(Op.SELECT, attrs={"name": "c", "choices": ["a", "b"]})
    br = g.create_node(Op.BRANCH, [sel], attrs={"cases": ["a", "b"]})
    g.create_node(Op.VAR_SCOPE_END, attrs={"name": "x"}, guard=Guard(br, 0))
    rejects(g, "var scope 'x' is never closed")


def test_unbalanced_roles_are_rejected():
    """Roles do not nest, end only the open role, and stream 0 ends with none open."""
    g = Graph()
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "user"})
    rejects(g, "role 'user' is never closed")
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "assistant"})
    rejects(g, "begins role 'assistant' while role 'user' is open")
    g = Graph()
    g.create_node(Op.ROLE_END, attrs={"role": "user"})
    rejects(g, "ends role 'user', but no role is open")


def test_child_stream_inherits_the_open_role_of_its_fork():
    """A fork inside a role gives children that may close that role without reopening it."""
    g = Graph()
    g.create_node(Op.ROLE_BEGIN, attrs={"role": "assistant"})
    fork = g.create_node(Op.FORK, attrs={"n": 1})
    child = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [fork], attrs={"index": 0}, stream=child)
    g.create_node(Op.GEN, attrs={"name": "x"}, stream=child)
    g.create_node(Op.ROLE_END, attrs={"role": "assistant"}, stream=child)
    g.create_node(Op.ROLE_END, attrs={"role": "assistant"})
    verify(g)


def test_bad_meta_and_attr_values_are_rejected():
    """Node meta must be str -> str and attrs must stay in the attribute domain."""
    g = linear_graph()
    g.find("append").meta["line"] = 3  # type: ignore[assignment]
    rejects(g, "meta entries must be str -> str")
    g = linear_graph()
    g.find("essay").attrs["temperature"] = float("nan")
    rejects(g, "NaN")


def test_error_names_node_op_and_source_line():
    """The message has the form `verify: %name (op) at file:line: problem`, on one line."""
    g = linear_graph()
    g.find("variable").attrs["name"] = "nope"
    message = rejects(g)
    assert message.startswith("verify: %variable (variable) at essay_judge.py:4: ")


# ----- robustness -----


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_graphs(), st.data())
def test_any_single_mutation_verifies_or_raises_verify_error(g: Graph, data):
    """Corrupting one thing of a valid graph never crashes verify: it passes or raises VerifyError."""
    if not g.nodes:
        return
    node = data.draw(st.sampled_from(g.nodes))
    other = data.draw(st.sampled_from(g.nodes))
    mutation = data.draw(st.sampled_from(["op", "type", "stream", "input", "move", "drop_attr", "attr", "guard"]))
    if mutation == "op":
        node.op = data.draw(st.sampled_from(list(Op)))
    elif mutation == "type":
        node.type = data.draw(st.sampled_from(list(ValueType)))
    elif mutation == "stream":
        node.stream = data.draw(st.integers(0, g.num_streams))
    elif mutation == "input":
        g.set_inputs(node, [*node.inputs, other][-data.draw(st.integers(1, 3)):])
    elif mutation == "move" and node is not other:
        g.move_before(node, other)
    elif mutation == "drop_attr" and node.attrs:
        del node.attrs[data.draw(st.sampled_from(sorted(node.attrs)))]
    elif mutation == "attr":
        key = data.draw(st.sampled_from(["name", "n", "index", "cases", "choices", "role", "text", "mode", "variables"]))
        node.attrs[key] = data.draw(st.sampled_from([None, 0, -1, 5, "x", ["a"], [], True, 1.5]))
    elif mutation == "guard":
        node.guard = Guard(other, data.draw(st.integers(-1, 3)))
    try:
        verify(g)
    except VerifyError as err:
        assert "\n" not in str(err)
