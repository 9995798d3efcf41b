"""Build ``cpu_ops.cpp`` once per machine and load it as ``torch.ops.sglc_cpu``.

The kernels are compiled with torch's own extension builder (gcc + ninja, ~20 s on 2 cores) into
``<cache root>/native/<key>``, where the key hashes the source, the flags, torch's version, the
Python ABI and the CPU's feature flags (the build is ``-march=native``, like llama.cpp's
``GGML_NATIVE``): an edited source, another torch or another CPU builds anew, an unchanged one
loads in milliseconds.
Concurrent builders (a fleet's workers starting together) wait on torch's lock in that folder.

Nothing here is required: without a compiler, or with ``SGLC_NATIVE_OPS=0``, :func:`load_cpu_ops`
says why and the model runs its eager fallbacks (``models/layer_ops.py``), the same math in
plain torch ops. ``SGLC_NATIVE_OPS=require`` turns a failed build into an error instead.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import sysconfig
import threading
import time
from pathlib import Path

import torch

from ..cache_root import cache_root

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_ops.cpp")
LIBRARY = "sglc_cpu"  # the torch.ops namespace cpu_ops.cpp registers
ENV = "SGLC_NATIVE_OPS"  # "0": never build; "require": a failed build raises; else build when possible

#: torch's builder serialises builders with a ``lock`` file in the build folder and waits, without
#: end, while it exists; a builder killed mid-build (Ctrl-C on a first `sglc serve`) leaves it.
#: A build takes ~20 s, so a lock this old is stale.
STALE_LOCK_SECONDS = 300

_lock = threading.Lock()
_state: dict[str, str | None] = {}  # "error" -> None once loaded, or why not


class NativeOpsError(RuntimeError):
    """``SGLC_NATIVE_OPS=require`` and the kernels could not be built or loaded."""


#: -march=native: the kernels' loops vectorise for this CPU. -fopenmp: at::parallel_for's inline
#: OpenMP region (without it the pragma is dropped and the kernels run on one thread; the symbols
#: resolve to torch's own libgomp, so there is still one thread pool), and the loops' `omp simd`
#: reductions (float sums reassociated) without -ffast-math's other licences.
#: -fno-trapping-math: float -> int conversions (the polynomial exp) may vectorise; nothing here
#: reads FP exception flags.
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-trapping-math", "-fno-math-errno"]


def cpu_flags() -> str:
    """The CPU's feature flags (Linux), part of the build key; '' where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def build_key(source: bytes) -> str:
    """Folder name of one build: everything the .so depends on (source, flags, torch, Python, CPU)."""
    h = hashlib.sha256(source)
    for part in (" ".join(CFLAGS), torch.__version__, sys.implementation.cache_tag, sysconfig.get_platform(),
                 cpu_flags()):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def _ninja_on_path() -> None:
    """torch's builder runs ``ninja`` from PATH; a venv's python run without activating the venv
    has the pip-installed one only next to itself (or in the ninja package)."""
    if shutil.which("ninja"):
        return
    candidates = [Path(sys.executable).parent]
    try:
        import ninja  # the PyPI wheel carrying the binary

        candidates.append(Path(ninja.BIN_DIR))
    except (ImportError, AttributeError):
        pass
    for d in candidates:
        if (d / "ninja").exists():
            os.environ["PATH"] = f"{d}{os.pathsep}{os.environ.get('PATH', '')}"
            return


def clear_stale_lock(build_dir: Path, now: float | None = None) -> bool:
    """Remove ``build_dir/lock`` when it is older than :data:`STALE_LOCK_SECONDS`; True if removed."""
    lock = build_dir / "lock"
    try:
        age = (time.time() if now is None else now) - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age <= STALE_LOCK_SECONDS:
        return False
    log.warning("removing a stale build lock %s (%.0f s old: a build was interrupted)", lock, age)
    lock.unlink(missing_ok=True)
    return True


def _build_and_load() -> None:
    from torch.utils.cpp_extension import load  # NOTE: imported here: it pulls in setuptools

    source = SOURCE.read_bytes()
    build_dir = cache_root() / "native" / build_key(source)
    build_dir.mkdir(parents=True, exist_ok=True)
    clear_stale_lock(build_dir)
    _ninja_on_path()
    load(name="sglc_cpu_ops", sources=[str(SOURCE)], build_directory=str(build_dir),
         extra_cflags=CFLAGS, is_python_module=False, verbose=False)


def load_cpu_ops() -> str | None:
    """Build (first time) and load the kernels; None when ``torch.ops.sglc_cpu`` is ready, else
    the reason it is not (logged once). Thread-safe; later calls return the first answer."""
    mode = os.environ.get(ENV, "").strip().lower()
    with _lock:
        if "error" not in _state:
            if mode in ("0", "off", "false", "no"):
                _state["error"] = f"disabled by {ENV}={os.environ[ENV]}"
            else:
                try:
                    _build_and_load()
                    _state["error"] = None
                except Exception as e:  # NOTE: any build failure means: run the eager fallbacks
                    detail = str(e).strip().splitlines()[-3:]  # NOTE: compiler output can run long
                    _state["error"] = f"could not build {SOURCE.name}: {type(e).__name__}: {' | '.join(detail)}"
                    log.warning("native CPU kernels unavailable, using eager torch ops (%s)", _state["error"])
        error = _state["error"]
    if mode == "require" and error is not None:
        raise NativeOpsError(error)
    return error
