"""The DSL's role surface: system/user/assistant as expressions, begin/end pairs and with-blocks."""
import os

import pytest

import sglc as sgl
from sglc.frontend.errors import TraceError
from sglc.ir import Op
from dsl_helpers import marker_line, only, traced

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


# ----- roles -----

def test_role_functions_wrap_expressions_in_begin_and_end():
    """system/user/assistant(expr) append ROLE_BEGIN, the expr, ROLE_END with the role attr."""
    @sgl.function
    def prog(s):
        s += sgl.system("be brief")
        s += sgl.user("hi")
        s += sgl.assistant(sgl.gen("reply"))

    g = traced(prog)
    seq = [(n.op, n.attrs.get("role")) for n in g.nodes if n.op in (Op.ROLE_BEGIN, Op.ROLE_END)]
    assert seq == [(Op.ROLE_BEGIN, "system"), (Op.ROLE_END, "system"), (Op.ROLE_BEGIN, "user"),
                   (Op.ROLE_END, "user"), (Op.ROLE_BEGIN, "assistant"), (Op.ROLE_END, "assistant")]
    assert g.nodes.index(only(g, Op.GEN)) == len(g.nodes) - 2


def test_role_begin_end_forms_and_with_blocks_match_the_expression_form():
    """user_begin()/user_end() and `with s.user():` record the same nodes as sgl.user(...)."""
    @sgl.function
    def expr_form(s):
        s += sgl.user("hi") + sgl.assistant("yo")

    @sgl.function
    def begin_end_form(s):
        s += sgl.user_begin() + "hi" + sgl.user_end()
        s += sgl.assistant_begin()
        s += "yo"
        s += sgl.assistant_end()

    @sgl.function
    def with_form(s):
        with s.user():
            s += "hi"
        s.assistant("yo")

    def shape(g):
        return [(n.op, dict(n.attrs)) for n in g.nodes]

    assert shape(traced(expr_form)) == shape(traced(begin_end_form)) == shape(traced(with_form))


def test_system_begin_end_and_empty_role():
    """sgl.system_begin/_end and sgl.user() with no expr give begin+end nodes."""
    @sgl.function
    def prog(s):
        s += sgl.system_begin() + "x" + sgl.system_end() + sgl.user()

    assert [n.op for n in traced(prog).nodes] == [Op.ROLE_BEGIN, Op.CONSTANT_TEXT, Op.ROLE_END,
                                                  Op.ROLE_BEGIN, Op.ROLE_END]


def test_nested_roles_are_a_trace_error():
    """Beginning a role inside an open role fails at the user's line."""
    @sgl.function
    def prog(s):
        s += sgl.user_begin()
        s += sgl.assistant("x")  # @nested-role

    with pytest.raises(TraceError, match=rf"{HERE}:{line_of('nested-role')}: cannot begin the assistant role"):
        prog.trace()


def test_ending_a_role_that_is_not_open_is_a_trace_error():
    """ROLE_END must close the open role."""
    @sgl.function
    def prog(s):
        s += sgl.user_end()

    with pytest.raises(TraceError, match="no role is open"):
        prog.trace()


