"""The native binding loaded with ctypes, in a process that never imports torch's Python package.

``import torch`` costs ~1 s and ~210 MiB before a model is read (docs/benchmarks.md, issue #26);
the binding itself needs only ``libc10`` and ``libtorch_cpu`` (~0.2 s, ~100 MiB). This module
loads them (``torch_libraries.py``: found in the installed torch package without importing it),
then the binding (``binding/cpu_ops.cpp``, whose ``c_api.h`` gives its ops as C functions) and
the kernel variant of this CPU's level. The binding is built by the torch process's builder (``build.py``): when this
machine has no build of the current sources yet, a child process builds it once.

:class:`CTensor` is one tensor crossing the boundary: over a numpy array (never copied; the
handle keeps the array alive) or owned by the library (an op's result).
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from . import capabilities, torch_libraries
from .build import BINDING_LIBRARY, ENV, binding_folder, disabled_reason, variant_library

#: numpy dtypes in the order of c_api.h's kCodeDtypes (bfloat16 has no numpy dtype: uint16 bits,
#: named by code 1 explicitly)
DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 2, np.dtype(np.float64): 3, np.dtype(np.int64): 4,
               np.dtype(np.int32): 5, np.dtype(np.uint8): 6, np.dtype(np.int8): 7, np.dtype(np.int16): 8,
               np.dtype(np.bool_): 9}
BF16 = 1  # code of bfloat16 (numpy holds it as uint16)
_CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()} | {BF16: np.dtype(np.uint16)}
_ERR_LEN = 2048
MAX_DIMS = 8


class NativeLibraryError(RuntimeError):
    """The binding could not be found, built or loaded, or one of its calls failed (the message is
    the op's own)."""


def _build_in_child() -> None:
    """Build the binding of these sources in a child process (which imports torch, once)."""
    build_module = __name__.rsplit(".", 1)[0] + ".build"
    top = __name__.split(".")[0]
    root = Path(sys.modules[top].__path__[0]).parent  # NOTE: the folder holding the package (or its link)
    env = dict(os.environ, **{ENV: "require"})
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", f"import {build_module} as b; b.load_cpu_ops()"],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-4:])
        raise NativeLibraryError(f"building the native binding failed: {tail}")


class CLibrary:
    """The loaded binding's C functions, with the kernels of one level active."""

    def __init__(self, level: str | None = None) -> None:
        reason = disabled_reason()
        if reason is not None:
            raise NativeLibraryError(f"the native binding is {reason}")
        self.level = capabilities.chosen_level() if level is None else level
        folder = binding_folder()
        if not (folder / BINDING_LIBRARY).exists() or (folder / "lock").exists():
            _build_in_child()
        try:
            torch_libraries.load()
        except torch_libraries.TorchLibraryError as err:
            raise NativeLibraryError(f"the native binding does not load: {err}") from None
        try:
            self.lib = ctypes.CDLL(str(folder / BINDING_LIBRARY))
        except OSError as err:
            raise NativeLibraryError(f"the native binding does not load: {err}") from None
        self._declare()
        name = ctypes.create_string_buffer(64)
        self.call("sglc_c_load_kernels", str(variant_library(self.level)).encode(), name, 64)
        self.call("sglc_c_use_kernels", self.level.encode())

    def _declare(self) -> None:
        """Every function's C signature (ctypes would pass a Python int as a 32-bit int: an int64_t
        argument past the sixth would then read garbage from its stack slot)."""
        p, i64, c, i32, f64, sz = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int, ctypes.c_double,
                                   ctypes.c_size_t)
        pp, cp = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_char_p)
        err = [c, sz]
        signatures = {
            "sglc_c_load_kernels": (i32, [c, c, sz, *err]),
            "sglc_c_use_kernels": (i32, [c, *err]),
            "sglc_c_set_threads": (None, [i32]),
            "sglc_c_defer_huge_pages": (None, [i32]),
            "sglc_c_collapse_huge_pages": (sz, []),
            "sglc_c_wrap": (p, [p, i32, i32, ctypes.POINTER(i64), *err]),
            "sglc_c_zeros": (p, [i32, i32, ctypes.POINTER(i64), *err]),
            "sglc_c_free": (None, [p]),
            "sglc_c_describe": (i32, [p, ctypes.POINTER(i64), i32, ctypes.POINTER(i32), ctypes.POINTER(i32), pp, *err]),
            "sglc_c_gguf_tiles_batch": (i32, [i64, cp, ctypes.POINTER(i64), ctypes.POINTER(i64), pp,
                                              ctypes.POINTER(i64), ctypes.POINTER(i32), pp, ctypes.POINTER(i32), *err]),
            "sglc_c_rms_norm": (i32, [p, p, f64, pp, *err]),
            "sglc_c_stacked_linear": (i32, [p, cp, i64, pp, i64, pp, *err]),
            "sglc_c_layer_new": (p, []),
            "sglc_c_layer_free": (None, [p]),
            "sglc_c_layer_set_projection": (i32, [p, c, cp, i64, pp, i64, p, *err]),
            "sglc_c_layer_set_attention": (i32, [p, i64, i64, i64, p, p, p, f64, f64, *err]),
            "sglc_c_layer_set_mlp": (i32, [p, p, p, c, f64, *err]),
            "sglc_c_layer_set_experts": (i32, [p, cp, i64, pp, i64, cp, i64, pp, i64, c, p, i64, i32, i32, *err]),
            "sglc_c_layer_forward": (i32, [p, p, p, p, p, p, p, p, p, p, p, p, pp, *err]),
        }
        for name, (restype, argtypes) in signatures.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = restype, argtypes

    def call(self, name: str, *args) -> None:
        """``name(*args, err, err_len)``; NativeLibraryError with the op's message when it fails."""
        err = ctypes.create_string_buffer(_ERR_LEN)
        if getattr(self.lib, name)(*args, err, _ERR_LEN) != 0:
            raise NativeLibraryError(err.value.decode(errors="replace"))

    def set_threads(self, threads: int) -> None:
        self.lib.sglc_c_set_threads(int(threads))


