"""The committed generated protobuf modules match what scripts/gen_proto.py makes from proto/."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gencode_version(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines()[:10]:
        if line.startswith("# Protobuf Python Version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def test_generated_modules_match_the_protos(tmp_path):
    """Regenerating into a temp dir reproduces every committed sglc/wire/proto/*_pb2* file byte for byte."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (a dev dependency) generates the modules")
    gen = _load_gen_proto()
    written = gen.generate(tmp_path)
    assert written, "no .proto files found"
    committed = sorted(p.name for p in (ROOT / "sglc" / "wire" / "proto").glob("*_pb2*.py*"))
    assert sorted(p.name for p in written) == committed, "generated file set differs; run scripts/gen_proto.py"
    for path in written:
        ours_version, new_version = (_gencode_version(p) for p in (ROOT / "sglc" / "wire" / "proto" / path.name, path))
        assert ours_version == new_version, (
            f"the installed grpcio-tools makes protobuf {new_version} code, the committed {path.name} is "
            f"{ours_version}: install the grpcio-tools pinned in pyproject's dev extras, or regenerate and commit"
        )
        ours = (ROOT / "sglc" / "wire" / "proto" / path.name).read_text(encoding="utf-8")
        assert path.read_text(encoding="utf-8") == ours, (
            f"sglc/wire/proto/{path.name} is stale: run `python scripts/gen_proto.py` and commit the result"
        )


def test_generated_modules_import_as_a_package():
    """sglc.wire.proto.graph_pb2 imports (its protobuf version check passes) and knows the Graph message."""
    from sglc.wire.proto import graph_pb2

    assert graph_pb2.Graph.DESCRIPTOR.full_name == "sglc.graph.Graph"
    field_numbers = {f.name: f.number for f in graph_pb2.Graph.DESCRIPTOR.fields}
    assert field_numbers["checksum"] == max(field_numbers.values()), "the checksum ends the file"
    assert field_numbers["checksum"] == 16, "the checksum's tag (0x82 0x01) is part of the frozen file layout"
    assert field_numbers["num_nodes"] > field_numbers["nodes"], "num_nodes is written after the nodes"


def test_generated_imports_are_package_relative():
    """No generated module imports a sibling *_pb2 module by a bare top-level name."""
    for path in (ROOT / "sglc" / "wire" / "proto").glob("*_pb2*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            assert not (line.startswith("import ") and "_pb2" in line), f"{path.name}: {line}"
