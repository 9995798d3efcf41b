"""Plain C++ sources of the sglc package built into shared libraries once per machine and loaded
with ctypes (the runtime's torch kernels have their own builder: runtime/model/native/build.py).

A library's folder under ``<cache root>/native/`` is keyed by a hash of its source, the flags and
the compiler's version: an edited source or another toolchain builds anew (~1 s), an unchanged
one loads in milliseconds. Concurrent builders (a compile pool's workers starting together) race
harmlessly: each writes a temporary file and renames it into place.

Optional by design: with ``SGLC_NATIVE_OPS=0``, or without a working compiler, :func:`load_library`
returns None and says why once in the log; callers keep a Python path for that.
``SGLC_NATIVE_OPS=require`` turns a failed build into an error instead.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Callable

from .cache_root import cache_root

log = logging.getLogger(__name__)

ENV = "SGLC_NATIVE_OPS"  # "0": never build; "require": a failed build raises; else build when possible

#: No -march: a library must load on every CPU of the architecture (the walks it serves are
#: branches and small sets, not vector arithmetic).
CFLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden"]

_lock = threading.Lock()
_loaded: dict[Path, ctypes.CDLL | None] = {}


class NativeLibraryError(RuntimeError):
    """``SGLC_NATIVE_OPS=require`` and a library could not be built or loaded."""


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else c++ or g++ on the PATH."""
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"


def compiler_version(cxx: str) -> str:
    """``cxx --version``'s first line (part of a build's key); '' if it does not run."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0] if out.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def library_path(source: Path) -> Path:
    """Where ``source``'s library is (or will be) built."""
    cxx = compiler()
    h = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(CFLAGS).encode(), compiler_version(cxx).encode(),
                 sysconfig.get_platform().encode()):
        h.update(part)
        h.update(b"\0")
    return cache_root() / "native" / f"{source.stem}-{h.hexdigest()[:16]}" / f"{source.stem}.so"


def _build(source: Path, lib: Path) -> None:
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=lib.parent, suffix=".so.tmp", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        cmd = [compiler(), *CFLAGS, str(source), "-o", str(partial)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            tail = " | ".join(out.stderr.strip().splitlines()[-6:])
            raise RuntimeError(f"compiling {source.name} failed ({' '.join(cmd[:2])} ...): {tail}")
        partial.replace(lib)  # NOTE: atomic: a concurrent builder's rename is as good as ours
    finally:
        partial.unlink(missing_ok=True)


def load_library(source: Path, declare: Callable[[ctypes.CDLL], None] | None = None) -> ctypes.CDLL | None:
    """``source`` built (the first time), loaded and given to ``declare`` once (it sets the
    functions' argtypes and restype), or None when native code is off or the build failed (logged
    once; raises :class:`NativeLibraryError` under ``SGLC_NATIVE_OPS=require``)."""
    if source in _loaded:  # NOTE: every grammar compile asks; only the first builds
        return _loaded[source]
    source = Path(source)
    with _lock:
        if source in _loaded:
            return _loaded[source]
        mode = os.environ.get(ENV, "")
        lib = None
        if mode == "0":
            log.info("%s=0: %s not built; the Python path runs", ENV, source.name)
        else:
            try:
                path = library_path(source)
                if not path.exists():
                    _build(source, path)
                lib = ctypes.CDLL(str(path))
                if declare is not None:
                    declare(lib)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                if mode == "require":
                    raise NativeLibraryError(f"{source.name}: {e}") from e
                log.warning("%s could not be built (%s); the Python path runs", source.name, e)
        _loaded[source] = lib
        return lib
