"""Placement: which device the engine runs on and which attention backend it uses.

``"auto"`` picks the best available: a CUDA GPU with the triton backend when both exist (torch
attention on a GPU without triton), else the CPU with the torch backend. Explicit choices are
checked here, before any weights load, with errors that say what is missing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .attention import available_backends, unavailable_reason
from .model_config import ModelConfig

AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Placement:
    """The resolved device (``"cpu"``, ``"cuda"``, ``"cuda:1"``) and attention backend name."""

    device: str
    attention_backend: str
    why: str  # how it was picked, for the log line

    def describe(self) -> str:
        """One log line: ``device=cuda attention=triton (auto: ...)``."""
        return f"device={self.device} attention={self.attention_backend} ({self.why})"


def _cuda_name() -> str:
    try:
        return torch.cuda.get_device_name(0)
    except Exception:  # pragma: no cover - a broken driver still counts as a GPU being present
        return "CUDA GPU"


def resolve_placement(device: str = AUTO, attention_backend: str = AUTO) -> Placement:
    """Resolve ``"auto"`` values and check explicit ones (ValueError naming what is missing)."""
    has_cuda = torch.cuda.is_available()
    notes = []
    if device == AUTO:
        device = "cuda" if has_cuda else "cpu"
        notes.append(f"auto device: {_cuda_name()}" if has_cuda else "auto device: no CUDA GPU")
    else:
        if device.startswith("cuda") and not has_cuda:
            raise ValueError(f"device {device!r} was asked for, but torch sees no CUDA GPU "
                             f"(torch {torch.__version__}); use device 'cpu' or 'auto'")
        notes.append("device as asked")
    on_cuda = device.startswith("cuda")
    if attention_backend == AUTO:
        triton_reason = unavailable_reason("triton") if on_cuda else "not on a GPU"
        attention_backend = "triton" if triton_reason is None else "torch"
        notes.append("auto attention" + ("" if triton_reason is None else f": triton {triton_reason}"))
    else:
        if attention_backend not in available_backends():
            raise ValueError(f"unknown attention backend {attention_backend!r}; "
                             f"choose from {[AUTO, *available_backends()]}")
        reason = unavailable_reason(attention_backend)
        if reason is not None:
            raise ValueError(f"attention backend {attention_backend!r} is unavailable: {reason}")
        if attention_backend == "triton" and not on_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("attention backend 'triton' on the CPU runs only under Triton's interpreter "
                             "(TRITON_INTERPRET=1, for tests); use 'torch' on the CPU")
        notes.append("attention as asked")
    return Placement(device, attention_backend, "; ".join(notes))


def fit_attention_to_model(placement: Placement, asked_backend: str, config: ModelConfig) -> Placement:
    """An ``"auto"`` attention choice of triton falls back to torch where the model needs what the
    triton kernels do not implement (sliding windows: Mistral, Phi-3, Gemma 2/3; soft-capping:
    Gemma 2), so that "auto" runs every architecture. An explicit triton is left to refuse by name."""
    if asked_backend != AUTO or placement.attention_backend != "triton":
        return placement
    needs = []
    if any(config.layer_window(i) is not None for i in range(config.num_hidden_layers)):
        needs.append("sliding-window attention")
    if config.attn_logit_softcap is not None:
        needs.append("attention logit soft-capping")
    if not needs:
        return placement
    return Placement(placement.device, "torch",
                     f"{placement.why}; torch: the model needs {' and '.join(needs)}, which triton does not implement")
