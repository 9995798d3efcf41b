"""The compiler half reads bottom-up: no import circles inside a package, and packages import
only the packages below them (docs/ir.md draws the layering).

Imports are read with `ast` (tests/import_graph.py): module-level, lazy (inside a function) and
type-only (under ``if TYPE_CHECKING:``) imports all count, since a lazy import that dodges a
circle is still a circle.
"""
from __future__ import annotations

import textwrap

import pytest

from import_graph import LAZY, MODULE, ROOT, TYPE_ONLY, Edge, cycles, import_edges, in_package

#: Import name -> folder of every package the checks read (runtime/ installs as sglc_runtime).
ROOTS = {"sglc": ROOT / "sglc", "sglc_runtime": ROOT / "runtime"}

#: Packages whose modules must not import each other in a circle.
ACYCLIC_PACKAGES = ["sglc.fsm", "sglc.grammar", "sglc.wire", "sglc.ir", "sglc.passes", "sglc.frontend", "sglc.executor"]

#: The compiler half: none of it imports the runtime, and the runtime imports none of it; the two
#: meet in sglc.wire (proto stubs and conversion, backend types, prompts, ConstraintSpec).
COMPILER_PACKAGES = ("sglc.frontend", "sglc.ir", "sglc.passes", "sglc.executor")
RUNTIME_PACKAGE = "sglc_runtime"

#: What each package of the compiler half may import besides itself; anything else of sglc (the
#: `sglc` package's own __init__ included) or of sglc_runtime is refused. Read "A -> B" as "A
#: imports B":   frontend -> ir -> wire -> fsm,   passes -> ir, fsm.
LAYERS = {
    "sglc.fsm": set(),  # a leaf library, shared with the runtime
    # context-free grammars over the fsm library, shared with the runtime; its C++ loops are built
    # by sglc.native_library (a leaf: it imports only sglc.cache_root)
    "sglc.grammar": {"sglc.fsm", "sglc.native_library"},
    "sglc.native_library": {"sglc.cache_root"},
    "sglc.cache_root": set(),
    "sglc.wire": {"sglc.fsm", "sglc.grammar"},  # the contract: imports neither half
    "sglc.ir": {"sglc.fsm", "sglc.grammar", "sglc.errors", "sglc.wire"},
    "sglc.passes": {"sglc.ir", "sglc.fsm", "sglc.grammar", "sglc.errors"},
    "sglc.frontend": {"sglc.ir", "sglc.errors", "sglc.wire"},
}

#: The only modules of sglc.ir that use sglc.fsm: a GEN's constraint -> its regex (what verify
#: compares a lowered fsm with) and graph.pb's check that every stored fsm rebuilds.
IR_MODULES_USING_FSM = {"sglc.ir.gen_constraint", "sglc.ir.serialize"}

#: Edges across the layering, each a lazy import in a user-facing entry point, with the reason.
#: SglFunction is SGLang's user API: `prog.run()` / `prog.compile()` must reach the executor,
#: which in turn imports the frontend (ProgramState, StreamSink), so these stay inside methods.
# TODO(wire phase): move SglFunction.cache's body into the executor (one function next to
# eager_api.run_function) so that only the eager_api and compiled edges remain.
ALLOWED_EDGES = {
    ("sglc.frontend.function", "sglc.executor.eager_api"): "SglFunction.run / run_batch run eagerly",
    ("sglc.frontend.function", "sglc.executor.compiled"): "SglFunction.compile / cache build a CompiledProgram",
    ("sglc.frontend.function", "sglc.executor.batch"): "SglFunction.cache sends the batch prefix hint",
    ("sglc.frontend.function", "sglc.executor.graph_executor"): "SglFunction.cache runs it on a GraphExecutor",
    ("sglc.frontend.function", "sglc.executor.program"): "SglFunction.cache resolves the default backend",
    ("sglc.frontend.function", "sglc.passes.fork_hints"): "SglFunction.cache compiles with fork_hints only",
}


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return import_edges(ROOTS)


def unit_of(module: str) -> str:
    """The package (or top-level module) a module belongs to: sglc.ir.graph -> sglc.ir."""
    return ".".join(module.split(".")[:2])


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_import_circle_inside_a_package(edges, package):
    """No module of the package reaches itself again through imports of the same package."""
    found = cycles(edges, package)
    assert not found, f"import circles in {package}:\n" + "\n".join(map(str, found))


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_package_imports_only_the_packages_below_it(edges, package):
    """Every import leaving the package goes to a package below it, or is an allowed entry point."""
    allowed = LAYERS[package] | {package}
    wrong = [
        edge for edge in edges
        if in_package(edge.importer, package) and unit_of(edge.imported) not in allowed
        and (edge.importer, edge.imported) not in ALLOWED_EDGES
    ]
    may = ", ".join(sorted(LAYERS[package])) or "no other package"
    assert not wrong, f"{package} may import {may} (docs/ir.md); found:\n" + "\n".join(map(str, wrong))


