"""The attention backend interface every implementation (torch CPU, flashinfer, ...) follows."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import torch

from ...cache.kv_buffer import KVBuffer
from ..forward_batch import ForwardBatch


class AttentionBackend(ABC):
    """Paged attention over a :class:`KVBuffer` (page = one token slot).

    Protocol, per model forward:
      1. ``prepare(batch)`` once, before the first layer: precompute whatever index tensors and
         masks the batch needs. It may keep them on ``self`` until the next ``prepare``.
      2. ``forward(layer_id, q, k, v, kv_buffer)`` once per layer.

    Guarantees of ``forward``:
      * writes the new ``k``/``v`` rows into ``kv_buffer.k[layer_id]``/``v[layer_id]`` at
        ``batch.out_cache_loc`` and changes no other slot;
      * new token ``i`` of a request attends to that request's prefix and its new tokens
        ``0..i`` (causal), reading keys/values through ``batch.kv_indices``; requests never see
        each other's slots.

    NOTE: a backend instance holds per-batch state between ``prepare`` and the last ``forward``,
    so one instance serves one model runner (one thread) at a time.
    """

    #: registry name, e.g. "torch"
    name: str = "base"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float | None = None):
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale if scale is not None else head_dim**-0.5

    def set_layer_options(self, windows: Sequence[int | None], softcap: float | None = None) -> None:
        """Per-layer sliding windows (``windows[layer]``: a query at position p sees keys p - window
        + 1 .. p; None = all of them) and attention-logit soft-capping (scores become ``softcap *
        tanh(score / softcap)`` before the softmax; Gemma 2). Called once, before the first batch.
        A backend that cannot run them refuses here, naming what the model asked for; the base
        class accepts only the plain case."""
        refused = []
        windowed = [i for i, w in enumerate(windows) if w is not None]
        if windowed:
            sizes = sorted({windows[i] for i in windowed})
            refused.append(f"sliding-window attention (window {', '.join(map(str, sizes))} on "
                           f"{len(windowed)} of {len(windows)} layers)")
        if softcap is not None:
            refused.append(f"attention logit soft-capping ({softcap})")
        if refused:
            raise ValueError(f"attention backend {self.name!r} does not implement "
                                      f"{' or '.join(refused)}; use attention backend 'torch'")

    def describe_decode(self) -> str:
        """Which kernel serves decode steps (the model's log line)."""
        return self.name

    @abstractmethod
    def prepare(self, batch: ForwardBatch) -> None:
        """Precompute per-batch metadata; called once per model forward."""

    @abstractmethod
    def forward(
        self,
        layer_id: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_buffer: KVBuffer,
    ) -> torch.Tensor:
        """Store k/v, then attend.

        Args:
            q: ``[T, num_heads, head_dim]`` (RoPE already applied).
            k, v: ``[T, num_kv_heads, head_dim]`` of the new tokens.
        Returns:
            ``[T, num_heads * head_dim]`` attention output, same dtype as ``q``.
        """
