"""Give the memory a model load freed back to the operating system.

Loading repacks every tensor of a GGUF through temporaries (decoded blocks, tiles, scales), on
several threads, each with its own malloc arena. glibc keeps what they free for later
allocations instead of unmapping it, so the process stays as large as the load's peak: a
Gemma-3 1B Q4_K_M held 1,338 MB after its load, 1,081 MB after ``malloc_trim`` (a Llama 0.3B
719 -> 685 MB). One call after the load; a no-op (False) where the C library has no
``malloc_trim`` (musl, macOS).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _trim():
    name = ctypes.util.find_library("c")
    try:
        trim = getattr(ctypes.CDLL(name), "malloc_trim") if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
    return trim


def return_freed_memory() -> bool:
    """Unmap the free memory of every malloc arena; whether the C library could."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
