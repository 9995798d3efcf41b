"""Rotary position embeddings (RoPE) and their scaling schemes: "linear", "llama3", "dynamic"
(NTK), "yarn" and "longrope" (Phi-3's, once called "su"), and partial rotary dimensions.

Numerics follow Hugging Face transformers (``modeling_rope_utils``, ``dynamic_rope_update`` and
``apply_rotary_pos_emb`` with ``rotate_half``), so logits match theirs on the same weights.

"dynamic" and "longrope" change the frequencies with the sequence length: transformers
recomputes them from ``max(position_ids) + 1`` at every forward, so in incremental decoding the
token at position p is rotated with the frequencies of length p + 1 (and the cached keys keep
theirs). A KV cache of rotated keys can only do that, so the tables here are per position:
position p uses the frequencies transformers uses when the sequence is p + 1 tokens long
(dynamic: the NTK base of length p + 1 past ``max_position_embeddings``; longrope: ``long_factor``
past ``original_max_position_embeddings``, else ``short_factor``). Any sequence that fits the
original window is rotated exactly as transformers rotates it, in one prefill or token by token;
a prompt longer than it is rotated as transformers' own generate loop would rotate its tokens one
at a time (transformers' single forward over such a prompt re-rotates the early tokens too).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ..rope_tables import longrope_attention_factor, yarn_parameters

#: rope types whose frequencies depend on the position (see the module docstring)
POSITION_DEPENDENT = ("dynamic", "longrope")


def _default_inv_freq(dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rope_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int,
    rotary_dim: int | None = None,
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies ``[rotary_dim // 2]`` (float32) and the cos/sin attention scaling, as
    transformers' ``ROPE_INIT_FUNCTIONS`` give them at init (for "dynamic" and "longrope": the
    frequencies of sequences within the original window)."""
    dim = rotary_dim or head_dim
    inv_freq = _default_inv_freq(dim, theta)
    if scaling is None or scaling.get("rope_type", "default") == "default":
        return inv_freq, 1.0
    rope_type = scaling["rope_type"]
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"]), 1.0
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, float(scaling["factor"]), scaling, max_position_embeddings), 1.0
    if rope_type == "dynamic":
        return _dynamic_inv_freq(dim, theta, float(scaling["factor"]), max_position_embeddings, None), 1.0
    if rope_type == "yarn":
        return _yarn(dim, theta, scaling, max_position_embeddings)
    if rope_type == "longrope":
        return _longrope(dim, theta, scaling, max_position_embeddings, long=False)
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


