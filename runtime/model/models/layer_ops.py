"""The small ops between a decoder layer's matmuls and attention, in two implementations.

:class:`EagerLayerOps` is plain torch (any device, any dtype). :class:`NativeLayerOps` runs the
fused CPU kernels of ``native/`` (at the CPU's instruction-set level): one call instead of
~5-10 ATen ops each, computing in float32 and rounding once to the activation dtype (eager bf16 rounds after every op, so the
two agree to about one bf16 ulp; in float32 to float rounding). Measured on SmolLM2-135M int4,
one decode stream, 2 cores: see docs/benchmarks.md.

Both expose the same operations; the model calls them through whichever :func:`layer_ops_for`
picked, once, at construction.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..native import load_cpu_ops
from .rope import RotaryEmbedding, apply_rope

#: Activation dtypes the native kernels are compiled for.
NATIVE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _norm_heads(rms_norm, qkv: torch.Tensor, q_heads: int, kv_heads: int, head_dim: int, q_norm: torch.Tensor,
                k_norm: torch.Tensor, eps: float) -> None:
    """``qkv``'s q and k heads normalized in place with ``rms_norm`` over each head's features."""
    t, q_size, kv_size = qkv.shape[0], q_heads * head_dim, kv_heads * head_dim
    q, k = qkv[:, :q_size], qkv[:, q_size:q_size + kv_size]
    q.copy_(rms_norm(q.reshape(t * q_heads, head_dim), q_norm, eps).view(t, q_size))
    k.copy_(rms_norm(k.reshape(t * kv_heads, head_dim), k_norm, eps).view(t, kv_size))


class EagerLayerOps:
    """Reference implementation on ATen ops."""

    name = "eager"

    @staticmethod
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm, statistics in float32 (NOTE: bf16 rounds once after scaling by ``weight``; HF
        rounds before and after, so bf16 outputs may differ from HF's by an ulp)."""
        return F.rms_norm(x, weight.shape, weight, eps)

    @classmethod
    def add_rms_norm(cls, h: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual stream after adding ``delta``, and its RMSNorm."""
        h = h + delta
        return h, cls.rms_norm(h, weight, eps)

    @staticmethod
    def rope_inputs(rope: RotaryEmbedding, positions: torch.Tensor, dtype: torch.dtype,
                    max_position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-step inputs of :meth:`rope`: cos/sin gathered at ``positions``."""
        return rope.cos_sin(positions, dtype, max_position)

    @staticmethod
    def rope(x: torch.Tensor, inputs: tuple[torch.Tensor, torch.Tensor], num_heads: int,
             head_dim: int) -> torch.Tensor:
        """The first ``num_heads`` heads of ``x [T, >= num_heads * head_dim]`` rotated, as
        ``[T, num_heads, head_dim]`` (a new tensor); with partial rotary (tables narrower than
        ``head_dim``) only each head's leading features rotate."""
        cos, sin = inputs
        return apply_rope(x[:, : num_heads * head_dim].view(x.shape[0], num_heads, head_dim), cos, sin)

    @classmethod
    def head_norm(cls, qkv: torch.Tensor, q_heads: int, kv_heads: int, head_dim: int, q_norm: torch.Tensor,
                  k_norm: torch.Tensor, eps: float) -> None:
        """Each q head of ``qkv`` RMS-normalized with ``q_norm`` and each k head with ``k_norm``, IN
        PLACE (Qwen3 / Gemma 3)."""
        _norm_heads(cls.rms_norm, qkv, q_heads, kv_heads, head_dim, q_norm, k_norm, eps)

    @classmethod
    def head_norm_rope(cls, qkv: torch.Tensor, inputs: tuple[torch.Tensor, torch.Tensor], q_heads: int,
                       kv_heads: int, head_dim: int, q_norm: torch.Tensor, k_norm: torch.Tensor,
                       eps: float) -> torch.Tensor:
        """:meth:`head_norm`, then q and k rotated: :meth:`rope`'s ``[T, q_heads + kv_heads, head_dim]``."""
        cls.head_norm(qkv, q_heads, kv_heads, head_dim, q_norm, k_norm, eps)
        return cls.rope(qkv, inputs, q_heads + kv_heads, head_dim)

    @staticmethod
    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` of ``[T, 2 * I]`` (gate first)."""
        inter = gate_up.shape[1] // 2
        return F.silu(gate_up[:, :inter]) * gate_up[:, inter:]

    @staticmethod
    def gelu_tanh_mul(gate_up: torch.Tensor) -> torch.Tensor:
        """``gelu_tanh(gate) * up`` of ``[T, 2 * I]`` (gate first): GeGLU with the tanh
        approximation of GELU (transformers' ``gelu_pytorch_tanh``)."""
        inter = gate_up.shape[1] // 2
        return F.gelu(gate_up[:, :inter], approximate="tanh") * gate_up[:, inter:]


class NativeLayerOps:
    """The same operations on ``torch.ops.sglc_cpu`` (CPU tensors only)."""

    name = "native"

    def __init__(self) -> None:
        ops = torch.ops.sglc_cpu
        self.rms_norm = ops.rms_norm
        self.silu_mul = ops.silu_mul
        self.gelu_tanh_mul = ops.gelu_tanh_mul
        self._add_rms_norm = ops.add_rms_norm_
        self._rope = ops.rope_
        self._head_norm_rope = ops.head_norm_rope_

    def add_rms_norm(self, h: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Adds ``delta`` into ``h`` IN PLACE (``h`` must be the model's own residual buffer)."""
        return h, self._add_rms_norm(h, delta, weight, eps)

    @staticmethod
    def rope_inputs(rope: RotaryEmbedding, positions: torch.Tensor, dtype: torch.dtype,
                    max_position: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Positions and the float32 tables, grown to cover ``max_position``."""
        cos, sin = rope.tables(max_position)
        return positions, cos, sin

    def rope(self, x: torch.Tensor, inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
             num_heads: int, head_dim: int) -> torch.Tensor:
        """Rotates IN PLACE and returns the ``[T, num_heads, head_dim]`` view of ``x`` (with partial
        rotary, tables narrower than ``head_dim``, each head's leading features: Phi-4-mini)."""
        positions, cos, sin = inputs
        if cos.shape[1] != head_dim:
            self._rope(x, positions, cos, sin, num_heads, head_dim)
        else:
            self._rope(x, positions, cos, sin, num_heads)
        return x[:, : num_heads * head_dim].view(x.shape[0], num_heads, head_dim)

    def head_norm(self, qkv: torch.Tensor, q_heads: int, kv_heads: int, head_dim: int, q_norm: torch.Tensor,
                  k_norm: torch.Tensor, eps: float) -> None:
        """The eager op's per-head norms on the native ``rms_norm`` (with ``clip_qkv``, which goes
        between the norms and the rotation)."""
        _norm_heads(self.rms_norm, qkv, q_heads, kv_heads, head_dim, q_norm, k_norm, eps)

    def head_norm_rope(self, qkv: torch.Tensor, inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor], q_heads: int,
                       kv_heads: int, head_dim: int, q_norm: torch.Tensor, k_norm: torch.Tensor,
                       eps: float) -> torch.Tensor:
        """The eager op's norms and rotation in one native call, in place (see ``head_norm_rope_``)."""
        positions, cos, sin = inputs
        self._head_norm_rope(qkv, positions, cos, sin, q_norm, k_norm, q_heads, kv_heads, head_dim, eps)
        return qkv[:, : (q_heads + kv_heads) * head_dim].view(qkv.shape[0], q_heads + kv_heads, head_dim)


LayerOps = EagerLayerOps | NativeLayerOps


def layer_ops_for(device: torch.device, dtype: torch.dtype, native: bool | None = None) -> LayerOps:
    """``native``: None = the fused kernels when the device is a CPU, the dtype one they are built
    for and they build (``native/build.py``); True = those or a ValueError saying why not;
    False = eager."""
    if native is False:
        return EagerLayerOps()
    why = None
    if device.type != "cpu":
        why = f"the native kernels run on CPU only (device {device})"
    elif dtype not in NATIVE_DTYPES:
        why = f"the native kernels are not built for {dtype}"
    else:
        why = load_cpu_ops()
    if why is None:
        return NativeLayerOps()
    if native:
        raise ValueError(f"native layer ops requested but unavailable: {why}")
    return EagerLayerOps()
