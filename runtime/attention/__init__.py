"""Attention backends behind one interface (:class:`AttentionBackend`), picked by name.

CUDA backends (flashinfer, vllm-flash-attn, triton) register themselves here with
:func:`register_backend`; ``"torch"`` works everywhere.
"""
from __future__ import annotations

from typing import Callable

from .base import AttentionBackend
from .torch_backend import TorchAttentionBackend

BackendFactory = Callable[..., AttentionBackend]

_BACKENDS: dict[str, BackendFactory] = {"torch": TorchAttentionBackend}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Register ``factory(num_heads, num_kv_heads, head_dim, scale=None)`` under ``name``."""
    _BACKENDS[name] = factory


def available_backends() -> list[str]:
    """Names accepted by :func:`create_backend`."""
    return sorted(_BACKENDS)


def create_backend(
    name: str, num_heads: int, num_kv_heads: int, head_dim: int, scale: float | None = None
) -> AttentionBackend:
    """Instantiate the backend registered as ``name``."""
    try:
        factory = _BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown attention backend {name!r}; available: {available_backends()}"
        ) from None
    return factory(num_heads, num_kv_heads, head_dim, scale)


__all__ = [
    "AttentionBackend",
    "TorchAttentionBackend",
    "available_backends",
    "create_backend",
    "register_backend",
]
