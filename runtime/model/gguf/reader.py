"""A minimal GGUF reader: the header, the metadata and the tensor table, and each tensor's bytes
as a read-only numpy view of the memory-mapped file.

gguf-py's GGUFReader builds a numpy view per metadata item (a SmolLM2 file's 98k tokenizer
strings took 6.9 s to open); this one parses the header with ``struct`` and keeps arrays as
(type, count, offset) until asked for, so a model opens in milliseconds. Format (GGUF v2/v3,
little-endian): "GGUF", version u32, tensor count u64, metadata count u64; metadata: key string
(u64 length + UTF-8), value type u32, value; tensor infos: name, n_dims u32, dims u64 (innermost
first), type u32, offset u64; tensor data from the first multiple of ``general.alignment`` (32)
after the infos.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .tensor_types import block_shape

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32, 7: np.bool_,
          10: np.uint64, 11: np.int64, 12: np.float64}
STRING, ARRAY = 8, 9
MAX_DIMS = 4


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands (named with the offset)."""


@dataclass(frozen=True, slots=True)
class LazyArray:
    """A metadata array not yet decoded: element type, count and where its elements start."""

    type: int
    count: int
    offset: int


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # innermost first, as GGUF lists it
    type: int  # ggml type id
    offset: int  # from the start of the tensor data


class GGUFReaderLite:
    """Header, metadata and tensor table of a GGUF file; tensors as views of its memory map."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # NOTE: an empty file cannot be mapped
                raise GGUFFormatError(f"{self.path}: empty file") from None
        self._pos = 0
        if self._take(4) != b"GGUF":
            raise GGUFFormatError(f"{self.path}: not a GGUF file (no GGUF magic)")
        self.version = self._scalar("<I")
        if self.version not in (2, 3):
            raise GGUFFormatError(f"{self.path}: GGUF version {self.version} is not supported (2 and 3 are)")
        n_tensors, n_kv = self._scalar("<Q"), self._scalar("<Q")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            self.fields[key] = self._value(self._scalar("<I"))
        self.tensors: dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar("<I")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFFormatError(f"{self.path}: tensor {name!r} has {n_dims} dimensions")
            shape = tuple(self._scalar("<Q") for _ in range(n_dims))
            self.tensors[name] = TensorInfo(name, shape, self._scalar("<I"), self._scalar("<Q"))
        align = int(self.fields.get("general.alignment", 32))
        self.data_offset = -(-self._pos // align) * align

    # -- parsing ---------------------------------------------------------------------------
    def _take(self, n: int) -> bytes:
        if self._pos + n > len(self._map):
            raise GGUFFormatError(f"{self.path}: truncated at byte {self._pos}")
        b = self._map[self._pos:self._pos + n]
        self._pos += n
        return b

    def _scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self._take(size))[0]

    def _string(self) -> str:
        return self._take(self._scalar("<Q")).decode("utf-8", errors="replace")

    def _value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self._scalar(_SCALARS[kind])
        if kind == STRING:
            return self._string()
        if kind == ARRAY:
            item, count = self._scalar("<I"), self._scalar("<Q")
            lazy = LazyArray(item, count, self._pos)
            self._skip_array(item, count)
            return lazy
        raise GGUFFormatError(f"{self.path}: unknown metadata value type {kind} at byte {self._pos}")

    def _skip_array(self, item: int, count: int) -> None:
        if item in _SCALARS:
            self._pos += struct.calcsize(_SCALARS[item]) * count
        elif item == STRING:
            for _ in range(count):
                self._pos += 8 + struct.unpack_from("<Q", self._map, self._pos)[0]
        elif item == ARRAY:
            for _ in range(count):
                inner, n = struct.unpack_from("<IQ", self._map, self._pos)
                self._pos += 12
                self._skip_array(inner, n)
        else:
            raise GGUFFormatError(f"{self.path}: unknown array element type {item}")
        if self._pos > len(self._map):
            raise GGUFFormatError(f"{self.path}: an array runs past the end of the file")

    # -- access ----------------------------------------------------------------------------
    def field(self, key: str, default: Any = None) -> Any:
        """A metadata value; arrays decoded (numbers as a list, strings as a list of str)."""
        value = self.fields.get(key, default)
        if not isinstance(value, LazyArray):
            return value
        if value.type in _NUMPY:
            return np.frombuffer(self._map, dtype=_NUMPY[value.type], count=value.count, offset=value.offset).tolist()
        if value.type == STRING:
            out, pos = [], value.offset
            for _ in range(value.count):
                n = struct.unpack_from("<Q", self._map, pos)[0]
                out.append(self._map[pos + 8:pos + 8 + n].decode("utf-8", errors="replace"))
                pos += 8 + n
            return out
        raise GGUFFormatError(f"{self.path}: {key}: nested arrays are not decoded")

    def array_length(self, key: str) -> int | None:
        value = self.fields.get(key)
        return value.count if isinstance(value, LazyArray) else None

    def tensor_bytes(self, info: TensorInfo, type_name: str) -> np.ndarray:
        """The tensor's bytes, a read-only uint8 view of the map [rows, bytes per row]."""
        per, nbytes = block_shape(type_name)
        inner = info.shape[0]
        rows = int(np.prod(info.shape[1:], dtype=np.int64)) if len(info.shape) > 1 else 1
        if inner % per:
            raise GGUFFormatError(f"{self.path}: tensor {info.name!r}: {inner} values per row are not whole "
                                  f"{type_name} blocks of {per}")
        row_bytes = inner // per * nbytes
        start = self.data_offset + info.offset
        if start + rows * row_bytes > len(self._map):
            raise GGUFFormatError(f"{self.path}: tensor {info.name!r} runs past the end of the file")
        return np.frombuffer(self._map, dtype=np.uint8, count=rows * row_bytes, offset=start).reshape(rows, row_bytes)
