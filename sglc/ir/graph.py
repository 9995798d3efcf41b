"""The Graph: owns its nodes (in a topological order) and is changed only through its methods."""
from __future__ import annotations

import contextlib
import copy
import re
from typing import Any, Callable, ClassVar, Iterator, Optional, Sequence

from sglc.ir.node import Guard, Node
from sglc.ir.ops import Op
from sglc.ir.types import DEFAULT_TYPE, AttrValue, ValueType, check_attr_value, is_grammar_value, normalize_attr_value

_NAME_OK = re.compile(r"[^0-9A-Za-z_]")


class Graph:
    """An LM program as a list of nodes in topological order.

    NOTE: `nodes` order is the global execution order that respects every edge; intra-stream
    order is the order of a stream's nodes in this list. Passes must keep both valid (verify()).
    """

    #: What str(graph) returns. sglc/ir/__init__.py sets it to sglc.ir.printing.format_graph (the
    #: SSA listing); a package's __init__ runs before any of its modules, so every Graph prints
    #: that way. NOTE: a hook rather than an import: printing reads graphs, so it sits above
    #: graph.py, which must not import it.
    formatter: ClassVar[Callable[["Graph"], str]]

    def __init__(self, name: str = "program") -> None:
        self.name = name
        self.nodes: list[Node] = []
        #: Program-level facts: e.g. ``num_api_spec_tokens``, ``source_file``, ``arg_names``.
        self.meta: dict[str, AttrValue] = {}
        self.num_streams = 1  # stream 0 is the program's own
        self._used_names: dict[str, int] = {}
        self._insert_at: Optional[int] = None  # None: append at the end

    # ----- creation and editing -----
    def create_node(
        self,
        op: Op,
        inputs: Sequence[Node] = (),
        attrs: Optional[dict[str, Any]] = None,
        type: Optional[ValueType] = None,
        stream: int = 0,
        guard: Optional[Guard] = None,
        meta: Optional[dict[str, str]] = None,
        name: Optional[str] = None,
    ) -> Node:
        """Create a node at the current insertion point (the end unless inside inserting_*)."""
        attrs = {k: normalize_attr_value(v) for k, v in (attrs or {}).items()}
        for key, value in attrs.items():
            check_attr_value(value, f"{op.value}.{key}")
        for inp in inputs:
            if inp.graph is not self:
                raise ValueError(f"input {inp!r} of a new {op.value} node belongs to another graph")
        if guard is not None and guard.branch.graph is not self:
            raise ValueError(f"guard branch {guard.branch!r} belongs to another graph")
        if not 0 <= stream < self.num_streams:
            raise ValueError(f"stream {stream} does not exist (graph has {self.num_streams})")
        node = Node(
            self,
            self._unique_name(name or self._default_name(op, attrs)),
            op,
            tuple(inputs),
            attrs,
            type if type is not None else DEFAULT_TYPE[op],
            stream,
            guard,
            dict(meta or {}),
        )
        for inp in node.inputs:
            inp.users[node] = None
        if self._insert_at is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self._insert_at, node)
            self._insert_at += 1
        return node

    def new_stream(self) -> int:
        """Reserve a new stream id (for the children of a fork)."""
        self.num_streams += 1
        return self.num_streams - 1

    @contextlib.contextmanager
    def inserting_before(self, node: Node) -> Iterator[None]:
        """Within the block, create_node inserts right before `node` (in creation order)."""
        saved = self._insert_at
        self._insert_at = self.index(node)
        try:
            yield
        finally:
            self._insert_at = saved

    @contextlib.contextmanager
    def inserting_after(self, node: Node) -> Iterator[None]:
        """Within the block, create_node inserts right after `node` (in creation order)."""
        saved = self._insert_at
        self._insert_at = self.index(node) + 1
        try:
            yield
        finally:
            self._insert_at = saved

    def replace_all_uses_with(self, old: Node, new: Node) -> list[Node]:
        """Make every user of `old` use `new` instead; returns the users changed."""
        changed = list(old.users)
        for user in changed:
            user.inputs = tuple(new if i is old else i for i in user.inputs)
            new.users[user] = None
        old.users.clear()
        return changed

    def set_inputs(self, node: Node, inputs: Sequence[Node]) -> None:
        """Replace `node`'s inputs, keeping user links consistent."""
        for inp in node.inputs:
            inp.users.pop(node, None)
        node.inputs = tuple(inputs)
        for inp in node.inputs:
            inp.users[node] = None

    def erase_node(self, node: Node) -> None:
        """Remove a node that nothing uses (as input or as a guard's branch)."""
        if node.users:
            raise ValueError(f"cannot erase {node!r}: still used by {list(node.users)}")
        if node.op is Op.BRANCH and any(n.guard and n.guard.branch is node for n in self.nodes):
            raise ValueError(f"cannot erase {node!r}: nodes are guarded by it")
        position = self.index(node)
        for inp in node.inputs:
            inp.users.pop(node, None)
        del self.nodes[position]
        if self._insert_at is not None and position < self._insert_at:
            self._insert_at -= 1
        node.graph = None  # type: ignore[assignment]

    def move_before(self, node: Node, anchor: Node) -> None:
        """Move `node` to just before `anchor` in the global order (no link changes)."""
        self.nodes.remove(node)
        self.nodes.insert(self.index(anchor), node)

    def copy(self) -> "Graph":
        """A deep copy: new nodes with the same names, ops, inputs, attrs, types, streams, guards
        and meta, in the same order; attrs and graph meta are copied deeply (what a pass rewrites)."""
        new = Graph(self.name)
        new.meta = copy.deepcopy(self.meta)
        new.num_streams = self.num_streams
        mapping: dict[Node, Node] = {}
        for node in self.nodes:
            guard = Guard(mapping[node.guard.branch], node.guard.case) if node.guard else None
            mapping[node] = new.create_node(
                node.op,
                [mapping[i] for i in node.inputs],
                # NOTE: a grammar is immutable (and may be deep): shared, not copied
                {k: v if is_grammar_value(v) else copy.deepcopy(v) for k, v in node.attrs.items()},
                node.type,
                node.stream,
                guard,
                dict(node.meta),
                name=node.name,
            )
        return new

    # ----- queries -----
    def index(self, node: Node) -> int:
        for i, candidate in enumerate(self.nodes):
            if candidate is node:
                return i
        raise ValueError(f"{node!r} is not in graph {self.name!r}")

    def find(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node named %{name} in graph {self.name!r}")

    def stream_nodes(self, stream: int) -> list[Node]:
        return [n for n in self.nodes if n.stream == stream]

    def arguments(self) -> list[Node]:
        return [n for n in self.nodes if n.op is Op.ARGUMENT]

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes))

    def __len__(self) -> int:
        return len(self.nodes)

    # ----- equality, printing -----
    def signature(self) -> tuple:
        """Everything that defines the graph, by value (names stand for node references)."""
        return (
            self.name,
            _freeze(self.meta),
            self.num_streams,
            tuple(
                (
                    n.name,
                    n.op,
                    tuple(i.name for i in n.inputs),
                    _freeze(n.attrs),
                    n.type,
                    n.stream,
                    (n.guard.branch.name, n.guard.case) if n.guard else None,
                    _freeze(n.meta),
                )
                for n in self.nodes
            ),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.signature() == other.signature()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __str__(self) -> str:
        return Graph.formatter(self)

    # ----- naming -----
    def _default_name(self, op: Op, attrs: dict[str, Any]) -> str:
        var = attrs.get("name") if op in (Op.GEN, Op.SELECT, Op.ARGUMENT) else None
        return var if isinstance(var, str) and var else op.value

    def _unique_name(self, hint: str) -> str:
        """`hint` itself if unused, else hint_1, hint_2, ... (a per-graph namespace)."""
        base = _NAME_OK.sub("_", hint) or "node"
        if base[0].isdigit():
            base = "_" + base
        candidate = base
        while candidate in self._used_names:
            self._used_names[base] += 1
            candidate = f"{base}_{self._used_names[base]}"
        self._used_names.setdefault(base, 0)
        self._used_names.setdefault(candidate, 0)
        return candidate


def _freeze(value: Any) -> Any:
    """A hashable, type-exact view of an attribute value (1 != 1.0 != True)."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_freeze(v) for v in value))
    return (type(value).__name__, value)
