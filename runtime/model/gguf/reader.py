"""A minimal GGUF reader: the header, the metadata and the tensor table, and each tensor's bytes
as a read-only numpy view of the memory-mapped file. The one GGUF parser of the runtime (the
tokenizer builder reads metadata through ``read_gguf_metadata``).

gguf-py's GGUFReader builds a numpy view per metadata item (a SmolLM2 file's 98k tokenizer
strings took 6.9 s to open, a 262k-token vocabulary ~15 s); this one parses the header with
``struct``: string arrays become a ``StringArray`` decoded on first use (a start that never reads
the vocabulary skips its 65k-262k strings; undecodable bytes kept by ``surrogateescape``),
numeric arrays one numpy copy each. Format (GGUF v2/v3, little-endian): "GGUF", version u32,
tensor count u64, metadata count u64; metadata: key string (u64 length + UTF-8), value type u32,
value; tensor infos: name, n_dims u32, dims u64 (innermost first), type u32, offset u64; tensor
data from the first multiple of ``general.alignment`` (32) after the infos.
"""
from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .tensor_types import block_shape

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.dtype('<u1'), 1: np.dtype('<i1'), 2: np.dtype('<u2'), 3: np.dtype('<i2'), 4: np.dtype('<u4'),
          5: np.dtype('<i4'), 6: np.dtype('<f4'), 7: np.dtype('<u1'), 10: np.dtype('<u8'), 11: np.dtype('<i8'),
          12: np.dtype('<f8')}
STRING, ARRAY = 8, 9
MAX_DIMS = 4


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands (named with the offset)."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # innermost first, as GGUF lists it
    type: int  # ggml type id
    offset: int  # from the start of the tensor data


def file_mapping_of(view: np.ndarray) -> mmap.mmap | None:
    """The open file mapping ``view`` is a view of (None: other memory, or Linux's MADV_DONTNEED
    is missing): what :func:`release_pages_of` may drop."""
    base = view
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):  # NOTE: np.frombuffer's views hold the map through one
        base = base.obj
    if not isinstance(base, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED") or base.closed:
        return None
    return base


def release_pages_of(view: np.ndarray) -> None:
    """Drop this process's resident pages under ``view`` where it is a view of a file mapping
    (see :meth:`GGUFReaderLite.release_resident_pages`), as soon as its tensor is repacked, so
    that loading never holds the file and its repacked copy at once; anything else is left alone."""
    base = file_mapping_of(view)
    if base is None:
        return
    start = view.ctypes.data - np.frombuffer(base, np.uint8).ctypes.data
    lo = start // mmap.PAGESIZE * mmap.PAGESIZE
    hi = min(len(base), -(-(start + view.nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
    if hi > lo:
        base.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


_U64 = struct.Struct("<Q")


class StringArray(Sequence):
    """A metadata array of strings, decoded on first use: opening a file for its weights need
    not build a Python str per vocabulary entry (0.15 s and ~10 MiB for a 64k vocabulary)."""

    def __init__(self, buffer: mmap.mmap, offset: int, count: int) -> None:
        self._buffer, self._offset, self._count = buffer, offset, count
        self._items: list[str] | None = None

    def _decoded(self) -> list[str]:
        if self._items is None:
            buf, pos, items = self._buffer, self._offset, []
            for _ in range(self._count):
                (n,) = _U64.unpack_from(buf, pos)
                items.append(buf[pos + 8:pos + 8 + n].decode("utf-8", errors="surrogateescape"))
                pos += 8 + n
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):  # int or slice, as a list's
        return self._decoded()[index]

    def __iter__(self):
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, StringArray)) else NotImplemented

    def __repr__(self) -> str:
        return f"StringArray({self._count} strings)"


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

    def release_resident_pages(self) -> None:
        """Drop this process's resident pages of the file (Linux ``MADV_DONTNEED``): once the
        tensors are repacked into the kernels' own layouts, the mapped copy would count a second
        time in the process's memory. The mapping stays valid: a page read again (an embedding
        row) faults back in from the page cache."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)
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
        return self._take(self._scalar("<Q")).decode("utf-8", errors="surrogateescape")

    def _value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self._scalar(_SCALARS[kind])
        if kind == STRING:
            return self._string()
        if kind == ARRAY:
            return self._array(self._scalar("<I"), self._scalar("<Q"))
        raise GGUFFormatError(f"{self.path}: unknown metadata value type {kind} at byte {self._pos}")

    def _array(self, item: int, count: int) -> Any:
        if item in _NUMPY:
            dtype = np.dtype(_NUMPY[item] if item != 7 else np.uint8)
            if self._pos + dtype.itemsize * count > len(self._map):
                raise GGUFFormatError(f"{self.path}: an array runs past the end of the file")
            arr = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos).copy()
            self._pos += arr.nbytes
            return arr.astype(bool) if item == 7 else arr
        if item == STRING:  # NOTE: only walked here (lengths and bounds), decoded on first use
            start, end = self._pos, len(self._map)
            for _ in range(count):
                if self._pos + 8 > end:
                    raise GGUFFormatError(f"{self.path}: truncated at byte {self._pos}")
                (n,) = _U64.unpack_from(self._map, self._pos)
                self._pos += 8 + n
            if self._pos > end:
                raise GGUFFormatError(f"{self.path}: a string array runs past the end of the file")
            return StringArray(self._map, start, count)
        if item == ARRAY:
            return [self._array(self._scalar("<I"), self._scalar("<Q")) for _ in range(count)]
        raise GGUFFormatError(f"{self.path}: unknown array element type {item}")

    # -- access ----------------------------------------------------------------------------
    def field(self, key: str, default: Any = None) -> Any:
        """A metadata value (string arrays as a ``StringArray`` sequence of str, numeric arrays as numpy)."""
        return self.fields.get(key, default)

    def array_length(self, key: str) -> int | None:
        value = self.fields.get(key)
        return len(value) if isinstance(value, (list, StringArray, np.ndarray)) else None

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


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """Every metadata key of the GGUF at ``path``: ``{"general.architecture": "llama", ...}``."""
    return GGUFReaderLite(path).fields
