"""Human-readable forms of a Graph: an SSA listing (`str(graph)`) and a table.

The listing prints one node per line in graph order,
``%judgment : str = gen[name='judgment', max_new_tokens=256, stop='END'](stream=2)  # essay_judge.py:21``,
indented under a header for each child stream (``stream 2 (item 1 of %fork):``) and for each
branch case (``case 0 'yes' of %branch:``). Long strings and bytes are shortened; everything
else is printed with repr so that types stay visible (1 vs 1.0 vs True).
"""
from __future__ import annotations

from typing import Any

from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.ops import Op
from sglc.ir.types import is_grammar_value

MAX_STR = 60  # longer strings are cut in listings (the graph itself keeps them whole)


def format_value(value: Any, max_str: int = MAX_STR) -> str:
    """repr(value), but long strings are cut and bytes are shown as their length."""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str):
        return repr(value) if len(value) <= max_str else repr(value[: max_str - 3]) + "..."
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v, max_str) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {format_value(v, max_str)}" for k, v in value.items()) + "}"
    return repr(value)


def format_fsm(fsm: Any) -> str:
    """A lowered constraint in one short token: its size, not its transition table."""
    if isinstance(fsm, dict) and "num_states" in fsm:
        finals = fsm.get("finals") or []
        return f"<fsm {fsm['num_states']} states, {len(finals)} final, {fsm.get('num_classes', '?')} classes>"
    return format_value(fsm)


def format_grammar(grammar: Any, max_str: int = MAX_STR) -> str:
    """A lowered grammar in one short token: its size and the start of its GBNF text."""
    rules = grammar.to_ebnf().replace("\n", "; ")
    shown = rules if len(rules) <= max_str else rules[: max_str - 3] + "..."
    return f"<grammar {len(grammar.rules)} rules, {grammar.size()} nodes: {shown}>"


def format_attrs(attrs: dict[str, Any], max_str: int = MAX_STR) -> str:
    # NOTE: the lowered `fsm` attr is the whole transition table, a lowered `grammar` every rule;
    # a listing shows their size (and the grammar's first characters) only.
    def shown(key: str, value: Any) -> str:
        if is_grammar_value(value):
            return format_grammar(value, max_str)
        return format_fsm(value) if key == "fsm" else format_value(value, max_str)

    return ", ".join(f"{key}={shown(key, value)}" for key, value in attrs.items())


def format_node(node: Node) -> str:
    """One SSA line (without indentation): ``%x : type = op[attrs](inputs)  # source``."""
    attrs = format_attrs(node.attrs)
    args = [repr(inp) for inp in node.inputs]
    if node.stream != 0:
        args.append(f"stream={node.stream}")
    line = f"%{node.name} : {node.type.value} = {node.op.value}"
    line += f"[{attrs}]" if attrs else ""
    line += f"({', '.join(args)})"
    if node.source:
        line += f"  # {node.source}"
    return line


def format_guard(guard: Guard) -> str:
    cases = guard.branch.attrs.get("cases") or []
    label = f" {cases[guard.case]!r}" if 0 <= guard.case < len(cases) else ""
    return f"case {guard.case}{label} of %{guard.branch.name}"


def _frames(node: Node, stream_start: dict[int, Node], memo: dict[int, list[tuple]]) -> list[tuple]:
    """The nested headers a node is printed under: the frames of the fork that made its stream
    (recursively), its stream, then the branch cases it adds."""
    base = _stream_frames(node.stream, stream_start, memo)
    outer = {what for kind, what in base if kind == "case"}
    return base + [("case", g) for g in node.guard_chain() if g not in outer]


def _stream_frames(stream: int, stream_start: dict[int, Node], memo: dict[int, list[tuple]]) -> list[tuple]:
    if stream not in memo:
        memo[stream] = []  # NOTE: guards against cycles in a malformed graph
        start = stream_start.get(stream)
        if stream != 0 and start is not None:
            parent = start.inputs[0] if start.op is Op.GET_FORK_ITEM and start.inputs else start
            if parent is start:
                outer: list[tuple] = [("case", g) for g in start.guard_chain()]
            else:
                outer = _frames(parent, stream_start, memo)
            memo[stream] = outer + [("stream", stream)]
    return memo[stream]


def _stream_header(stream: int, start: Node | None) -> str:
    if start is not None and start.op is Op.GET_FORK_ITEM and start.inputs:
        return f"stream {stream} (item {start.attrs.get('index')} of %{start.inputs[0].name}):"
    return f"stream {stream}:"


def format_graph(graph: Graph, indent: str = "  ") -> str:
    """The SSA listing of `graph` (what `str(graph)` returns)."""
    args = ", ".join(f"%{n.name}" for n in graph.arguments())
    counts = f"{len(graph.nodes)} nodes, {graph.num_streams} stream{'s' if graph.num_streams != 1 else ''}"
    lines = [f"graph {graph.name}({args}):  # {counts}"]
    for key, value in graph.meta.items():
        lines.append(f"{indent}# meta {key}={format_value(value)}")
    stream_start: dict[int, Node] = {}
    for node in graph.nodes:
        stream_start.setdefault(node.stream, node)
    used_cases = _used_cases(graph)
    memo: dict[int, list[tuple]] = {}
    previous: list[tuple] = []
    for node in graph.nodes:
        frames = _frames(node, stream_start, memo)
        common = 0
        while common < min(len(frames), len(previous)) and frames[common] == previous[common]:
            common += 1
        for depth in range(common, len(frames)):
            kind, what = frames[depth]
            header = format_guard(what) + ":" if kind == "case" else _stream_header(what, stream_start.get(what))
            lines.append(indent * (depth + 1) + header)
        lines.append(indent * (len(frames) + 1) + format_node(node))
        previous = frames
        if node.op is Op.BRANCH:
            # NOTE: a case with no nodes (e.g. `if s["x"] == "no": return`) has no header later.
            cases = node.attrs.get("cases") or []
            for case in sorted(set(range(len(cases))) - used_cases.get(node, set())):
                lines.append(indent * (len(frames) + 1) + format_guard(Guard(node, case)) + " (no nodes)")
    return "\n".join(lines)


def _used_cases(graph: Graph) -> dict[Node, set[int]]:
    used: dict[Node, set[int]] = {}
    for node in graph.nodes:
        for guard in node.guard_chain():
            used.setdefault(guard.branch, set()).add(guard.case)
    return used


TABLE_COLUMNS = ("name", "op", "type", "stream", "guard", "inputs", "attrs", "source")


def table_rows(graph: Graph, max_attrs: int = 70) -> list[tuple[str, ...]]:
    """One row of strings per node, in TABLE_COLUMNS order."""
    rows = []
    for node in graph.nodes:
        guard = f"%{node.guard.branch.name}[{node.guard.case}]" if node.guard else ""
        attrs = format_attrs(node.attrs, max_str=30)
        if len(attrs) > max_attrs:
            attrs = attrs[: max_attrs - 3] + "..."
        rows.append((
            f"%{node.name}", node.op.value, node.type.value, str(node.stream), guard,
            ", ".join(repr(i) for i in node.inputs), attrs, node.source,
        ))
    return rows


def format_tabular(graph: Graph) -> str:
    """A fixed-width table with the columns of TABLE_COLUMNS, one row per node."""
    rows = [TABLE_COLUMNS, *table_rows(graph)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]

    def line(row: tuple[str, ...]) -> str:
        return " | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([line(rows[0]), rule, *(line(row) for row in rows[1:])])
