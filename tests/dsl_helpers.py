"""Helpers for the DSL tests: find nodes of a traced graph, and the line a `# @marker` comment is on."""
from sglc.ir.verify import verify


def marker_line(path: str, marker: str) -> int:
    """The line number of the unique line in file `path` that ends with `# @marker`."""
    with open(path) as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {path}"
    return hits[0]


def nodes_of(graph, op):
    return [n for n in graph.nodes if n.op is op]


def only(graph, op):
    found = nodes_of(graph, op)
    assert len(found) == 1, f"expected one {op}, got {found}"
    return found[0]


def traced(fn, **bound):
    graph = fn.trace(**bound)
    verify(graph)
    return graph
