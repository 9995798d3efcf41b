"""Every third-party module the code imports is declared in pyproject.toml (dependencies or the
extras setup.sh installs), so `bash setup.sh && python -m pytest` works on a fresh machine; a module
that happens to be installed by hand (or pulled in by another package) cannot hide a missing entry.

Imports are read with `ast` from sglc/, runtime/, tests/, bench/ and scripts/. Imports inside a
`try:` whose handler catches ImportError are optional (the code runs without them) and skipped.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ["sglc", "runtime", "tests", "bench", "scripts"]
#: Import names of this repository's own packages (runtime/ installs as sglc_runtime).
OWN = {"sglc", "sglc_runtime", "runtime", "bench", "scripts"}
#: Import names whose distribution is named differently (longest dotted prefix wins).
DISTRIBUTION_OF = {
    "google.protobuf": "protobuf",
    "grpc": "grpcio",
    "grpc_tools": "grpcio-tools",
    "yaml": "pyyaml",
    "PIL": "pillow",
}
_OPTIONAL_ERRORS = {"ImportError", "ModuleNotFoundError"}


def normalize(name: str) -> str:
    """PEP 503 normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: The extras setup.sh installs (sglang-nodeps with --no-deps): what the tests may import.
SETUP_EXTRAS = ("dev", "fleet", "sglang-client", "sglang-nodeps")


def declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    requirements = list(project.get("dependencies", []))
    for extra in SETUP_EXTRAS:
        requirements += extras.get(extra, [])
    return {normalize(re.match(r"[A-Za-z0-9._-]+", r.strip()).group(0)) for r in requirements}


def _is_optional(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(n, ast.Name) and n.id in _OPTIONAL_ERRORS for n in names):
            return True
    return False


def required_imports(tree: ast.AST) -> list[str]:
    """Dotted names imported outside `try: ... except ImportError` blocks (absolute imports only)."""
    optional: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and _is_optional(node.handlers):
            for inner in node.body:
                optional.update(id(n) for n in ast.walk(inner))
    names = []
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def is_local(top: str, file: Path) -> bool:
    """A package of this repository, or a sibling module of the importing file (test helpers)."""
    return top in OWN or (file.parent / f"{top}.py").exists() or (file.parent / top / "__init__.py").exists()


def distribution_for(dotted: str) -> str:
    for prefix in sorted(DISTRIBUTION_OF, key=len, reverse=True):
        if dotted == prefix or dotted.startswith(prefix + "."):
            return DISTRIBUTION_OF[prefix]
    return normalize(dotted.split(".")[0])


def third_party_imports() -> dict[str, set[str]]:
    """distribution -> files importing it, for every import that is neither stdlib nor local."""
    found: dict[str, set[str]] = {}
    for folder in SCANNED:
        for file in sorted((ROOT / folder).rglob("*.py")):
            for dotted in required_imports(ast.parse(file.read_text(encoding="utf-8"), str(file))):
                top = dotted.split(".")[0]
                if top in sys.stdlib_module_names or is_local(top, file):
                    continue
                found.setdefault(distribution_for(dotted), set()).add(str(file.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared_in_pyproject():
    """Each imported third-party distribution is in [project] dependencies or the dev extras."""
    declared = declared_distributions()
    missing = {dist: files for dist, files in third_party_imports().items() if dist not in declared}
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(
        f"{dist} (by {', '.join(sorted(files)[:3])})" for dist, files in sorted(missing.items()))


def test_setup_installs_the_extras_the_tests_rely_on():
    """setup.sh (which CI runs) installs every extra of SETUP_EXTRAS, so what they declare is there."""
    setup = (ROOT / "setup.sh").read_text(encoding="utf-8")
    installed = re.search(r'-e "\.\[([a-z,-]+)\]"', setup)
    assert installed, "setup.sh does not install sglc with extras"
    assert set(installed.group(1).split(",")) == set(SETUP_EXTRAS) - {"sglang-nodeps"}
    assert '--no-deps $(python -c' in setup and '["sglang-nodeps"]' in setup, \
        "setup.sh does not install the sglang-nodeps extra with --no-deps"


def test_the_scan_sees_the_imports_it_must_check():
    """The walker finds known third-party imports (torch, grpc as grpcio, google.protobuf as protobuf)."""
    found = third_party_imports()
    assert {"torch", "grpcio", "protobuf", "jsonschema", "pytest"} <= set(found)


def test_imports_guarded_by_import_error_are_optional():
    """An import inside `try: ... except ImportError:` is not required; one outside it is."""
    tree = ast.parse("try:\n    import xgrammar\nexcept ImportError:\n    pass\nimport numpy\n")
    assert required_imports(tree) == ["numpy"]