def _dynamic_inv_freq(dim: int, theta: float, factor: float, max_pos: int, seq_len: int | None) -> torch.Tensor:
    """NTK-aware scaling: the base grows with the sequence length past ``max_pos``. ``seq_len``
    None: init time (Python floats); an int: as transformers' forward computes it (from a 0-d
    int64 tensor, so in float32)."""
    if seq_len is None:
        base = theta * ((factor * max_pos / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    else:
        length = torch.maximum(torch.tensor(seq_len), torch.tensor(max_pos))
        base = theta * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _yarn(dim: int, theta: float, scaling: dict[str, Any], max_pos: int) -> tuple[torch.Tensor, float]:
    """YaRN: interpolate low frequencies, keep high ones, a linear ramp between; cos/sin scaled
    by the attention factor (0.1 ln(factor) + 1 unless given)."""
    factor, attention_factor, low, high = yarn_parameters(dim, theta, scaling, max_pos)
    pos_freqs = theta ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep, attention_factor


def _longrope(dim: int, theta: float, scaling: dict[str, Any], max_pos: int, long: bool) -> tuple[torch.Tensor, float]:
    """LongRoPE (Phi-3): per-frequency factors, ``long_factor`` for long sequences, else
    ``short_factor``; cos/sin scaled by sqrt(1 + ln(factor) / ln(original)) unless given."""
    attention_factor = longrope_attention_factor(scaling, max_pos)
    ext = torch.tensor(scaling["long_factor" if long else "short_factor"], dtype=torch.float32)
    if ext.numel() != dim // 2:
        raise ValueError(f"longrope {'long' if long else 'short'}_factor has {ext.numel()} entries, "
                         f"the rotary dimension {dim} needs {dim // 2}")
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (ext * theta**shape), attention_factor


class RotaryEmbedding:
    """cos/sin lookup by position, from float32 tables ``[positions, rotary_dim]`` grown on demand."""

    def __init__(
        self,
        head_dim: int,
        theta: float,
        scaling: dict[str, Any] | None,
        max_position_embeddings: int,
        device: torch.device | str = "cpu",
        rotary_dim: int | None = None,
    ) -> None:
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim or head_dim
        self.theta = theta
        self.scaling = scaling
        self.max_position_embeddings = max_position_embeddings
        inv_freq, self.attention_scaling = rope_inv_freq(head_dim, theta, scaling, max_position_embeddings,
                                                         self.rotary_dim)
        self.inv_freq = inv_freq.to(device)
        self.rope_type = scaling.get("rope_type", "default") if scaling else "default"
        # NOTE: positions from `switch` on use other frequencies (see the module docstring)
        self._switch: int | None = None
        self._long_inv_freq: torch.Tensor | None = None
        if self.rope_type == "longrope":
            self._switch = int(scaling["original_max_position_embeddings"])
            long_inv_freq, _ = _longrope(self.rotary_dim, theta, scaling, max_position_embeddings, long=True)
            self._long_inv_freq = long_inv_freq.to(device)
        elif self.rope_type == "dynamic":
            self._switch = max_position_embeddings
        self._cos = torch.empty(0, self.rotary_dim, device=device)
        self._sin = torch.empty(0, self.rotary_dim, device=device)
        self._grow(min(max_position_embeddings, 4096))

    def _freqs(self, start: int, stop: int) -> torch.Tensor:
        """``position * inv_freq`` for positions [start, stop): one product per entry, so equal to
        transformers' ``inv_freq @ positions`` bit for bit."""
        device = self.inv_freq.device
        switch = stop if self._switch is None else min(max(self._switch, start), stop)
        parts = []
        if switch > start:
            pos = torch.arange(start, switch, dtype=torch.float32, device=device)
            parts.append(pos[:, None] * self.inv_freq[None, :])
        if stop > switch and self._long_inv_freq is not None:
            pos = torch.arange(switch, stop, dtype=torch.float32, device=device)
            parts.append(pos[:, None] * self._long_inv_freq[None, :])
        elif stop > switch:  # dynamic: each position's own NTK base (sequence length p + 1)
            factor = float(self.scaling["factor"])
            rows = [torch.tensor([float(p)]) * _dynamic_inv_freq(
                self.rotary_dim, self.theta, factor, self.max_position_embeddings, p + 1)
                for p in range(switch, stop)]
            parts.append(torch.stack(rows).to(device))
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def _grow(self, n: int) -> None:
        have = self._cos.shape[0]
        if n <= have:
            return
        freqs = self._freqs(have, n)
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos = torch.cat([self._cos, emb.cos() * self.attention_scaling])
        self._sin = torch.cat([self._sin, emb.sin() * self.attention_scaling])

    def tables(self, max_position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 ``[positions, rotary_dim]`` cos and sin tables, covering ``max_position``."""
        need = max_position + 1
        if need > self._cos.shape[0]:
            self._grow(max(need, 2 * self._cos.shape[0]))
        return self._cos, self._sin

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype,
                max_position: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin_signed)`` of shape ``[T, 1, rotary_dim]`` for :func:`apply_rope`.

        ``sin_signed`` has its first half negated, so that ``rotate_half(x) * sin`` becomes
        ``x.flip-halves * sin_signed``. ``max_position``: the largest entry of ``positions`` when
        the caller knows it (on a GPU, reading it from the tensor would wait for the device).
        """
        if max_position is None:
            max_position = int(positions.max()) if positions.numel() else -1
        cos_table, sin_table = self.tables(max_position)
        cos = cos_table.index_select(0, positions).to(dtype)
        sin = sin_table.index_select(0, positions).to(dtype)
        half = self.rotary_dim // 2
        sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        return cos.unsqueeze(1), sin.unsqueeze(1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, heads, head_dim]``: ``x * cos + rotate_half(x) * sin`` (HF layout) on the
    first ``rotary_dim`` (= ``cos.shape[-1]``) features of each head; the rest pass through."""
    t, h, d = x.shape
    r = cos.shape[-1]
    if r < d:
        return torch.cat([apply_rope(x[..., :r], cos, sin_signed), x[..., r:]], dim=-1)
    swapped = x.reshape(t, h, 2, d // 2).flip(2).reshape(t, h, d)  # [x2, x1]
    return x * cos + swapped * sin_signed
