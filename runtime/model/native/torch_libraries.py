"""libc10 and libtorch_cpu, found in the installed torch package and loaded without importing it.

The torch-free engine's binding resolves its symbols in these two libraries (``c_library.py``).
Loading them is ~0.15-0.2 s of static initializers (torch's operator registry), a sixth of a
native ``sglc serve`` start. ``ctypes.CDLL`` runs ``dlopen`` holding the GIL, so nothing else in
the process moves meanwhile; :func:`preload` instead calls libc's ``dlopen`` as a ctypes foreign
function (which releases the GIL) in a thread, so the start's imports, the tokenizer and the
GGUF header run beside it. :func:`load` then finds them loaded (a second ``dlopen`` of a loaded
library only counts a reference).

Stdlib only, so a command can start the preload before it imports numpy or the runtime.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from pathlib import Path

#: in load order: libtorch_cpu needs libc10's symbols
NAMES = ("libc10.so", "libtorch_cpu.so")
#: global: the binding resolves its symbols in them; lazy: functions resolve on first call (~15 ms
#: less than resolving them all now)
MODE = ctypes.RTLD_GLOBAL | os.RTLD_LAZY

_lock = threading.Lock()
_preloading: threading.Thread | None = None


class TorchLibraryError(RuntimeError):
    """torch is not installed, or its libraries do not load (the message says which)."""


def library_dir() -> Path:
    """``torch/lib`` of the installed torch, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise TorchLibraryError("torch is not installed: its libc10 and libtorch_cpu carry the native binding")
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def _dlopen_without_gil(paths: list[Path]) -> None:
    dlopen = ctypes.CDLL(None).dlopen  # NOTE: a ctypes call of libc's dlopen releases the GIL; CDLL() does not
    dlopen.restype, dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    for path in paths:
        if not dlopen(str(path).encode(), MODE):
            return  # NOTE: load() repeats it with CDLL, which raises with dlerror's message


def preload() -> None:
    """Start loading the libraries in a thread (once; a no-op where torch is not installed:
    :func:`load` reports that)."""
    global _preloading
    with _lock:
        if _preloading is not None:
            return
        try:
            paths = [library_dir() / name for name in NAMES]
        except TorchLibraryError:
            return
        _preloading = threading.Thread(target=_dlopen_without_gil, args=(paths,), name="sglc-torch-libs", daemon=True)
        _preloading.start()


def load() -> None:
    """The libraries loaded into the process's global namespace (waiting for a preload first:
    CDLL would otherwise wait on the loader's lock holding the GIL)."""
    with _lock:
        preloading = _preloading
    if preloading is not None:
        preloading.join()
    folder = library_dir()
    for name in NAMES:
        try:
            ctypes.CDLL(str(folder / name), mode=MODE)
        except OSError as err:
            raise TorchLibraryError(f"{name} does not load: {err}") from None
