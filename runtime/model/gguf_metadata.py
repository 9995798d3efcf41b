"""A GGUF file's key/value metadata, read without its tensors.

gguf-py's ``GGUFReader`` builds a Python object per array element of every field, which takes
seconds for a 262k-token vocabulary and its 500k merges; the tokenizer needs only those arrays, so
this reads the metadata section alone: string arrays as ``list[str]``, numeric arrays as numpy
arrays (one ``frombuffer`` each), scalars as Python values. Versions 2 and 3 (64-bit counts).
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

# GGUF value types: numeric ones by struct format and numpy dtype
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_DTYPE = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
          12: "<f8"}
_STRING, _ARRAY = 8, 9


class GGUFMetadataError(ValueError):
    """The file is not a GGUF this reader understands (magic, version or a value type)."""


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """Every metadata key of the GGUF at ``path``: ``{"general.architecture": "llama", ...}``."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as blob:
        if blob[:4] != b"GGUF":
            raise GGUFMetadataError(f"{str(path)!r} is not a GGUF file (no GGUF magic)")
        version, _tensors, count = struct.unpack_from("<IQQ", blob, 4)
        if version not in (2, 3):
            raise GGUFMetadataError(f"{str(path)!r}: GGUF version {version} is not supported (2 and 3 are)")
        pos, out = 24, {}
        for _ in range(count):
            key, pos = _string(blob, pos)
            (kind,) = struct.unpack_from("<I", blob, pos)
            out[key], pos = _value(blob, pos + 4, kind, key)
        return out


def _string(blob: mmap.mmap, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", blob, pos)
    end = pos + 8 + n
    return blob[pos + 8:end].decode("utf-8", errors="surrogateescape"), end


def _value(blob: mmap.mmap, pos: int, kind: int, key: str) -> tuple[Any, int]:
    if kind in _SCALAR:
        (v,) = struct.unpack_from(_SCALAR[kind], blob, pos)
        return v, pos + struct.calcsize(_SCALAR[kind])
    if kind == _STRING:
        return _string(blob, pos)
    if kind != _ARRAY:
        raise GGUFMetadataError(f"GGUF key {key!r} has unknown value type {kind}")
    item, n = struct.unpack_from("<IQ", blob, pos)
    pos += 12
    if item in _DTYPE:
        arr = np.frombuffer(blob, dtype=_DTYPE[item], count=n, offset=pos).copy()
        return (arr.astype(bool) if item == 7 else arr), pos + arr.nbytes
    if item == _STRING:
        values = []
        for _ in range(n):
            s, pos = _string(blob, pos)
            values.append(s)
        return values, pos
    if item == _ARRAY:  # nested arrays: walk them (no tokenizer key holds one)
        values = []
        for _ in range(n):
            v, pos = _value(blob, pos, _ARRAY, key)  # each element is (type, count, items) again
            values.append(v)
        return values, pos
    raise GGUFMetadataError(f"GGUF key {key!r} is an array of unknown type {item}")
