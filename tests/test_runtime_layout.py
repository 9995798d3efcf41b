"""The runtime's import graph: no circles inside a package, and packages import only downwards.

Every module under runtime/ is read with ``ast``; every import counts, at module level, inside
functions and under ``if TYPE_CHECKING:`` alike (a lazy import that only dodges a circle is
still a circle). Imports of other distributions and of ``sglc`` are not checked here.
"""
from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
PACKAGE = "sglc_runtime"

#: The runtime's packages, lower first. A package may import the packages of lower layers;
#: packages of one layer do not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("cache", "constrained"),  # KV slots / radix tree; grammars and cursors (over sglc.fsm)
    ("sampling",),  # SamplingParams, sampler, logprobs, per-request sampling state
    ("output",),  # detokenizer, stop rules, text streams, final outputs
    ("scheduling",),  # Req (typed with sampling/output state) and the scheduler
    ("model",),  # model files, attention, models, and the runner that executes a ScheduleBatch
    ("engine",),  # Engine: schedule -> run -> process
    ("server",),  # gRPC / HTTP in front of one Engine
]

#: Imports allowed against the layering, each with the reason. (None today.)
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(RUNTIME).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(RUNTIME.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The runtime modules that ``name`` imports (a ``from pkg import mod`` names the module)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        out.update(t for t in targets if t == PACKAGE or t.startswith(PACKAGE + "."))
    out.discard(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    for name, deps in graph.items():
        unknown = deps - known
        assert not unknown, f"{name} imports {sorted(unknown)}, which are not runtime modules"
    return graph


def _package(module: str) -> str:
    """The top-level runtime package a module belongs to ("" for the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_runtime_module_lives_in_a_layered_package():
    """A module outside the packages LAYERS names would escape the layering check."""
    layered = {p for layer in LAYERS for p in layer}
    stray = sorted(m for m in _modules() if _package(m) not in layered and m != PACKAGE)
    assert not stray, f"modules outside the layered packages (add them to a package or to LAYERS): {stray}"


def test_no_import_cycle_inside_a_runtime_package():
    """Inside each package (its subpackages included) the modules read bottom-up: no circles."""
    graph = _graph()
    bad = []
    for package in {_package(m) for m in graph}:
        members = {m for m in graph if _package(m) == package}
        sub = {m: graph[m] & members for m in members}
        bad += _cycles(sub)
    assert not bad, f"import cycles inside runtime packages: {bad}"


def test_runtime_packages_import_only_lower_layers():
    """Imports between runtime packages go down the layering (no circle between packages)."""
    layer = {p: i for i, names in enumerate(LAYERS) for p in names}
    layer[""] = -1  # the root package is empty; compile_pool reads its location
    bad = []
    for module, deps in _graph().items():
        src = _package(module)
        for dep in deps:
            dst = _package(dep)
            if src == dst or (src, dst) in EXCEPTIONS:
                continue
            if layer[dst] >= layer[src]:
                bad.append(f"{module} -> {dep} ({src} may not import {dst})")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_the_whole_runtime_import_graph_is_acyclic():
    """No circle across packages either (what the two checks above imply, checked directly)."""
    assert _cycles(_graph()) == []
