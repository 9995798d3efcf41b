"""One safetensors tensor read in place: a tensor over its own memory map of the file's bytes.

A token embedding is only ever looked up row by row, so it need not be copied into the process
the way the linears are (they are repacked for their kernels anyway). Mapped, it costs the pages
of the rows looked up, clean page-cache pages the kernel can drop under pressure, where a copy
is the whole table in anonymous memory for good: a tied bf16 table (Llama 3.2, Qwen3, Gemma) is
also the lm_head, whose oneDNN-packed copy would otherwise sit beside it (64 MiB for a 32k x 1024
table, 604 MiB for Gemma 3 1B's 262k x 1152). GGUF files already work this way
(``models/gguf_linear.py`` ``GGUFEmbedding``).

The map is private and writable (``ACCESS_COPY``): a stray in-place write lands in a private copy
of that page instead of faulting on a read-only map; nothing in the runtime writes a weight. Like
a GGUF's map (and llama.cpp's), it reads the file as it is: a checkpoint rewritten in place while
the server runs changes the rows looked up after that (replacing the file, as downloads do, does not).
The header is read by ``weights.safetensors_header`` (the format is described there).
"""
from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import torch

from .weights import safetensors_files, safetensors_header

_TORCH_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_WORDS = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32}  # NOTE: numpy has no bf16; bits, then a torch view


class MappedTensor:
    """``tensor`` over a private map of its bytes; :meth:`release_pages` drops the pages this
    process has touched (they fault back in from the page cache when read again)."""

    __slots__ = ("tensor", "_map")

    def __init__(self, tensor: torch.Tensor, mapping: mmap.mmap) -> None:
        self.tensor, self._map = tensor, mapping

    def release_pages(self) -> None:
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)


def map_tensor(folder: str | Path, name: str) -> MappedTensor | None:
    """``name`` from the folder's safetensors files as a tensor over its own map, or None where it
    cannot be read in place (not found, a dtype other than BF16/F16/F32, offsets that do not fit
    the file or the shape): the caller then copies it as usual."""
    for file in safetensors_files(folder):
        header, data_start = safetensors_header(file)
        entry = header.get(name)
        if entry is None:
            continue
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in _TORCH_DTYPES or not isinstance(shape, list) or not isinstance(offsets, list):
            return None
        begin, end = data_start + offsets[0], data_start + offsets[1]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        itemsize = np.dtype(_WORDS[dtype]).itemsize
        if not 0 <= begin <= end <= file.stat().st_size or end - begin != count * itemsize or count == 0:
            return None
        start = begin // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
        with open(file, "rb") as f:
            mapping = mmap.mmap(f.fileno(), end - start, access=mmap.ACCESS_COPY, offset=start)
        words = np.frombuffer(mapping, dtype=_WORDS[dtype], count=count, offset=begin - start).reshape(shape)
        tensor = torch.from_numpy(words).view(_TORCH_DTYPES[dtype])
        return MappedTensor(tensor, mapping)
    return None
