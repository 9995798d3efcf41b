"""The SSA listing, the table and the DOT export show every node, stream, case and edge."""
from __future__ import annotations

import re

from ir_samples import every_op_graph, linear_graph
from sglc.ir import Graph, Op
from sglc.ir.dot import order_edges, to_dot
from sglc.ir.printing import TABLE_COLUMNS, format_graph, format_node, format_tabular


def test_node_line_has_fx_style_ssa_form():
    """A node prints as `%name : type = op[attrs](inputs, stream=N)  # source`."""
    g = every_op_graph()
    line = format_node(g.find("judgment_1"))
    assert line.startswith("%judgment_1 : str = gen[name='judgment', max_new_tokens=256, stop=['END', '\\n\\n'],")
    assert line.endswith("](stream=2)  # essay_judge.py:21")
    assert format_node(g.find("append")) == "%append : none = append(%essay)  # essay_judge.py:12"


def test_str_of_graph_is_the_listing_with_one_line_per_node():
    """str(graph) == format_graph(graph), and every node appears on exactly one line."""
    g = every_op_graph()
    text = str(g)
    assert text == format_graph(g)
    node_lines = [line for line in text.splitlines() if line.lstrip().startswith("%")]
    assert len(node_lines) == len(g.nodes)
    assert text.splitlines()[0] == "graph essay_judge(%image_path, %essay):  # 74 nodes, 4 streams"


def test_listing_groups_streams_and_cases_by_indentation():
    """Child streams and branch cases get a header and one more level of indentation."""
    lines = str(every_op_graph()).splitlines()
    assert "  case 0 'yes' of %branch:" in lines
    assert "  case 1 'no' of %branch:" in lines
    assert "    stream 2 (item 1 of %fork):" in lines
    gen_line = next(line for line in lines if line.lstrip().startswith("%judgment_2 "))
    assert gen_line.startswith("      %judgment_2")  # graph > case > stream
    join_line = next(line for line in lines if line.lstrip().startswith("%join "))
    assert join_line.startswith("    %join") and "(%fork, %role_end_6, %role_end_8, %role_end_10)" in join_line


def test_listing_shows_types_exactly_and_shortens_long_values():
    """Values print with repr (1 vs 1.0 vs True); bytes show their length; long strings are cut."""
    g = Graph()
    g.create_node(Op.GEN, attrs={"name": "x", "max_new_tokens": 1, "temperature": 1.0, "ignore_eos": True,
                                 "fsm": b"\x00" * 1000, "regex": "a" * 500})
    text = str(g)
    assert "max_new_tokens=1, temperature=1.0, ignore_eos=True, fsm=<1000 bytes>" in text
    assert "a" * 100 not in text and "..." in text


def test_table_has_a_row_per_node_and_all_columns():
    """format_tabular prints the header columns and one row per node with guard and inputs."""
    g = every_op_graph()
    lines = format_tabular(g).splitlines()
    assert [c.strip() for c in lines[0].split("|")] == list(TABLE_COLUMNS)
    assert len(lines) == 2 + len(g.nodes)
    join_row = next(line for line in lines if line.startswith("%join "))
    cells = [c.strip() for c in join_row.split("|")]
    assert cells[1:6] == ["join", "none", "0", "%branch[0]", "%fork, %role_end_6, %role_end_8, %role_end_10"]


def test_dot_has_one_cluster_per_stream_and_every_node():
    """to_dot makes a cluster per stream, declares each node once, and balances its braces."""
    g = every_op_graph()
    dot = to_dot(g)
    assert dot.startswith('digraph "essay_judge" {')
    assert len(re.findall(r"subgraph cluster_stream_\d+ \{", dot)) == g.num_streams
    for node in g.nodes:
        assert len(re.findall(rf'^    "{node.name}" \[label=', dot, re.MULTILINE)) == 1
    structure = re.sub(r'"(?:[^"\\]|\\.)*"', '""', dot)  # NOTE: braces inside labels (a template) do not count
    assert structure.count("{") == structure.count("}")


def test_dot_styles_data_and_order_edges_differently_and_labels_cases():
    """Data edges are solid, stream-order edges dashed; edges into a case carry the case name."""
    dot = to_dot(every_op_graph())
    assert '"related" -> "branch";' in dot  # data edge, default style
    assert '"fork" -> "get_fork_item";' in dot
    assert '"branch" -> "cache_prefix" [style=dashed, color="#6b7280", label="yes"' in dot
    assert '"branch" -> "constant_text_11" [style=dashed, color="#6b7280", label="no"' in dot


def test_order_edges_follow_each_stream_and_skip_other_cases():
    """The first node of case 'no' follows the branch, not the last node of case 'yes'."""
    g = every_op_graph()
    previous = {node.name: prev.name for prev, node, _ in order_edges(g)}
    assert previous["constant_text_11"] == "branch"
    assert previous["role_begin_5"] == "get_fork_item"  # within stream 1
    assert "image_path" not in previous and "variable" not in previous  # pure values


def test_dot_escapes_quotes_and_backslashes():
    """Labels with quotes, backslashes and newlines stay valid DOT strings."""
    g = linear_graph()
    g.find("constant_text").attrs["text"] = 'say "hi"\\n\n'
    dot = to_dot(g)
    assert '\\"hi\\"' in dot and "\n\n" not in dot.replace("\n}\n", "")


def test_nested_fork_streams_print_inside_their_parent_stream():
    """A fork inside a child stream lists its own children one level deeper, under the parent stream."""
    g = Graph("nested")
    outer = g.create_node(Op.FORK, attrs={"n": 1})
    s1 = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [outer], attrs={"index": 0}, stream=s1)
    inner = g.create_node(Op.FORK, attrs={"n": 1}, stream=s1)
    s2 = g.new_stream()
    g.create_node(Op.GET_FORK_ITEM, [inner], attrs={"index": 0}, stream=s2)
    g.create_node(Op.GEN, attrs={"name": "deep"}, stream=s2)
    lines = str(g).splitlines()
    assert "  stream 1 (item 0 of %fork):" in lines
    assert "    stream 2 (item 0 of %fork_1):" in lines
    assert "      %deep : str = gen[name='deep'](stream=2)" in lines


def test_lowered_fsm_attr_prints_its_size_not_its_transition_table():
    """A gen lowered by lower_constraints shows `fsm=<fsm N states ...>` and keeps the listing one short line."""
    import sglc as sgl

    @sgl.function
    def ip(s):
        s += "ip: " + sgl.gen("ip", regex=r"[0-9]{1,3}(\.[0-9]{1,3}){3}")

    graph = ip.compile().graph
    gen_line = next(line for line in str(graph).splitlines() if "= gen[" in line)
    fsm = next(n for n in graph.nodes if n.op.value == "gen").attrs["fsm"]
    assert f"fsm=<fsm {fsm['num_states']} states, {len(fsm['finals'])} final, {fsm['num_classes']} classes>" in gen_line
    assert "transitions" not in gen_line and len(gen_line) < 200
