"""Graphviz DOT export: one cluster per stream; data edges solid, stream-order edges dashed.

Order edges link each text node of a stream to the previous one that always runs before it (the
latest earlier node of the stream whose guards are a subset of its own); an order edge that
enters a branch case is labelled with the case (``yes``). Pure values (arguments, variables)
have no place in a stream's order and only get data edges.
"""
from __future__ import annotations

from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.ops import VALUE_OPS, Op
from sglc.ir.printing import format_attrs

_FILL = {
    Op.GEN: "#dbeafe", Op.SELECT: "#dbeafe",
    Op.FORK: "#fde68a", Op.GET_FORK_ITEM: "#fde68a", Op.JOIN: "#fde68a",
    Op.BRANCH: "#fecaca", Op.ARGUMENT: "#e5e7eb", Op.VARIABLE: "#e5e7eb",
    Op.CACHE_PREFIX: "#d1fae5",
}


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _label(node: Node) -> str:
    attrs = format_attrs(node.attrs, max_str=24)
    if len(attrs) > 60:
        attrs = attrs[:57] + "..."
    lines = [f"%{node.name} : {node.type.value}", node.op.value + (f"[{attrs}]" if attrs else "")]
    if node.source:
        lines.append(node.source)
    return "\n".join(lines)


def _case_label(guards: list[Guard]) -> str:
    parts = []
    for guard in guards:
        cases = guard.branch.attrs.get("cases") or []
        parts.append(str(cases[guard.case]) if 0 <= guard.case < len(cases) else f"case {guard.case}")
    return " / ".join(parts)


def order_edges(graph: Graph) -> list[tuple[Node, Node, list[Guard]]]:
    """(previous, node, guards entered) for each text node that has a predecessor in its stream."""
    edges = []
    seen: dict[int, list[tuple[Node, list[Guard]]]] = {}
    for node in graph.nodes:
        if node.op in VALUE_OPS:
            continue
        chain = node.guard_chain()
        earlier = seen.setdefault(node.stream, [])
        for previous, previous_chain in reversed(earlier):
            if all(g in chain for g in previous_chain):
                edges.append((previous, node, [g for g in chain if g not in previous_chain]))
                break
        earlier.append((node, chain))
    return edges


def to_dot(graph: Graph) -> str:
    """The graph as Graphviz DOT text (render with ``dot -Tsvg``)."""
    ids = {node: _quote(node.name) for node in graph.nodes}
    lines = [
        f"digraph {_quote(graph.name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="monospace", fontsize=10];',
        '  edge [fontname="monospace", fontsize=9];',
    ]
    for stream in range(graph.num_streams):
        members = [n for n in graph.nodes if n.stream == stream]
        lines.append(f"  subgraph cluster_stream_{stream} {{")
        lines.append(f"    label={_quote(f'stream {stream}')}; style=dashed; color=\"#9ca3af\";")
        for node in members:
            fill = _FILL.get(node.op, "#ffffff")
            lines.append(f"    {ids[node]} [label={_quote(_label(node))}, fillcolor=\"{fill}\"];")
        lines.append("  }")
    for node in graph.nodes:
        for position, inp in enumerate(node.inputs):
            label = f" [label=\"{position}\"]" if len(node.inputs) > 1 else ""
            lines.append(f"  {ids[inp]} -> {ids[node]}{label};")
    for previous, node, entered in order_edges(graph):
        attrs = 'style=dashed, color="#6b7280"'
        if entered:
            attrs += f", label={_quote(_case_label(entered))}, fontcolor=\"#b91c1c\""
        lines.append(f"  {ids[previous]} -> {ids[node]} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
