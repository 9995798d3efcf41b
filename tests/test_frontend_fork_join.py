"""The DSL's fork/join surface: child streams, inherited and gathered variables, join modes, errors."""
import os

import pytest

import sglc as sgl
from sglc.frontend.errors import TraceError
from sglc.ir import Op, ValueType
from dsl_helpers import marker_line, nodes_of, only, traced

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


# ----- fork / join -----

def test_fork_creates_child_streams_and_join_gathers_their_variables():
    """fork(n): FORK then n GET_FORK_ITEMs in new streams; join: JOIN(fork, last node of each child)."""
    @sgl.function
    def prog(s):
        s += "Topic: cats\n"
        forks = s.fork(3)  # @fork
        for i, f in enumerate(forks):
            f += "Idea " + str(i) + ": " + sgl.gen("idea", max_tokens=8)
        forks.join()  # @join

    g = traced(prog)
    fork = only(g, Op.FORK)
    items = nodes_of(g, Op.GET_FORK_ITEM)
    assert fork.attrs == {"n": 3} and fork.stream == 0 and fork.type is ValueType.FORK
    assert [i.attrs["index"] for i in items] == [0, 1, 2]
    assert sorted({i.stream for i in items}) == [1, 2, 3] and g.num_streams == 4
    assert all(i.inputs == (fork,) and i.type is ValueType.STREAM for i in items)
    gens = nodes_of(g, Op.GEN)
    assert [n.stream for n in gens] == [1, 2, 3]
    join = only(g, Op.JOIN)
    assert join.inputs == (fork, *gens) and join.stream == 0
    assert join.attrs == {"mode": "gather_variable", "variables": ["idea"]}
    assert fork.source == f"{HERE}:{line_of('fork')}" and join.source == f"{HERE}:{line_of('join')}"


def test_children_inherit_parent_variables_and_read_them_through_variable_nodes():
    """A child reading the parent's gen gets a VARIABLE node in the child's stream."""
    @sgl.function
    def prog(s):
        s += sgl.gen("topic", max_tokens=4)
        forks = s.fork(2)
        forks += lambda i: "About " + s["topic"] + " #" + str(i)
        forks.join()

    g = traced(prog)
    variables = nodes_of(g, Op.VARIABLE)
    assert [v.stream for v in variables] == [1, 2]
    assert all(v.inputs == (only(g, Op.GEN),) and v.attrs["name"] == "topic" for v in variables)


def test_parent_reads_child_results_as_variables_after_join():
    """forks[i]["x"] in the parent is a VARIABLE of child i's GEN, in stream 0."""
    @sgl.function
    def prog(s):
        forks = s.fork(2)
        forks += sgl.gen("x", max_tokens=2)
        forks.join()
        s += forks[1]["x"]

    g = traced(prog)
    var = only(g, Op.VARIABLE)
    assert var.stream == 0 and var.inputs[0].stream == 2 and var.inputs[0].op is Op.GEN
    assert only(g, Op.APPEND).inputs == (var,)


def test_gathered_list_is_read_through_the_join_and_cannot_be_appended():
    """After join, s["x"] is the gathered LIST (VARIABLE of the JOIN); appending it is an error."""
    got = {}

    @sgl.function
    def prog(s):
        forks = s.fork(2)
        forks += [sgl.gen("x"), sgl.gen("x")]
        forks.join()
        got["value"] = s["x"]
        s += s["x"]  # @append-list

    with pytest.raises(TraceError, match=rf"{HERE}:{line_of('append-list')}: .*gathered by join\(\) \(a list\)"):
        prog.trace()
    assert got["value"].type is ValueType.LIST and got["value"].producer.op is Op.JOIN


def test_concate_and_append_join_gathers_no_variables():
    """join(mode="concate_and_append") records the mode and an empty variable list."""
    @sgl.function
    def prog(s):
        forks = s.fork(2)
        forks += sgl.gen("x")
        forks.join(mode="concate_and_append")

    assert only(traced(prog), Op.JOIN).attrs == {"mode": "concate_and_append", "variables": []}


def test_using_a_child_after_join_or_joining_twice_is_an_error():
    """A joined child cannot be appended to, and a fork joins once."""
    @sgl.function
    def after(s):
        forks = s.fork(1)
        forks.join()
        forks[0] += "late"

    @sgl.function
    def twice(s):
        forks = s.fork(1)
        forks.join()
        forks.join()

    with pytest.raises(TraceError, match="after its fork was joined"):
        after.trace()
    with pytest.raises(TraceError, match="joined already"):
        twice.trace()


def test_bad_join_mode_and_fork_size_are_rejected():
    """join mode must be known; fork size must be an int >= 1."""
    @sgl.function
    def bad_mode(s):
        s.fork(2).join(mode="zip")

    @sgl.function
    def bad_size(s):
        s.fork(0)

    with pytest.raises(ValueError, match="join mode"):
        bad_mode.trace()
    with pytest.raises(ValueError, match="fork"):
        bad_size.trace()


def test_copy_is_a_one_child_fork_joined_at_block_end():
    """with s.copy() as c: ... records FORK(n=1), the child's nodes, then JOIN."""
    @sgl.function
    def prog(s):
        with s.copy() as c:
            c += sgl.gen("draft")

    g = traced(prog)
    assert [n.op for n in g.nodes] == [Op.FORK, Op.GET_FORK_ITEM, Op.GEN, Op.JOIN]


def test_child_streams_keep_the_role_open_at_the_fork():
    """A fork inside an open role lets each child close that role (roles are per stream)."""
    @sgl.function
    def prog(s):
        s += sgl.assistant_begin()
        forks = s.fork(2)
        for f in forks:
            f += sgl.gen("x") + sgl.assistant_end()
        forks.join()
        s += sgl.assistant_end()

    g = traced(prog)
    assert [n.stream for n in nodes_of(g, Op.ROLE_END)] == [1, 2, 0]


