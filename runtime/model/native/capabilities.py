"""Which instruction set the native kernels run at: the one place that decides.

The kernels come in variants, one per level (``kernels/``, built by ``build.py``), the way ggml
builds one CPU backend per instruction set and loads the best the CPU can run:

=================  ===============================================================================
level              needs (Linux ``/proc/cpuinfo`` flags)
=================  ===============================================================================
``avx512``         AVX512 F/BW/VL/DQ/CD + VNNI (x86-64-v4 with vpdpbusd: Ice Lake, Sapphire Rapids,
                   Zen 4 and later)
``avx2``           AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE (x86-64-v3: Haswell, Zen 1 and later)
``neon_dotprod``   aarch64 with the dot-product extension (Apple M1 and later, Graviton 2+, A76+)
``generic``        any CPU: portable C++ vectorised by the compiler for the baseline
=================  ===============================================================================

``SGLC_CPU_LEVEL=<level>`` forces a lower level than the CPU's best (an AVX512 machine runs and
tests the AVX2 path); naming a level the CPU cannot run is an error that lists the ones it can.
Forcing also turns off what the lower level would not have: a level below ``avx512`` counts as
a CPU without native bf16 (prefill policy, :func:`native_bf16`). torch's own kernels (oneDNN,
MKL, ATen) read their own variables, set before torch starts: :func:`torch_env_for` lists them.
"""
from __future__ import annotations

import functools
import logging
import os
import platform
from dataclasses import dataclass

log = logging.getLogger(__name__)

ENV = "SGLC_CPU_LEVEL"

#: Levels, best first, with the CPU flags each needs (as /proc/cpuinfo spells them).
X86_LEVELS: dict[str, frozenset[str]] = {
    "avx512": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_vnni",
                         "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe"}),
    "avx2": frozenset({"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe"}),
    "generic": frozenset(),
}
ARM_LEVELS: dict[str, frozenset[str]] = {
    "neon_dotprod": frozenset({"asimd", "asimddp"}),
    "generic": frozenset(),
}
ALL_LEVELS = ("avx512", "avx2", "neon_dotprod", "generic")

#: What torch's own CPU kernels would run on a machine of each level (oneDNN, MKL, ATen's vector
#: code): for benchmarks that emulate a smaller CPU on a bigger one. They are read when torch
#: starts, so they go in the environment of a new process.
_TORCH_ENV = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "generic": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}


class CpuLevelError(ValueError):
    """``SGLC_CPU_LEVEL`` names a level this CPU cannot run (or no level at all)."""


def machine() -> str:
    """'x86_64', 'aarch64' or what the platform says."""
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``); empty where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def levels_for(flags: frozenset[str], arch: str) -> tuple[str, ...]:
    """The levels a CPU with ``flags`` and architecture ``arch`` runs, best first."""
    table = X86_LEVELS if arch == "x86_64" else ARM_LEVELS if arch == "aarch64" else {"generic": frozenset()}
    return tuple(level for level, needs in table.items() if needs <= flags)


def supported_levels() -> tuple[str, ...]:
    """This machine's levels, best first (always ends with 'generic')."""
    return levels_for(cpu_flags(), machine())


def chosen_level(env: dict[str, str] | None = None) -> str:
    """The best level, or the one ``SGLC_CPU_LEVEL`` forces (:class:`CpuLevelError` if this CPU
    cannot run it)."""
    env = os.environ if env is None else env
    levels = supported_levels()
    forced = env.get(ENV, "").strip().lower()
    if not forced:
        return levels[0]
    if forced not in levels:
        known = "" if forced in ALL_LEVELS else f" (levels: {', '.join(ALL_LEVELS)})"
        raise CpuLevelError(f"{ENV}={forced}: this CPU ({machine()}) runs {', '.join(levels)}{known}")
    return forced


def native_bf16(level: str | None = None) -> bool:
    """Whether bf16 matmuls run natively (AVX512-BF16 / AMX in oneDNN) at ``level`` (default: the
    chosen one). A CPU without them (every AVX2-only CPU) runs a bf16 GEMM through a generic
    fallback ~5x slower than fp32, so no policy may rely on bf16 GEMMs there."""
    level = chosen_level() if level is None else level
    if level != "avx512":
        return False
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def torch_env_for(level: str) -> dict[str, str]:
    """Environment variables that make torch's own kernels behave as on a CPU of ``level``
    (empty for the machine's own best level)."""
    return dict(_TORCH_ENV.get(level, {}))


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """What the active kernel variant runs (from its table)."""

    level: str
    int_linear: str  # e.g. "avx2 (vpmaddubsw)"
    attention: str  # e.g. "avx2 registers" or "generic loop"
    half_linear: str  # what bf16 / float16 weights kept as shipped run on, e.g. "avx2 fma"

    @property
    def int_linears_native(self) -> bool:
        """Whether the integer linears beat torch's own kernels at decode row counts (not the
        scalar reference of the generic level)."""
        return self.level != "generic"