def crossings(edges: list[Edge]) -> list[Edge]:
    """Imports between the compiler half and the runtime, in either direction."""
    def compiler(module: str) -> bool:
        return any(in_package(module, p) for p in COMPILER_PACKAGES)

    return [e for e in edges if (compiler(e.importer) and in_package(e.imported, RUNTIME_PACKAGE))
            or (in_package(e.importer, RUNTIME_PACKAGE) and compiler(e.imported))]


def test_compiler_and_runtime_meet_only_in_wire(edges):
    """No module of sglc.{frontend,ir,passes,executor} imports sglc_runtime, nor the reverse (lazy
    and type-only imports included): both import sglc.wire instead."""
    wrong = crossings(edges)
    assert not wrong, "the compiler half and the runtime import each other (go through sglc.wire):\n" + (
        "\n".join(map(str, wrong)))


def test_a_crossing_import_is_caught(tmp_path):
    """The crossing check sees a lazy import of the runtime in the executor and a type-only one back."""
    executor = write_package(tmp_path, {"__init__.py": "", "executor/__init__.py": "",
                                        "executor/run.py": "def f():\n    from sglc_runtime.engine import Engine\n"})
    runtime = tmp_path / "rt"
    (runtime / "engine").mkdir(parents=True)
    (runtime / "__init__.py").write_text("")
    (runtime / "engine" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sglc.executor.run import f\n")
    found = crossings(import_edges({"sglc": executor["pkg"], "sglc_runtime": runtime}))
    assert {(e.importer, e.imported, e.kind) for e in found} == {
        ("sglc.executor.run", "sglc_runtime.engine", LAZY),
        ("sglc_runtime.engine", "sglc.executor.run", TYPE_ONLY),
    }


def test_allowed_cross_layer_edges_are_lazy_and_still_needed(edges):
    """Each allowed edge exists and is a lazy import only (importing the frontend never loads the executor)."""
    for (importer, imported), reason in ALLOWED_EDGES.items():
        kinds = {e.kind for e in edges if (e.importer, e.imported) == (importer, imported)}
        assert kinds, f"{importer} no longer imports {imported} ({reason}): drop it from ALLOWED_EDGES"
        assert kinds == {LAZY}, f"{importer} -> {imported} ({reason}) must be a lazy import, is {kinds}"


def test_ir_uses_fsm_through_its_constraint_modules_only(edges):
    """sglc.ir -> sglc.fsm goes through gen_constraint and serialize; sglc.fsm never imports sglc.ir."""
    users = {e.importer for e in edges if in_package(e.importer, "sglc.ir") and in_package(e.imported, "sglc.fsm")}
    assert users == IR_MODULES_USING_FSM
    assert not [e for e in edges if in_package(e.importer, "sglc.fsm") and in_package(e.imported, "sglc.ir")]


# ----- the walker itself (tests/import_graph.py) -----

def write_package(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return {"pkg": tmp_path / "pkg"}


def test_walker_resolves_relative_imports_and_classifies_each_kind(tmp_path):
    """`from . import x`, `from .x import y`, lazy and TYPE_CHECKING imports are all edges, each kind named."""
    roots = write_package(tmp_path, {
        "__init__.py": "from . import a\n",
        "a.py": "from .b import thing\nimport os\n",
        "b.py": "def f():\n    from pkg import c\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.d import D\n",
        "sub/__init__.py": "",
        "sub/d.py": "from .. import a\nfrom ..b import missing_name\n",
    })
    found = {(e.importer, e.imported, e.kind) for e in import_edges(roots)}
    assert found == {
        ("pkg", "pkg.a", MODULE),
        ("pkg.a", "pkg.b", MODULE),
        ("pkg.b", "pkg.c", LAZY),
        ("pkg.c", "pkg.sub.d", TYPE_ONLY),
        ("pkg.sub.d", "pkg.a", MODULE),
        ("pkg.sub.d", "pkg.b", MODULE),
    }


def test_walker_reports_a_circle_with_lines_and_kinds(tmp_path):
    """A circle closed by a lazy import is reported, module by module, with each edge's line and kind."""
    roots = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import B\n",
        "b.py": "\n\ndef f():\n    from pkg.a import A\n",
        "c.py": "from pkg.a import A\n",
    })
    found = cycles(import_edges(roots), "pkg")
    assert [str(c) for c in found] == ["pkg.a -> pkg.b (line 1, module-level) -> pkg.a (line 4, lazy)"]
