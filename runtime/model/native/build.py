"""Build the native CPU kernels once per machine and load them as ``torch.ops.sglc_cpu``.

Two kinds of build, both cached under ``<cache root>/native/``:

- **the binding** (``binding/cpu_ops.cpp``): the torch operators (argument checks, the thread
  pool, dispatch), compiled with torch's extension builder (gcc + ninja, ~20 s on 2 cores) for
  the architecture's baseline, so one build loads on any CPU of that architecture;
- **the kernel variants** (``kernels/``): plain C++ with no torch, one shared library per level
  (``capabilities.py``), each compiled with its instruction set's flags (~5 s each). The binding
  loads a variant with ``sglc_cpu.load_kernels(path)`` and runs the one ``use_kernels(level)``
  picks. Only the levels this CPU can run are built (the chosen one at start, lower ones when
  asked: tests, ``SGLC_CPU_LEVEL``); :func:`compile_variant` also builds the others compile-only,
  so an AVX2 machine checks that the AVX512 sources compile and the reverse.

A folder's key hashes everything its library depends on (sources, flags, compiler, torch and
Python for the binding): an edited source or another toolchain builds anew, an unchanged one
loads in milliseconds. Concurrent builders (a fleet's workers starting together) wait on
torch's lock for the binding and race harmlessly on a variant (each writes a temporary file and
renames it into place).

Nothing here is required: without a compiler, or with ``SGLC_NATIVE_OPS=0``, :func:`load_cpu_ops`
says why and the model runs its eager fallbacks (``models/layer_ops.py``), the same math in
plain torch ops. ``SGLC_NATIVE_OPS=require`` turns a failed build into an error instead.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

from sglc.native_library import compiler, compiler_version

from ..cache_root import cache_root
from . import capabilities

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
BINDING = HERE / "binding" / "cpu_ops.cpp"
KERNELS = HERE / "kernels"
LIBRARY = "sglc_cpu"  # the torch.ops namespace the binding registers
ENV = "SGLC_NATIVE_OPS"  # "0": never build; "require": a failed build raises; else build when possible

#: torch's builder serialises builders with a ``lock`` file in the build folder and waits, without
#: end, while it exists; a builder killed mid-build (Ctrl-C on a first `sglc serve`) leaves it.
#: A build takes ~20 s, so a lock this old is stale.
STALE_LOCK_SECONDS = 300

#: The binding: -fopenmp for at::parallel_for's inline OpenMP region (without it the pragma is
#: dropped and the ops run on one thread; the symbols resolve to torch's own libgomp, so there is
#: still one thread pool). No -march: it must load on every CPU of the architecture.
BINDING_CFLAGS = ["-O3", "-fopenmp", "-fno-math-errno"]

#: Every variant: -fvisibility=hidden keeps each library's inline functions (compiled for its
#: instruction set) out of the others' way; -fopenmp-simd honours the loops' `omp simd` (float
#: sums reassociated) without an OpenMP runtime; -fno-trapping-math lets float -> int conversions
#: vectorise (nothing reads FP exception flags); -ffp-contract=off: a multiply and an add fuse only
#: where the source says fma, so the integer linears agree bit for bit at every level (GCC would
#: otherwise fuse where the instruction set has FMA and not where it has none); -fno-thread-jumps:
#: GCC threads exp_approx's clamp into a vectorised blend of both sides, whose dead side (x / (1 +
#: e^87)) makes denormals on every lane, each a microcode assist: silu_mul ran at 6.6 ns an
#: element with it and 0.7 ns without (AVX2, GCC 12).
VARIANT_CFLAGS = ["-std=c++17", "-O3", "-fPIC", "-shared", "-fvisibility=hidden", "-fvisibility-inlines-hidden",
                  "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-fno-thread-jumps"]

#: Per level: the macro table.cpp selects the kernels by, the architecture, the flags.
VARIANTS: dict[str, tuple[str, str, list[str]]] = {
    "avx512": ("SGLC_LEVEL_AVX512", "x86_64", ["-march=x86-64-v4", "-mavx512vnni", "-mtune=icelake-server"]),
    "avx2": ("SGLC_LEVEL_AVX2", "x86_64", ["-march=x86-64-v3", "-mtune=haswell"]),
    "neon_dotprod": ("SGLC_LEVEL_NEON_DOTPROD", "aarch64", ["-march=armv8.2-a+dotprod"]),
    "generic": ("SGLC_LEVEL_GENERIC", "", []),  # the compiler's baseline for the architecture
}

_lock = threading.Lock()
_state: dict[str, str | None] = {}  # "error" -> None once loaded, or why not
_loaded_levels: set[str] = set()


class NativeOpsError(RuntimeError):
    """``SGLC_NATIVE_OPS=require`` and the kernels could not be built or loaded."""


def _digest(parts: list[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def kernel_sources() -> list[Path]:
    """Every file a variant is compiled from (all of ``kernels/``: table.cpp includes by level)."""
    return sorted(p for p in KERNELS.rglob("*") if p.suffix in (".h", ".cpp"))


def binding_sources() -> list[Path]:
    """Every file the binding is compiled from (cpu_ops.cpp and the headers it includes)."""
    return sorted(p for p in BINDING.parent.iterdir() if p.suffix in (".h", ".cpp"))


def torch_version() -> str:
    """The installed torch's version, read from its package metadata: a process that only loads
    the built binding (models/native_model.py) never imports torch."""
    from importlib import metadata  # NOTE: here: its import is ~12 ms of a native start that never asks

    return metadata.version("torch")


def binding_key() -> str:
    """Folder name of the binding's build: its sources, the kernel ABI header, flags, torch, Python."""
    sources: list[bytes | str] = [p.read_bytes() for p in binding_sources()]
    return _digest([*sources, (KERNELS / "kernel_table.h").read_bytes(), " ".join(BINDING_CFLAGS),
                    torch_version(), sys.implementation.cache_tag, sysconfig.get_platform()])


