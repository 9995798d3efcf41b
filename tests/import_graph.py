"""The import graph of this repository's packages, read with `ast` (nothing is imported).

Every import statement counts, wherever it is: at module level, inside a function or method (a
lazy import), or under ``if TYPE_CHECKING:`` (a type-only import). A lazy or type-only import
that exists to dodge a circle is still a circle, so all three kinds are edges. Relative imports
are resolved; ``from pkg import x`` is an edge to the module ``pkg.x`` when x is one, else to
``pkg``. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit
edges are left out (every package that re-exports its modules would otherwise be a circle).

Used by tests/test_import_graph.py; the runtime's packages (import name ``sglc_runtime``, folder
``runtime/``) can be added to the same checks by passing that root too.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

ROOT = Path(__file__).resolve().parent.parent

#: How an import statement is reached when its module is imported.
MODULE, LAZY, TYPE_ONLY = "module-level", "lazy", "type-only"


@dataclasses.dataclass(frozen=True)
class Edge:
    """`importer` imports `imported` at `line` (MODULE, LAZY or TYPE_ONLY)."""

    importer: str
    imported: str
    line: int
    kind: str

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.line}, {self.kind})"


def module_files(import_name: str, folder: Path) -> dict[str, Path]:
    """Module name -> file for every .py file of the package `import_name` that lives in `folder`."""
    modules = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join([import_name, *parts])] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
    return name == "TYPE_CHECKING"


def _imports(nodes: Iterable[ast.AST], kind: str = MODULE) -> Iterator[tuple[ast.stmt, str]]:
    """(import statement, MODULE / LAZY / TYPE_ONLY) for every import in `nodes` and below."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _imports(ast.iter_child_nodes(node), LAZY if kind == MODULE else kind)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.body, TYPE_ONLY)
            yield from _imports(node.orelse, kind)
        else:
            yield from _imports(ast.iter_child_nodes(node), kind)


def _resolve_base(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module a (possibly relative) `from ... import` names."""
    if level == 0:
        return target or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_edges(roots: dict[str, Path]) -> list[Edge]:
    """The edges between modules of the packages in `roots` (import name -> folder).

    Imports of anything outside those packages (stdlib, third party) are left out.
    """
    modules: dict[str, Path] = {}
    for import_name, folder in roots.items():
        modules.update(module_files(import_name, folder))
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for stmt, kind in _imports(tree.body):
            for target in _targets(stmt, module, is_package, modules):
                if target != module:
                    edges.append(Edge(module, target, stmt.lineno, kind))
    return edges


def _targets(stmt: ast.stmt, module: str, is_package: bool, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            found = _nearest_known(alias.name, known)
            if found:
                yield found
        return
    assert isinstance(stmt, ast.ImportFrom)
    base = _resolve_base(module, is_package, stmt.level, stmt.module)
    for alias in stmt.names:
        submodule = f"{base}.{alias.name}"
        found = submodule if submodule in known else _nearest_known(base, known)
        if found:
            yield found


def _nearest_known(name: str, known: dict[str, Path]) -> str | None:
    """`name` or its longest prefix that is a known module (``a.b.c`` of an unknown c -> ``a.b``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def in_package(module: str, package: str) -> bool:
    """Whether `module` is `package` itself or one of its modules (subpackages included)."""
    return module == package or module.startswith(package + ".")


class Cycle(NamedTuple):
    """A group of modules that import each other in circles, and the shortest circle through its first."""

    modules: list[str]
    edges: list[Edge]

    def __str__(self) -> str:
        """``a -> b (line 3, lazy) -> a (line 9, module-level)``, plus the group when it is larger."""
        text = self.edges[0].importer
        for edge in self.edges:
            text += f" -> {edge.imported} (line {edge.line}, {edge.kind})"
        if len(self.modules) > len(self.edges):
            text += f"  [one circle of a group of {len(self.modules)}: {', '.join(self.modules)}]"
        return text


def cycles(edges: Iterable[Edge], package: str) -> list[Cycle]:
    """One Cycle for each group of `package`'s modules that import each other in circles.

    Only edges between two modules of `package` (subpackages included) are considered.
    """
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        if in_package(edge.importer, package) and in_package(edge.imported, package):
            graph.setdefault(edge.importer, {}).setdefault(edge.imported, edge)
            graph.setdefault(edge.imported, {})
    return [Cycle(group, _one_cycle(graph, group)) for group in _strongly_connected(graph) if len(group) > 1]


def _strongly_connected(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); groups in a deterministic order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(sorted(group))
    return sorted(groups)


def _one_cycle(graph: dict[str, dict[str, Edge]], group: list[str]) -> list[Edge]:
    """The shortest circle through the group's first module (breadth-first within the group)."""
    members = set(group)
    start = group[0]
    came_from: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ, edge in sorted(graph[node].items()):
                if succ not in members:
                    continue
                if succ == start:
                    path = [edge]
                    while node != start:
                        path.append(came_from[node])
                        node = came_from[node].importer
                    return path[::-1]
                if succ not in came_from:
                    came_from[succ] = edge
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no circle through {start} in {group}")  # a group > 1 always has one
