"""Compile `if s["x"] == "choice":` by tracing once per select outcome and merging the traces.

Tracing is deterministic, so all traces that assumed the same outcomes for their first k branch
points recorded identical nodes up to the (k+1)-th comparison. The merged graph holds that shared
prefix once, then a BRANCH on the select, then each case's remaining nodes with
`guard = Guard(branch, case)`; nested comparisons recurse. Streams created after a divergence
get fresh ids in the merged graph.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from sglc.frontend.errors import TraceError
from sglc.frontend.trace_context import Trace
from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.ops import Op

#: Upper bound on the number of traces (select-outcome combinations) of one program.
MAX_TRACES = 1024


def explore(run_once: Callable[[list[int]], Trace], max_traces: int = MAX_TRACES) -> list[Trace]:
    """Run the program once per combination of outcomes of the selects it compares."""
    traces: list[Trace] = []
    pending: list[list[int]] = [[]]
    while pending:
        prefix = pending.pop()
        trace = run_once(prefix)
        traces.append(trace)
        if len(traces) > max_traces:
            source = trace.points[-1].source if trace.points else "?"
            raise TraceError(f"{source}: the program branches into more than {max_traces} paths; "
                             "run it with the eager interpreter instead")
        # NOTE: points beyond the prescribed prefix took case 0; schedule their other cases.
        for j in range(len(prefix), len(trace.taken)):
            for case in range(trace.points[j].num_cases - 1, 0, -1):
                pending.append(trace.taken[:j] + [case])
    traces.sort(key=lambda t: t.taken)
    return traces


def merge(traces: Sequence[Trace]) -> Graph:
    """One graph for all traces; a single trace is returned as it is."""
    if len(traces) == 1:
        return traces[0].graph
    first = traces[0].graph
    merged = Graph(first.name)
    merged.meta = dict(first.meta)
    _Merger(merged, traces).emit(list(range(len(traces))), 0, 0, None, {})
    return merged


class _Merger:
    def __init__(self, merged: Graph, traces: Sequence[Trace]) -> None:
        self.merged = merged
        self.traces = traces
        self.node_maps: list[dict[Node, Node]] = [{} for _ in traces]
        self.stream_maps: list[dict[int, int]] = [{0: 0} for _ in traces]
        self.indices = [{n: i for i, n in enumerate(t.graph.nodes)} for t in traces]

    def emit(self, members: list[int], depth: int, start: int, guard: Optional[Guard],
             last: dict[int, Node]) -> None:
        """Copy the members' shared nodes from `start`, then branch at their point `depth`.

        `last` maps each merged stream to its last node on this path (BRANCH nodes included).
        """
        rep = self.traces[members[0]]
        has_point = [len(self.traces[m].points) > depth for m in members]
        if any(has_point) and not all(has_point):
            self._nondeterministic(rep, start)
        if all(has_point):
            point = rep.points[depth]
            if any(self.traces[m].points[depth] != point for m in members):
                self._nondeterministic(rep, point.position)
            end = point.position
        else:
            if len(members) != 1:
                self._nondeterministic(rep, start)
            end = len(rep.graph.nodes)
        for i in range(start, end):
            self._copy_shared(members, i, guard, last)
        if not all(has_point):
            return
        select = rep.graph.nodes[point.select_index]
        new_select = self.node_maps[members[0]][select]
        branch = self.merged.create_node(
            Op.BRANCH, [new_select], {"cases": list(select.attrs["choices"])},  # type: ignore[arg-type]
            stream=new_select.stream, guard=guard, meta={"source": point.source},
        )
        last[branch.stream] = branch
        for case in range(point.num_cases):
            sub = [m for m in members if self.traces[m].taken[depth] == case]
            if not sub:
                self._nondeterministic(rep, point.position)
            self.emit(sub, depth + 1, end, Guard(branch, case), dict(last))

    def _copy_shared(self, members: list[int], i: int, guard: Optional[Guard], last: dict[int, Node]) -> None:
        lead = members[0]
        src = self.traces[lead].graph.nodes[i]
        key = self._key(lead, src)
        for m in members[1:]:
            if self._key(m, self.traces[m].graph.nodes[i]) != key:
                self._nondeterministic(self.traces[lead], i)
        stream_map = self.stream_maps[lead]
        if src.op is Op.GET_FORK_ITEM:
            new_stream = self.merged.new_stream()
            for m in members:
                self.stream_maps[m][src.stream] = new_stream
        node_map = self.node_maps[lead]
        inputs = [node_map[x] for x in src.inputs]
        if src.op is Op.JOIN:
            # NOTE: a JOIN gathers the last node of each child stream on its path; merging may
            # have put a BRANCH (on a select in that child) after the traced last node.
            inputs = inputs[:1] + [last[x.stream] for x in inputs[1:]]
        new = self.merged.create_node(src.op, inputs, dict(src.attrs), src.type, stream_map[src.stream], guard,
                                      dict(src.meta))
        last[new.stream] = new
        for m in members:
            self.node_maps[m][self.traces[m].graph.nodes[i]] = new

    def _key(self, m: int, node: Node) -> Any:
        index = self.indices[m]
        return (node.op, repr(sorted(node.attrs.items())), node.type, node.stream, tuple(index[x] for x in node.inputs))

    @staticmethod
    def _nondeterministic(trace: Trace, position: int) -> None:
        nodes = trace.graph.nodes
        source = nodes[min(position, len(nodes) - 1)].source if nodes else "?"
        raise TraceError(
            f"{source}: the program traced differently on two runs with the same select outcomes "
            "(does it depend on randomness, time or global state?); make it deterministic or run it eagerly"
        )
