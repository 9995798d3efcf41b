"""Rotary position embeddings (RoPE), including the "linear" and "llama3" scaling schemes.

Numerics follow Hugging Face transformers (``modeling_rope_utils`` and ``apply_rotary_pos_emb``
with ``rotate_half``), so logits match theirs on the same weights.
"""
from __future__ import annotations

import math
from typing import Any

import torch


def rope_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies ``[head_dim // 2]`` (float32) and the cos/sin attention scaling."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None or scaling.get("rope_type", "default") == "default":
        return inv_freq, 1.0
    rope_type = scaling["rope_type"]
    factor = float(scaling["factor"])
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, factor, scaling, max_position_embeddings), 1.0
    raise ValueError(f"unsupported rope scaling type {rope_type!r}")


def _llama3_inv_freq(
    inv_freq: torch.Tensor, factor: float, scaling: dict[str, Any], max_position_embeddings: int
) -> torch.Tensor:
    """Llama 3.1: long wavelengths divided by ``factor``, short ones kept, a smooth blend between."""
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old_ctx = int(scaling.get("original_max_position_embeddings") or max_position_embeddings)
    low_freq_wavelen = old_ctx / low
    high_freq_wavelen = old_ctx / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


class RotaryEmbedding:
    """cos/sin lookup by position, from a float32 table grown on demand."""

    def __init__(
        self,
        head_dim: int,
        theta: float,
        scaling: dict[str, Any] | None,
        max_position_embeddings: int,
        device: torch.device | str = "cpu",
    ) -> None:
        self.head_dim = head_dim
        inv_freq, self.attention_scaling = rope_inv_freq(head_dim, theta, scaling, max_position_embeddings)
        self.inv_freq = inv_freq.to(device)
        self._cos = torch.empty(0, head_dim, device=device)
        self._sin = torch.empty(0, head_dim, device=device)
        self._grow(min(max_position_embeddings, 4096))

    def _grow(self, n: int) -> None:
        pos = torch.arange(n, dtype=torch.float32, device=self.inv_freq.device)
        # NOTE: one product per entry, so equal to HF's inv_freq @ positions bit for bit.
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos = emb.cos() * self.attention_scaling
        self._sin = emb.sin() * self.attention_scaling

    def tables(self, max_position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 ``[positions, head_dim]`` cos and sin tables, covering ``max_position``."""
        need = max_position + 1
        if need > self._cos.shape[0]:
            self._grow(max(need, 2 * self._cos.shape[0]))
        return self._cos, self._sin

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype,
                max_position: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin_signed)`` of shape ``[T, 1, head_dim]`` for :func:`apply_rope`.

        ``sin_signed`` has its first half negated, so that ``rotate_half(x) * sin`` becomes
        ``x.flip-halves * sin_signed``. ``max_position``: the largest entry of ``positions`` when
        the caller knows it (on a GPU, reading it from the tensor would wait for the device).
        """
        if max_position is None:
            max_position = int(positions.max()) if positions.numel() else -1
        cos_table, sin_table = self.tables(max_position)
        cos = cos_table.index_select(0, positions).to(dtype)
        sin = sin_table.index_select(0, positions).to(dtype)
        half = self.head_dim // 2
        sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        return cos.unsqueeze(1), sin.unsqueeze(1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, heads, head_dim]``: ``x * cos + rotate_half(x) * sin`` (HF layout)."""
    t, h, d = x.shape
    swapped = x.reshape(t, h, 2, d // 2).flip(2).reshape(t, h, d)  # [x2, x1]
    return x * cos + swapped * sin_signed
