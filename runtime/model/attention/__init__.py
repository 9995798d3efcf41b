"""Attention backends behind one interface (:class:`AttentionBackend`), picked by name.

``"torch"`` works everywhere. ``"triton"`` needs the triton package (a CUDA GPU, or Triton's
interpreter on CPU for tests); ``"flashinfer"`` is registered so that asking for it says why it
cannot run here. A backend whose package is missing is still listed: :func:`unavailable_reason`
says why, and :func:`create_backend` raises :class:`BackendUnavailable` with that reason.
Heavy imports (triton) happen only when such a backend is created.
"""
from __future__ import annotations

import importlib.util
from typing import Callable

from .base import AttentionBackend
from .torch_backend import TorchAttentionBackend

BackendFactory = Callable[..., AttentionBackend]
#: returns None when the backend can be created here, else the reason it cannot
AvailabilityProbe = Callable[[], "str | None"]


class BackendUnavailable(RuntimeError):
    """A registered attention backend cannot run here (its package or device is missing)."""


def _triton_factory(num_heads: int, num_kv_heads: int, head_dim: int, scale: float | None = None):
    from .triton_backend import TritonAttentionBackend  # NOTE: imports triton only now

    return TritonAttentionBackend(num_heads, num_kv_heads, head_dim, scale)


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or blocked installation counts as absent
        return False


def _triton_probe() -> str | None:
    if not _installed("triton"):
        return "triton is not installed (pip install 'sglc[triton]')"
    return None


def _flashinfer_probe() -> str | None:
    if not _installed("flashinfer"):
        return "flashinfer is not installed"
    # NOTE: its calls are not wired up: no machine that ran this project's tests had it.
    return "flashinfer is installed, but sglc's flashinfer backend is not implemented yet"


def _flashinfer_factory(*args, **kwargs) -> AttentionBackend:
    raise BackendUnavailable(f"attention backend 'flashinfer' is unavailable: {_flashinfer_probe()}")


_BACKENDS: dict[str, BackendFactory] = {
    "torch": TorchAttentionBackend,
    "triton": _triton_factory,
    "flashinfer": _flashinfer_factory,
}
_PROBES: dict[str, AvailabilityProbe] = {"triton": _triton_probe, "flashinfer": _flashinfer_probe}


def register_backend(name: str, factory: BackendFactory, probe: AvailabilityProbe | None = None) -> None:
    """Register ``factory(num_heads, num_kv_heads, head_dim, scale=None)`` under ``name``;
    ``probe()`` (optional) returns None when it can run here, else the reason it cannot."""
    _BACKENDS[name] = factory
    if probe is not None:
        _PROBES[name] = probe
    else:
        _PROBES.pop(name, None)


def available_backends() -> list[str]:
    """Names accepted by :func:`create_backend` (including ones unavailable on this machine)."""
    return sorted(_BACKENDS)


def unavailable_reason(name: str) -> str | None:
    """None when backend ``name`` can be created here, else why not (ValueError if unknown)."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; available: {available_backends()}")
    probe = _PROBES.get(name)
    return probe() if probe is not None else None


def create_backend(
    name: str, num_heads: int, num_kv_heads: int, head_dim: int, scale: float | None = None
) -> AttentionBackend:
    """Instantiate the backend registered as ``name``; :class:`BackendUnavailable` if it cannot run here."""
    reason = unavailable_reason(name)
    if reason is not None:
        raise BackendUnavailable(f"attention backend {name!r} is unavailable: {reason}")
    return _BACKENDS[name](num_heads, num_kv_heads, head_dim, scale)


__all__ = [
    "AttentionBackend",
    "BackendUnavailable",
    "TorchAttentionBackend",
    "available_backends",
    "create_backend",
    "register_backend",
    "unavailable_reason",
]
