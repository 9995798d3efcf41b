"""`verify(graph)`: the one function that checks every IR invariant (run it after each pass).

Checks, in order: structure (ownership, unique names, topological order, user links, stream ids,
guards, graph meta entries), the per-op rules (arity, input types, output type, attributes and
their ranges, a lowered fsm compiled from the constraint the gen shows), arg_names, streams
(each child stream begins with its one GET_FORK_ITEM; joins gather the last node of each child),
guard visibility (a node uses only values that exist whenever it runs), and balance of var scopes
and chat roles along every branch path of every stream.
"""
from __future__ import annotations

from typing import Optional

from sglc.errors import VerifyError
from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.op_rules import ATTR_RULES, GRAPH_META_RULES, INPUT_RULES, NODE_RULES, OUTPUT_TYPES, RuleError
from sglc.ir.ops import Op
from sglc.ir.types import check_attr_value

__all__ = ["verify", "VerifyError"]


def verify(graph: Graph) -> None:
    """Raise :class:`VerifyError` naming the first offending node, its op and source line."""
    _Verifier(graph).run()


def _where(node: Node) -> str:
    text = node.source if node.source.isprintable() else repr(node.source)  # keep one line
    source = f" at {text}" if node.source else ""
    return f"%{node.name} ({getattr(node.op, 'value', node.op)}){source}"


