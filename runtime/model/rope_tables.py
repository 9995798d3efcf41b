"""RoPE cos / sin tables in numpy, for the torch-free model (``native_model.py``).

The same schemes as ``models/rope.py`` ("default", "linear", "llama3", "dynamic", "yarn",
"longrope", partial rotary dimensions) and the same per-position rule for the length-dependent
ones (position p rotates with the frequencies of a sequence p + 1 long; see that module's
docstring). That module computes with torch ops so that its tables equal transformers' bit for
bit; numpy's pow and cos may round a last bit otherwise, so these are tested against it to
within float32 rounding (tests/test_rope_tables.py) rather than being the same code.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

f32 = np.float32


def _exponents(dim: int) -> np.ndarray:
    """``arange(0, dim, 2) / dim`` in float32."""
    return np.arange(0, dim, 2, dtype=np.int64).astype(f32) / f32(dim)


def _default_inv_freq(dim: int, theta: float) -> np.ndarray:
    return (f32(1.0) / np.power(f32(theta), _exponents(dim))).astype(f32)


def _llama3(inv_freq: np.ndarray, scaling: dict[str, Any], max_pos: int) -> np.ndarray:
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old_ctx = int(scaling.get("original_max_position_embeddings") or max_pos)
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    wavelen = (f32(2 * math.pi) / inv_freq).astype(f32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / f32(factor), inv_freq).astype(f32)
    smooth = ((f32(old_ctx) / wavelen - f32(low)) / f32(high - low)).astype(f32)
    blended = ((f32(1) - smooth) * scaled / f32(factor) + smooth * scaled).astype(f32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, blended, scaled).astype(f32)


def _dynamic_inv_freq(dim: int, theta: float, factor: float, max_pos: int, seq_len: int | None) -> np.ndarray:
    length = max_pos if seq_len is None else max(seq_len, max_pos)
    base = theta * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return (f32(1.0) / np.power(f32(base), _exponents(dim))).astype(f32)


def yarn_parameters(dim: int, theta: float, scaling: dict[str, Any], max_pos: int) -> tuple[float, float, float, float]:
    """YaRN's scalars as transformers computes them (shared with ``models/rope.py``): the factor,
    the cos/sin attention factor (0.1 ln(factor) + 1 unless given) and the ramp's low / high
    dimensions."""
    original = int(scaling["original_max_position_embeddings"])
    factor = scaling.get("factor")
    factor = float(factor) if factor is not None else max_pos / original
    attention_factor = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")

    def get_mscale(scale: float, m: float = 1) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # NOTE: as transformers, against a zero-width ramp
    return factor, float(attention_factor), low, high


def longrope_attention_factor(scaling: dict[str, Any], max_pos: int) -> float:
    """LongRoPE's cos/sin scaling: sqrt(1 + ln(factor) / ln(original)) unless given (shared with
    ``models/rope.py``)."""
    original = int(scaling["original_max_position_embeddings"])
    factor = scaling.get("factor")
    factor = float(factor) if factor is not None else max_pos / original
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return float(attention_factor)


def _yarn(dim: int, theta: float, scaling: dict[str, Any], max_pos: int) -> tuple[np.ndarray, float]:
    factor, attention_factor, low, high = yarn_parameters(dim, theta, scaling, max_pos)
    pos_freqs = np.power(f32(theta), _exponents(dim)).astype(f32)
    extrapolation = (f32(1.0) / pos_freqs).astype(f32)
    interpolation = (f32(1.0) / (f32(factor) * pos_freqs)).astype(f32)
    ramp = np.clip((np.arange(dim // 2, dtype=f32) - f32(low)) / f32(high - low), 0, 1).astype(f32)
    keep = f32(1) - ramp
    return (interpolation * (f32(1) - keep) + extrapolation * keep).astype(f32), attention_factor


def _longrope(dim: int, theta: float, scaling: dict[str, Any], max_pos: int, long: bool) -> tuple[np.ndarray, float]:
    attention_factor = longrope_attention_factor(scaling, max_pos)
    ext = np.asarray(scaling["long_factor" if long else "short_factor"], dtype=f32)
    if ext.size != dim // 2:
        raise ValueError(f"longrope {'long' if long else 'short'}_factor has {ext.size} entries, "
                         f"the rotary dimension {dim} needs {dim // 2}")
    return (f32(1.0) / (ext * np.power(f32(theta), _exponents(dim)))).astype(f32), attention_factor


def rope_tables(head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position_embeddings: int,
                positions: int, rotary_dim: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """float32 cos and sin ``[positions, rotary_dim]`` (Hugging Face's halves layout), the
    attention scaling applied."""
    dim = rotary_dim or head_dim
    rope_type = scaling.get("rope_type", "default") if scaling else "default"
    inv_freq, attention = _default_inv_freq(dim, theta), 1.0
    switch, long_inv_freq = positions, None  # NOTE: positions from `switch` on use other frequencies
    if rope_type == "linear":
        inv_freq = (inv_freq / f32(scaling["factor"])).astype(f32)
    elif rope_type == "llama3":
        inv_freq = _llama3(inv_freq, scaling, max_position_embeddings)
    elif rope_type == "dynamic":
        inv_freq = _dynamic_inv_freq(dim, theta, float(scaling["factor"]), max_position_embeddings, None)
        switch = min(positions, max_position_embeddings)
    elif rope_type == "yarn":
        inv_freq, attention = _yarn(dim, theta, scaling, max_position_embeddings)
    elif rope_type == "longrope":
        inv_freq, attention = _longrope(dim, theta, scaling, max_position_embeddings, long=False)
        long_inv_freq, _ = _longrope(dim, theta, scaling, max_position_embeddings, long=True)
        switch = min(positions, int(scaling["original_max_position_embeddings"]))
    elif rope_type != "default":
        raise ValueError(f"unsupported rope scaling type {rope_type!r}")
    freqs = np.empty((positions, dim // 2), f32)
    freqs[:switch] = np.arange(switch, dtype=f32)[:, None] * inv_freq[None, :]
    if switch < positions and long_inv_freq is not None:
        freqs[switch:] = np.arange(switch, positions, dtype=f32)[:, None] * long_inv_freq[None, :]
    elif switch < positions:  # dynamic: each position's own NTK base (sequence length p + 1)
        factor = float(scaling["factor"])
        for p in range(switch, positions):
            freqs[p] = f32(p) * _dynamic_inv_freq(dim, theta, factor, max_position_embeddings, p + 1)
    emb = np.concatenate([freqs, freqs], axis=1)
    return (np.cos(emb) * f32(attention)).astype(f32), (np.sin(emb) * f32(attention)).astype(f32)
