#!/usr/bin/env python
"""Generate the protobuf/gRPC Python modules of every proto/*.proto into sglc/wire/proto/.

The ONE script that produces generated code. Its output is committed; tests/test_proto_generated.py
runs it into a temporary folder and fails if the result differs from the committed files.

    python scripts/gen_proto.py             # regenerate sglc/wire/proto/*_pb2*.py(i)
    python scripts/gen_proto.py --out DIR   # write elsewhere (used by the drift test)

Files with a `service` also get a *_pb2_grpc.py. Imports between generated modules are made
package-relative (`from . import graph_pb2`), so sglc.wire.proto works without touching sys.path.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "sglc" / "wire" / "proto"

_SERVICE = re.compile(r"^\s*service\s+\w+", re.MULTILINE)
_ABSOLUTE_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generated_names(proto: Path) -> list[str]:
    """The files protoc writes for one .proto (under the output folder)."""
    stem = proto.stem
    names = [f"{stem}_pb2.py", f"{stem}_pb2.pyi"]
    if _SERVICE.search(proto.read_text(encoding="utf-8")):
        names.append(f"{stem}_pb2_grpc.py")
    return names


def generate(out_dir: Path = OUT_DIR) -> list[Path]:
    """Run protoc for every proto/*.proto into out_dir; returns the files written."""
    from grpc_tools import protoc  # dev dependency: grpcio-tools
    import grpc_tools

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for proto in sorted(PROTO_DIR.glob("*.proto")):
        args = ["grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}",
                f"--python_out={out_dir}", f"--pyi_out={out_dir}"]
        wants_grpc = _SERVICE.search(proto.read_text(encoding="utf-8")) is not None
        if wants_grpc:
            args.append(f"--grpc_python_out={out_dir}")
        if protoc.main([*args, str(proto)]) != 0:
            raise SystemExit(f"protoc failed on {proto}")
        for name in generated_names(proto):
            path = out_dir / name
            text = path.read_text(encoding="utf-8")
            path.write_text(_ABSOLUTE_IMPORT.sub(r"from . import \1 as \2", text), encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default: sglc/wire/proto)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