_lock = threading.Lock()
_libraries: dict[str, CLibrary] = {}


def c_library(level: str | None = None) -> CLibrary:
    """The binding with ``level``'s kernels (default: this CPU's chosen level), loaded once."""
    level = capabilities.chosen_level() if level is None else level
    with _lock:
        if level not in _libraries:
            _libraries[level] = CLibrary(level)
        return _libraries[level]


class CTensor:
    """One tensor handle: over a numpy array (``wrap``) or owned by the library (an op's result)."""

    __slots__ = ("lib", "handle", "keep", "__weakref__")

    def __init__(self, lib: CLibrary, handle: int, keep: np.ndarray | None = None) -> None:
        if not handle:
            raise NativeLibraryError("a null tensor handle")
        self.lib, self.handle, self.keep = lib, handle, keep

    @classmethod
    def wrap(cls, lib: CLibrary, array: np.ndarray, code: int | None = None) -> CTensor:
        """A handle over ``array`` (made C-contiguous first if it is not); ``code``: c_api.h's
        dtype code where the array's dtype does not say it (bfloat16 held as uint16)."""
        array = np.ascontiguousarray(array)
        if code is None:
            try:
                code = DTYPE_CODES[array.dtype]
            except KeyError:
                raise NativeLibraryError(f"no native dtype for numpy {array.dtype}") from None
        shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        err = ctypes.create_string_buffer(_ERR_LEN)
        handle = lib.lib.sglc_c_wrap(ctypes.c_void_p(array.ctypes.data), code, array.ndim, shape, err, _ERR_LEN)
        if not handle:
            raise NativeLibraryError(err.value.decode(errors="replace"))
        return cls(lib, handle, array)

    @classmethod
    def zeros(cls, lib: CLibrary, shape: Sequence[int], code: int) -> CTensor:
        """A new zero-filled tensor owned by the library (filled now, on the pool's threads)."""
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        err = ctypes.create_string_buffer(_ERR_LEN)
        handle = lib.lib.sglc_c_zeros(code, len(shape), dims, err, _ERR_LEN)
        if not handle:
            raise NativeLibraryError(err.value.decode(errors="replace"))
        return cls(lib, handle)

    def numpy(self) -> np.ndarray:
        """The tensor's values as a numpy array over its memory (valid while this handle lives)."""
        if self.keep is not None:
            return self.keep
        shape = (ctypes.c_int64 * MAX_DIMS)()
        ndim, code, data = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
        self.lib.call("sglc_c_describe", ctypes.c_void_p(self.handle), shape, MAX_DIMS, ctypes.byref(ndim),
                      ctypes.byref(code), ctypes.byref(data))
        dims = tuple(shape[:ndim.value])
        dtype = _CODE_DTYPES[code.value]
        count = int(np.prod(dims, dtype=np.int64))
        if count == 0:
            return np.empty(dims, dtype)
        raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(data.value)
        return np.frombuffer(raw, dtype=dtype).reshape(dims)

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self.lib.lib.sglc_c_free(ctypes.c_void_p(handle))


def handles(tensors: Sequence[CTensor]):
    """A C array of the tensors' handles."""
    return (ctypes.c_void_p * max(len(tensors), 1))(*[t.handle for t in tensors])


def strings(values: Sequence[str]):
    """A C array of UTF-8 strings."""
    return (ctypes.c_char_p * max(len(values), 1))(*[v.encode() for v in values])