def binding_folder() -> Path:
    """Where the binding of these sources is (or will be) built."""
    return cache_root() / "native" / f"binding-{binding_key()}"


BINDING_LIBRARY = "sglc_cpu_ops.so"  # the file torch's builder links in the folder


def variant_command(level: str, output: Path, cxx: str | None = None, compile_only: bool = False,
                    program: Path | None = None) -> list[str]:
    """The compiler command that builds ``level``'s variant into ``output``: a shared library, an
    object file (``compile_only``), or a static program whose ``main`` is in ``program`` (the
    tests' kernel driver, cross-compiled for another architecture)."""
    macro, _, flags = VARIANTS[level]
    cmd = [cxx or compiler(), *VARIANT_CFLAGS, f"-D{macro}", *flags, f"-I{KERNELS}"]
    sources = [str(KERNELS / "table.cpp")]
    if compile_only:
        cmd = [c for c in cmd if c != "-shared"] + ["-c"]
    elif program is not None:
        cmd = [c for c in cmd if c not in ("-shared", "-fPIC")] + ["-static"]
        sources.append(str(program))
    return [*cmd, *sources, "-o", str(output)]


def variant_key(level: str, cxx: str) -> str:
    """Folder name of a variant's build: the kernel sources, the level's flags, the compiler."""
    parts: list[bytes | str] = [p.relative_to(KERNELS).as_posix() for p in kernel_sources()]
    parts += [p.read_bytes() for p in kernel_sources()]
    parts += [" ".join(variant_command(level, Path("out"), cxx="c++")), compiler_version(cxx), sysconfig.get_platform()]
    return _digest(parts)


def compile_variant(level: str, output: Path, compile_only: bool = False, cxx: str | None = None,
                    program: Path | None = None) -> None:
    """Compile ``level``'s variant (any level, whatever this CPU runs: compiling needs no CPU
    feature) to ``output`` (see :func:`variant_command`); RuntimeError with the compiler's message
    if it fails."""
    cmd = variant_command(level, output, cxx=cxx, compile_only=compile_only, program=program)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        tail = " | ".join(out.stderr.strip().splitlines()[-6:])
        raise RuntimeError(f"compiling the {level} kernels failed ({' '.join(cmd[:3])} ...): {tail}")


def variant_library(level: str) -> Path:
    """The built library of ``level``'s variant (building it the first time)."""
    cxx = compiler()
    folder = cache_root() / "native" / f"kernels-{level}-{variant_key(level, cxx)}"
    lib = folder / f"sglc_kernels_{level}.so"
    if lib.exists():
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".so.tmp", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        started = time.perf_counter()
        compile_variant(level, partial, cxx=cxx)
        partial.replace(lib)  # NOTE: atomic: a concurrent builder's rename is as good as ours
        log.info("built the %s CPU kernels in %.1f s: %s", level, time.perf_counter() - started, lib)
    finally:
        partial.unlink(missing_ok=True)
    return lib


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


def load_built_binding(build_dir: Path) -> bool:
    """Load the binding ``build_dir`` holds, complete; False (nothing loaded) when there is none,
    a build holds its lock, or the library does not load (then it is removed for a rebuild).

    The folder is keyed by every source and flag (:func:`binding_key`) and torch's builder holds
    ``lock`` until its link is done, so a library there without one is this binding. Loading it
    directly skips importing cpp_extension (and setuptools) and running ninja: ~50 ms of a start."""
    import torch

    built = build_dir / BINDING_LIBRARY
    if not built.exists() or (build_dir / "lock").exists():
        return False
    try:
        torch.ops.load_library(str(built))
    except OSError as err:  # NOTE: left broken (a disk that filled mid-link, say): build it again
        log.warning("the built binding %s does not load (%s); rebuilding it", built, err)
        built.unlink(missing_ok=True)
        return False
    return True