def _short_repr(value: object, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (an error stays one short line, even for an fsm)."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _fail(node: Node, message: str) -> VerifyError:
    return VerifyError(f"verify: {_where(node)}: {message}")


class _Verifier:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.position: dict[Node, int] = {}

    def run(self) -> None:
        self.check_structure()
        for node in self.graph.nodes:
            self.check_op_rules(node)
        self.check_arg_names()
        self.check_streams()
        self.check_outputs()
        self.check_loops()
        self.check_guard_visibility()
        self.check_balance()

    # ----- structure -----
    def check_structure(self) -> None:
        g = self.graph
        if not isinstance(g.num_streams, int) or g.num_streams < 1:
            raise VerifyError(f"verify: graph {g.name!r}: num_streams must be >= 1, got {g.num_streams!r}")
        try:
            check_attr_value(g.meta, "graph meta")
        except TypeError as err:
            raise VerifyError(f"verify: graph {g.name!r}: {err}") from None
        self.check_graph_meta()
        names: set[str] = set()
        for index, node in enumerate(g.nodes):
            if not isinstance(node, Node):
                raise VerifyError(f"verify: graph {g.name!r}: entry {index} is not a Node: {node!r}")
            if node.graph is not g:
                raise _fail(node, "belongs to another graph")
            if node in self.position:
                raise _fail(node, "appears twice in the node list")
            if not isinstance(node.name, str) or not node.name:
                raise _fail(node, "has an empty name")
            if node.name in names:
                raise _fail(node, f"duplicate node name %{node.name}")
            names.add(node.name)
            if not isinstance(node.op, Op):
                raise _fail(node, f"op {node.op!r} is not an Op")
            if not isinstance(node.stream, int) or not 0 <= node.stream < g.num_streams:
                raise _fail(node, f"stream {node.stream!r} out of range (graph has {g.num_streams})")
            for key, value in node.meta.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    raise _fail(node, f"meta entries must be str -> str, got {key!r}: {value!r}")
            try:
                check_attr_value(node.attrs, "attrs")
            except TypeError as err:
                raise _fail(node, str(err)) from None
            for inp in node.inputs:
                if not isinstance(inp, Node) or inp.graph is not g:
                    raise _fail(node, f"input {inp!r} is not a node of this graph")
                if inp not in self.position:
                    raise _fail(node, f"uses %{inp.name} before its definition")
                if node not in inp.users:
                    raise _fail(node, f"missing from the users of its input %{inp.name}")
            self.check_guard(node)
            self.position[node] = index
        for node in g.nodes:
            for user in node.users:
                if user not in self.position or node not in user.inputs:
                    raise _fail(node, f"lists %{getattr(user, 'name', user)} as a user, which does not use it")

    def check_graph_meta(self) -> None:
        g = self.graph
        for key, check in GRAPH_META_RULES.items():
            value = g.meta.get(key)
            problem = None if value is None else check(value)
            if problem:
                raise VerifyError(f"verify: graph {g.name!r}: meta {key}={_short_repr(value)}: {problem}")

    def check_arg_names(self) -> None:
        """meta arg_names (positional binding of a compiled program) lists exactly the arguments."""
        g = self.graph
        names = g.meta.get("arg_names")
        arguments = [n.attrs["name"] for n in g.nodes if n.op is Op.ARGUMENT]
        if names is not None and sorted(names) != sorted(arguments):
            raise VerifyError(f"verify: graph {g.name!r}: meta arg_names={_short_repr(names)} differ from the graph's "
                              f"arguments ({_short_repr(arguments)})")

    def check_guard(self, node: Node) -> None:
        guard = node.guard
        if guard is None:
            return
        if not isinstance(guard, Guard):
            raise _fail(node, f"guard {guard!r} is not a Guard")
        branch = guard.branch
        if branch.graph is not self.graph or branch not in self.position:
            raise _fail(node, f"guard names %{branch.name}, which is not an earlier node")
        if branch.op is not Op.BRANCH:
            raise _fail(node, f"guard names %{branch.name}, a {branch.op.value}, not a branch")
        cases = branch.attrs.get("cases")
        num_cases = len(cases) if isinstance(cases, list) else 0
        if isinstance(guard.case, bool) or not isinstance(guard.case, int) or not 0 <= guard.case < num_cases:
            raise _fail(node, f"guard case {guard.case!r} out of range for %{branch.name} ({num_cases} cases)")

    # ----- per-op rules (tables in op_rules.py) -----
    def check_op_rules(self, node: Node) -> None:
        try:
            allowed = OUTPUT_TYPES[node.op]
            if node.type not in allowed:
                names = "|".join(sorted(t.value for t in allowed))
                raise RuleError(f"output type {getattr(node.type, 'value', node.type)!r} is not {names}")
            for key, (required, check) in ATTR_RULES[node.op].items():
                value = node.attrs.get(key)
                if key not in node.attrs or value is None:
                    if required:
                        raise RuleError(f"missing required attribute {key!r}")
                    continue
                problem = check(value)
                if problem:
                    raise RuleError(f"attribute {key}={_short_repr(value)}: {problem}")
            INPUT_RULES[node.op](node)
            if node.op in NODE_RULES:
                NODE_RULES[node.op](node)
        except RuleError as err:
            raise _fail(node, str(err)) from None

    # ----- streams, forks and joins -----
    def check_outputs(self) -> None:
        """An OUTPUT is the last node of stream 0 on every path it runs on."""
        outputs = [n for n in self.graph.nodes if n.op is Op.OUTPUT]
        for out in outputs:
            for later in self.graph.nodes[self.position[out] + 1:]:
                if later.stream == 0 and _compatible(out, later):
                    raise _fail(later, f"runs after %{out.name} (output), which ends the program")

    def check_loops(self) -> None:
        """Each loop_begin has one loop_end later in its stream (nested like var scopes); the body
        (the stream's nodes between them) holds no fork, join, branch or output, runs under the
        loop's guard, keeps roles and var scopes balanced within one iteration, and nothing outside
        it uses its nodes or the current item (a loop_end passes the body's variables out)."""
        for begin, end, body in loop_regions(self.graph):
            members = set(body)
            for node in body:
                if node.op in (Op.FORK, Op.GET_FORK_ITEM, Op.JOIN, Op.BRANCH, Op.OUTPUT, Op.ARGUMENT):
                    raise _fail(node, f"is a {node.op.value} inside the body of loop %{begin.name}, which runs once per item")
                if node.guard != begin.guard:
                    raise _fail(node, f"is under another guard than its loop %{begin.name}")
            for node in self.graph.nodes:
                if node in members or node is end:
                    continue
                for inp in node.inputs:
                    if inp in members or (inp is begin and node.op is not Op.LOOP_END):
                        raise _fail(node, f"uses %{inp.name}, which changes with each iteration of loop %{begin.name}, "
                                          "outside that loop's body")
            roles: list[str] = []
            scopes: list[str] = []
            for node in body:
                if node.op is Op.ROLE_BEGIN:
                    roles.append(node.attrs["role"])
                elif node.op is Op.ROLE_END:
                    if not roles or roles.pop() != node.attrs["role"]:
                        raise _fail(node, f"ends a role its iteration of loop %{begin.name} did not begin")
                elif node.op is Op.VAR_SCOPE_BEGIN:
                    scopes.append(node.attrs["name"])
                elif node.op is Op.VAR_SCOPE_END:
                    if not scopes or scopes.pop() != node.attrs["name"]:
                        raise _fail(node, f"closes a var scope its iteration of loop %{begin.name} did not open")
            if roles or scopes:
                raise _fail(end, f"ends loop %{begin.name} with a role or var scope its iteration opened still open")

    def check_streams(self) -> None:
        g = self.graph
        first: dict[int, Node] = {}
        for node in g.nodes:
            first.setdefault(node.stream, node)
        for stream in range(1, g.num_streams):
            if stream not in first:
                raise VerifyError(f"verify: graph {g.name!r}: stream {stream} has no nodes (no GET_FORK_ITEM)")
            if first[stream].op is not Op.GET_FORK_ITEM:
                raise _fail(first[stream], f"stream {stream} must begin with a get_fork_item")
        children: dict[tuple[Node, int], Node] = {}
        for node in g.nodes:
            if node.op is not Op.GET_FORK_ITEM:
                continue
            if first[node.stream] is not node:
                raise _fail(node, f"stream {node.stream} already began with %{first[node.stream].name}")
            key = (node.inputs[0], node.attrs["index"])
            if key in children:
                raise _fail(node, f"item {key[1]} of %{key[0].name} already exists (%{children[key].name})")
            children[key] = node
        by_stream: dict[int, list[Node]] = {}
        for node in g.nodes:
            by_stream.setdefault(node.stream, []).append(node)
        joins: dict[Node, list[Node]] = {}
        for node in g.nodes:
            if node.op is not Op.JOIN:
                continue
            fork = node.inputs[0]
            # NOTE: a fork may be joined once per path: joins in exclusive branch cases are fine.
            for other in joins.get(fork, []):
                if _compatible(other, node):
                    raise _fail(node, f"%{fork.name} is already joined by %{other.name}")
            joins.setdefault(fork, []).append(node)
            for index, gathered in enumerate(node.inputs[1:]):
                item = children.get((fork, index))
                if item is None:
                    raise _fail(node, f"%{fork.name} has no item {index} (no get_fork_item)")
                if gathered.stream != item.stream:
                    raise _fail(node, f"input {index + 1} (%{gathered.name}) is not in child stream {item.stream}")
                # The child's last node on the join's paths must be the one gathered.
                last = [n for n in by_stream[item.stream] if _compatible(n, node)][-1]
                if last is not gathered and self.position[last] > self.position[node]:
                    raise _fail(last, f"stream {item.stream} continues after it was joined by %{node.name}")
                if last is not gathered:
                    raise _fail(node, f"gathers %{gathered.name}, but the last node of stream {item.stream} "
                                      f"before it is %{last.name}")

    # ----- guards -----
    def check_guard_visibility(self) -> None:
        for node in self.graph.nodes:
            mine = set(node.guard_chain())
            for inp in node.inputs:
                missing = [gd for gd in inp.guard_chain() if gd not in mine]
                if missing:
                    gd = missing[0]
                    raise _fail(
                        node,
                        f"uses %{inp.name}, which exists only under case {gd.case} of %{gd.branch.name}",
                    )

    # ----- var scopes and roles, along every branch path -----
    def check_balance(self) -> None:
        g = self.graph
        by_stream: dict[int, list[Node]] = {}
        for node in g.nodes:
            by_stream.setdefault(node.stream, []).append(node)
        fork_roles: dict[Node, set[Optional[Node]]] = {}
        # Parents before children: a stream's first node comes after the fork that created it.
        for stream, nodes in by_stream.items():
            initial: set[Optional[Node]] = {None}
            if stream != 0:
                initial = fork_roles.get(nodes[0].inputs[0], {None})
            _BalanceWalk(stream, nodes, initial, fork_roles).run()


class _BalanceWalk:
    """Walks one stream along every assignment of branch outcomes (memoized, so sequential
    branches cost linear time), tracking the open var scopes and the open chat role."""

    def __init__(
        self,
        stream: int,
        nodes: list[Node],
        initial_roles: set[Optional[Node]],
        fork_roles: dict[Node, set[Optional[Node]]],
    ) -> None:
        self.stream = stream
        self.nodes = nodes
        self.initial_roles = initial_roles
        self.fork_roles = fork_roles
        self.chains = [n.guard_chain() for n in nodes]
        # relevant[i]: branches that still matter from position i on (for memoization).
        self.relevant: list[frozenset[Node]] = [frozenset()] * (len(nodes) + 1)
        for i in range(len(nodes) - 1, -1, -1):
            self.relevant[i] = self.relevant[i + 1] | {gd.branch for gd in self.chains[i]}

    def run(self) -> None:
        todo = [(0, (), role, {}) for role in self.initial_roles]
        seen: set = set()
        while todo:
            pos, scopes, role, assign = todo.pop()
            key = (pos, scopes, role, tuple(sorted((b.name, c) for b, c in assign.items() if b in self.relevant[pos])))
            if key in seen:
                continue
            seen.add(key)
            if pos == len(self.nodes):
                self.check_end(scopes, role)
                continue
            node = self.nodes[pos]
            for active, new_assign in _resolve(self.chains[pos], assign):
                if not active:
                    todo.append((pos + 1, scopes, role, new_assign))
                    continue
                new_scopes, new_role = self.step(node, scopes, role)
                todo.append((pos + 1, new_scopes, new_role, new_assign))

    def step(self, node: Node, scopes: tuple, role: Optional[Node]) -> tuple[tuple, Optional[Node]]:
        op = node.op
        if op is Op.VAR_SCOPE_BEGIN:
            return scopes + (node,), role
        if op is Op.VAR_SCOPE_END:
            name = node.attrs["name"]
            if not scopes:
                raise _fail(node, f"closes var scope {name!r}, but no var scope is open")
            if scopes[-1].attrs["name"] != name:
                raise _fail(node, f"closes var scope {name!r}, but the innermost open one is {scopes[-1].attrs['name']!r}")
            return scopes[:-1], role
        if op is Op.ROLE_BEGIN:
            if role is not None:
                raise _fail(node, f"begins role {node.attrs['role']!r} while role {role.attrs['role']!r} is open")
            return scopes, node
        if op is Op.ROLE_END:
            if role is None or role.attrs["role"] != node.attrs["role"]:
                current = "no role" if role is None else f"role {role.attrs['role']!r}"
                raise _fail(node, f"ends role {node.attrs['role']!r}, but {current} is open")
            return scopes, None
        if op is Op.FORK:
            self.fork_roles.setdefault(node, set()).add(role)
        return scopes, role

    def check_end(self, scopes: tuple, role: Optional[Node]) -> None:
        if scopes:
            raise _fail(scopes[-1], f"var scope {scopes[-1].attrs['name']!r} is never closed")
        if role is not None and role not in self.initial_roles and role.stream == self.stream:
            raise _fail(role, f"role {role.attrs['role']!r} is never closed in stream {self.stream}")


def loop_regions(graph: Graph) -> list[tuple[Node, Node, list[Node]]]:
    """(loop_begin, loop_end, body) of every loop; VerifyError when the regions are malformed."""
    regions: list[tuple[Node, Node, list[Node]]] = []
    open_loops: dict[int, list[tuple[Node, list[Node]]]] = {}
    for node in graph.nodes:
        stack = open_loops.setdefault(node.stream, [])
        if node.op is Op.LOOP_END:
            begin = node.inputs[0] if node.inputs else None
            if not stack or stack[-1][0] is not begin:
                raise _fail(node, "ends a loop that is not the innermost open loop of its stream")
            _, body = stack.pop()
            if node.guard != begin.guard:
                raise _fail(node, f"is under another guard than its loop %{begin.name}")
            regions.append((begin, node, body))
        for _, body in stack:
            if node.op is not Op.ARGUMENT:
                body.append(node)
        if node.op is Op.LOOP_BEGIN:
            stack.append((node, []))
    for stack in open_loops.values():
        if stack:
            raise _fail(stack[-1][0], "opens a loop that never ends (no loop_end in its stream)")
    return regions


def _compatible(a: Node, b: Node) -> bool:
    """Whether some path runs both nodes (no branch takes different cases in their guards)."""
    cases = {gd.branch: gd.case for gd in a.guard_chain()}
    return all(cases.get(gd.branch, gd.case) == gd.case for gd in b.guard_chain())


def _resolve(chain: list[Guard], assign: dict) -> list[tuple[bool, dict]]:
    """Whether a node with this guard chain runs, for each outcome of the not-yet-decided branches."""
    for depth, gd in enumerate(chain):
        taken = assign.get(gd.branch)
        if taken is None:
            results: list[tuple[bool, dict]] = []
            for case in range(len(gd.branch.attrs["cases"])):
                results.extend(_resolve(chain[depth:], {**assign, gd.branch: case}))
            return results
        if taken != gd.case:
            return [(False, assign)]
    return [(True, assign)]