def _build_binding() -> None:
    build_dir = binding_folder()
    if load_built_binding(build_dir):
        return
    from torch.utils.cpp_extension import load  # NOTE: imported here: it pulls in setuptools

    build_dir.mkdir(parents=True, exist_ok=True)
    clear_stale_lock(build_dir)
    _ninja_on_path()
    load(name="sglc_cpu_ops", sources=[str(BINDING)], build_directory=str(build_dir), extra_cflags=BINDING_CFLAGS,
         extra_ldflags=["-ldl"], is_python_module=False, verbose=False)


def _load_variant(level: str) -> None:
    """Build (first time) and register ``level``'s variant with the binding. Caller holds _lock."""
    import torch

    if level not in _loaded_levels:
        name = torch.ops.sglc_cpu.load_kernels(str(variant_library(level)))
        assert name == level, f"the {level} library reports level {name!r}"
        _loaded_levels.add(level)


def _torch_ops():
    """``torch.ops.sglc_cpu`` (torch imported here: the module is loaded by torch-free processes too)."""
    import torch

    return torch.ops.sglc_cpu


def disabled_reason() -> str | None:
    """Why the native kernels are off by the environment (``SGLC_NATIVE_OPS=0``), or None."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return f"disabled by {ENV}={os.environ[ENV]}"
    return None


def load_cpu_ops() -> str | None:
    """Build (first time) and load the binding and the kernels of the chosen level
    (:func:`capabilities.chosen_level`); None when ``torch.ops.sglc_cpu`` is ready, else the
    reason it is not (logged once). Thread-safe; later calls return the first answer."""
    mode = os.environ.get(ENV, "").strip().lower()
    with _lock:
        if "error" not in _state:
            if disabled_reason() is not None:
                _state["error"] = disabled_reason()
            else:
                try:
                    level = capabilities.chosen_level()  # NOTE: a bad SGLC_CPU_LEVEL fails the same way
                    _build_binding()
                    _load_variant(level)
                    _torch_ops().use_kernels(level)
                    _state["error"] = None
                except Exception as e:  # NOTE: any build failure means: run the eager fallbacks
                    detail = str(e).strip().splitlines()[-3:]  # NOTE: compiler output can run long
                    _state["error"] = f"could not build the native kernels: {type(e).__name__}: {' | '.join(detail)}"
                    log.warning("native CPU kernels unavailable, using eager torch ops (%s)", _state["error"])
        error = _state["error"]
    if mode == "require" and error is not None:
        raise NativeOpsError(error)
    return error


def active_level() -> str:
    """The level the loaded kernels run at (after :func:`load_cpu_ops` succeeded)."""
    return str(_torch_ops().kernel_info()[0])


def kernel_info() -> capabilities.KernelInfo:
    """What the active variant runs (after :func:`load_cpu_ops` succeeded)."""
    return capabilities.KernelInfo(*map(str, _torch_ops().kernel_info()))


def current_level() -> str:
    """The level in force: the active variant's where the kernels are loaded, else the one they
    would run at (the generic level if SGLC_CPU_LEVEL is unusable: the kernels did not load)."""
    if load_cpu_ops() is None:
        return active_level()
    try:
        return capabilities.chosen_level()
    except capabilities.CpuLevelError:
        return "generic"


def bf16_is_native() -> bool:
    """Whether bf16 matmuls run natively at the level in force (:func:`capabilities.native_bf16`)."""
    return capabilities.native_bf16(current_level())


def use_level(level: str) -> None:
    """Make ``level`` (one this CPU runs) the active variant, building it if needed. For tests and
    A/B runs in one process: a model decides its kernels when it is built, so switch before."""
    if load_cpu_ops() is not None:
        raise NativeOpsError(f"the native kernels are not loaded: {load_cpu_ops()}")
    if level not in capabilities.supported_levels():
        raise capabilities.CpuLevelError(f"this CPU runs {', '.join(capabilities.supported_levels())}, not {level}")
    with _lock:
        _load_variant(level)
        _torch_ops().use_kernels(level)


@contextlib.contextmanager
def running_level(level: str) -> Iterator[None]:
    """``use_level(level)`` for the body, then the previous level again."""
    previous = active_level() if load_cpu_ops() is None else None
    use_level(level)
    try:
        yield
    finally:
        if previous is not None:
            use_level(previous)
