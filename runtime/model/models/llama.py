"""Llama-family causal LM (Llama, SmolLM2, Mistral, Qwen2) over a paged KV buffer.

Our own implementation: RMSNorm, RoPE, grouped-query attention through an
:class:`AttentionBackend`, SwiGLU MLP, optionally tied embeddings. Weights are fused at load
time (q/k/v into one matrix, gate/up into one) so that a layer is a handful of large ops and
little Python. Numerics follow Hugging Face transformers' LlamaForCausalLM.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ...cache.kv_buffer import KVBuffer
from ..attention import AttentionBackend, TorchAttentionBackend, create_backend
from ..forward_batch import ForwardBatch
from ..model_config import ModelConfig, parse_dtype
from ..native import bf16_is_native, kernel_info, load_cpu_ops
from ..native.capabilities import ENV as CPU_LEVEL_ENV
from ..native.capabilities import supported_levels
from ..weights import check_state_dict, load_state_dict
from .layer_ops import layer_ops_for
from .linear import Linear, can_pack_weights
from .quantized_linear import (QUANTIZATIONS, CastLinear, QuantizationError, QuantizedLinear, RowDispatchLinear,
                               describe_linear, large_batch_dtype, quantized_linear)
from .rope import RotaryEmbedding

log = logging.getLogger(__name__)

AnyLinear = Linear | RowDispatchLinear | QuantizedLinear


@dataclass(slots=True)
class _Layer:
    """One decoder layer's (fused) weights."""

    input_norm: torch.Tensor
    qkv: AnyLinear  # [q_size + 2 * kv_size, hidden]
    o: AnyLinear  # [hidden, q_size]
    post_norm: torch.Tensor
    gate_up: AnyLinear  # [2 * intermediate, hidden]
    down: AnyLinear  # [hidden, intermediate]


class LlamaForCausalLM:
    """Causal LM whose ``forward(batch, kv_buffer)`` returns float32 logits.

    Construct with :meth:`from_pretrained` (a safetensors folder) or with a config and then
    :meth:`load_state_dict`. Inference only; ``forward`` runs under ``torch.inference_mode``.
    """

    def __init__(
        self,
        config: ModelConfig,
        dtype: torch.dtype | str | None = None,
        device: torch.device | str = "cpu",
        attention: AttentionBackend | str = "torch",
        pack_weights: bool | None = None,
        quantization: str = "none",
        native_ops: bool | None = None,
    ) -> None:
        """``quantization``: 'int4' or 'int8' runs the decoder layers' linears on packed integers
        below the row count where their kernel stops paying (``large_batch_rows``; the lm_head in
        int8 in both, as GGUF's Q4 files keep the tied embedding at Q8_0) and on a bf16 copy from
        there on (prefill, big decode batches; see :mod:`.quantized_linear`); it computes in
        bfloat16 (the default dtype then; another one is an error). ``pack_weights``: pre-pack
        linear weights for oneDNN; None = when :func:`can_pack_weights`. bf16/fp16: ~1.5x faster
        matmuls than ``F.linear``. fp32: keeps the plain weights too and uses the packed ones from
        4 rows on (batched decode, prefill), ~2x faster there, at twice the weight memory (see
        :mod:`.linear`). ``native_ops``: the small per-layer ops (norms, RoPE, residual adds,
        SiLU) on fused CPU kernels; None = when they build, True = required, False = eager torch
        ops (see :mod:`.layer_ops`)."""
        self.config = config
        if quantization not in QUANTIZATIONS:
            raise QuantizationError(f"unknown weight quantization {quantization!r}; expected one of {QUANTIZATIONS}")
        self.quantization = quantization
        if quantization != "none":
            if dtype is not None and parse_dtype(dtype) != torch.bfloat16:
                raise QuantizationError(f"quantization {quantization!r} computes in bfloat16; dtype "
                                        f"{parse_dtype(dtype)} cannot be combined with it")
            dtype = torch.bfloat16
            if torch.device(device).type != "cpu":
                raise QuantizationError(f"quantization {quantization!r} runs on CPU only (device {device})")
        self.dtype = parse_dtype(dtype) if dtype is not None else config.torch_dtype
        self.device = torch.device(device)
        if pack_weights is None:
            pack_weights = can_pack_weights(self.dtype, self.device)
        elif pack_weights and not can_pack_weights(self.dtype, self.device):
            raise ValueError(f"pack_weights=True needs CPU oneDNN support for {self.dtype} ({self.device})")
        self.pack_weights = pack_weights
        self.ops = layer_ops_for(self.device, self.dtype, native_ops)
        self.native_ops = native_ops
        c = config
        self.attn = (
            attention
            if isinstance(attention, AttentionBackend)
            else create_backend(attention, c.num_attention_heads, c.num_key_value_heads, c.head_dim)
        )
        if native_ops is False and isinstance(self.attn, TorchAttentionBackend):
            self.attn.native = False  # NOTE: eager means eager everywhere (A/B runs, debugging)
        self.rope = RotaryEmbedding(
            c.head_dim, c.rope_theta, c.rope_scaling, c.max_position_embeddings, self.device
        )
        self.embed: torch.Tensor | None = None
        self.lm_head: AnyLinear | None = None
        self.final_norm: torch.Tensor | None = None
        self.layers: list[_Layer] = []

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        dtype: torch.dtype | str | None = None,
        device: torch.device | str = "cpu",
        attention: AttentionBackend | str = "torch",
        pack_weights: bool | None = None,
        quantization: str = "none",
        native_ops: bool | None = None,
    ) -> "LlamaForCausalLM":
        """Load config.json and the safetensors weights of a Hugging Face model folder."""
        config = ModelConfig.from_pretrained(path)
        model = cls(config, dtype=dtype, device=device, attention=attention, pack_weights=pack_weights,
                    quantization=quantization, native_ops=native_ops)
        model.load_state_dict(load_state_dict(path), source=str(path))
        return model

    def load_state_dict(self, tensors: dict[str, torch.Tensor], source: str = "") -> None:
        """Take Hugging Face-named tensors; checks names and shapes first (:class:`WeightError`)."""
        c = self.config
        check_state_dict(tensors, c, source)

        quantized = self.quantization != "none"

        def get(name: str) -> torch.Tensor:
            return tensors[name].to(device=self.device, dtype=self.dtype).contiguous()

        def weight(name: str) -> torch.Tensor:
            # NOTE: a linear weight to be quantized stays in its checkpoint precision until then
            return tensors[name].to(device=self.device).contiguous() if quantized else get(name)

        def cat(*names: str) -> torch.Tensor:
            return torch.cat([weight(n) for n in names]).contiguous()

        bf16_native = bf16_is_native()

        def linear(weight: torch.Tensor, bias: torch.Tensor | None = None, kind: str | None = None) -> AnyLinear:
            if quantized:  # NOTE: integer kernels for small batches, a float copy for big ones where it pays
                small = quantized_linear(kind or self.quantization, weight, bias,
                                         native=False if self.native_ops is False else None)
                large_dtype = large_batch_dtype(small, bf16_native)
                if large_dtype is None:
                    return small
                large = Linear.build(weight.to(large_dtype).contiguous(),
                                     None if bias is None else bias.to(large_dtype),
                                     pack=self.pack_weights and can_pack_weights(large_dtype, self.device))
                return RowDispatchLinear(small, large if large_dtype == self.dtype else CastLinear(large))
            return Linear.build(weight, bias, pack=self.pack_weights)

        self.embed = get("model.embed_tokens.weight")
        tied = c.tie_word_embeddings and not quantized  # NOTE: reuse the embedding; a quantized head needs its source
        head = self.embed if tied else weight("model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight")
        self.lm_head = linear(head, kind="int8")
        self.final_norm = get("model.norm.weight")
        self.layers = []
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            self.layers.append(
                _Layer(
                    input_norm=get(p + "input_layernorm.weight"),
                    qkv=linear(
                        cat(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                        cat(a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias") if c.qkv_bias else None,
                    ),
                    o=linear(weight(a + "o_proj.weight"), get(a + "o_proj.bias") if c.o_bias else None),
                    post_norm=get(p + "post_attention_layernorm.weight"),
                    gate_up=linear(cat(m + "gate_proj.weight", m + "up_proj.weight")),
                    down=linear(weight(m + "down_proj.weight")),
                )
            )

        log.info("model kernels: %s", self.describe_kernels())

    def describe_kernels(self) -> str:
        """One line naming the kernel each op runs (logged at load): the native level, the
        linears, the decode attention, the small ops."""
        parts = []
        if self.device.type == "cpu":
            why = load_cpu_ops()
            if why is None:
                info = kernel_info()
                forced = f" forced by {CPU_LEVEL_ENV}" if os.environ.get(CPU_LEVEL_ENV) else ""
                parts.append(f"cpu level {info.level}{forced} (this cpu runs {', '.join(supported_levels())}; "
                             f"native bf16: {'yes' if bf16_is_native() else 'no'})")
            else:
                parts.append(f"no native kernels ({why})")
        layer = self.layers[0] if self.layers else None
        if layer is not None:
            parts.append(f"layer linears: {describe_linear(layer.qkv)}")
        if self.lm_head is not None:
            parts.append(f"lm_head: {describe_linear(self.lm_head)}")
        parts.append(f"decode attention: {self.attn.describe_decode()}")
        parts.append(f"norms/rope/silu: {self.ops.name}")
        return "; ".join(parts)

    # ------------------------------------------------------------------ forward
    def new_kv_buffer(self, num_slots: int) -> KVBuffer:
        """A KV buffer shaped for this model, in the model's dtype and device."""
        return KVBuffer.for_model(self.config, num_slots, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv_buffer: KVBuffer) -> torch.Tensor:
        """Run the new tokens of ``batch``; write their K/V into ``kv_buffer``.

        Returns float32 logits ``[batch.num_logits, vocab]``: for each request (in order) the
        rows of its new tokens from ``logits_start`` to the end.
        """
        if self.embed is None:
            raise RuntimeError("model weights are not loaded (call load_state_dict)")
        c, ops = self.config, self.ops
        t = batch.num_tokens
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q_size, kv_size, eps = c.q_size, c.kv_size, c.rms_norm_eps

        self.attn.prepare(batch)
        # NOTE: the largest position from the host-side lengths: no device sync on a GPU.
        max_pos = max(p + e for p, e in zip(batch.prefix_lens, batch.extend_lens)) - 1
        rope = ops.rope_inputs(self.rope, batch.positions, self.dtype, max_pos)
        h = F.embedding(batch.input_ids, self.embed)  # NOTE: a fresh tensor: native ops add into it
        layers = self.layers
        x = ops.rms_norm(h, layers[0].input_norm, eps)
        for i, layer in enumerate(layers):
            qkv = layer.qkv(x)
            qk = ops.rope(qkv, rope, nh + nkv, hd)
            v = qkv[:, q_size + kv_size :].view(t, nkv, hd)
            o = self.attn.forward(i, qk[:, :nh], qk[:, nh:], v, kv_buffer)
            h, x = ops.add_rms_norm(h, layer.o(o), layer.post_norm, eps)
            down = layer.down(ops.silu_mul(layer.gate_up(x)))
            if i + 1 < len(layers):  # NOTE: the residual add fused with the next layer's norm
                h, x = ops.add_rms_norm(h, down, layers[i + 1].input_norm, eps)
            else:
                h = h + down

        rows = _logit_rows(batch)
        if rows is not None:
            h = h.index_select(0, rows.to(h.device))
        h = ops.rms_norm(h, self.final_norm, eps)
        return _float_logits(self.lm_head, h)

    __call__ = forward


def _float_logits(head: AnyLinear, h: torch.Tensor) -> torch.Tensor:
    """float32 logits of ``h``. A native head quantizes its input anyway, so it is given float32 and
    writes float32: the logits (and the logprobs reported from them) are not rounded to bf16 on
    the way, and no vocabulary-wide conversion runs per step (a one-stream A/B measured no
    speed difference beyond noise)."""
    small = head.small if isinstance(head, RowDispatchLinear) and h.shape[0] < head.min_rows else head
    if getattr(small, "kernel", None) == "native":
        return small(h.float())
    return head(h).float()


def _logit_rows(batch: ForwardBatch) -> torch.Tensor | None:
    """Token rows whose logits are returned, or None when that is every row."""
    if all(s == 0 for s in batch.logits_start):  # e.g. every decode batch
        return None
    rows: list[int] = []
    start = 0
    for e, s in zip(batch.extend_lens, batch.logits_start):
        rows.extend(range(start + s, start + e))
        start += e
    return torch.tensor(rows, dtype=torch.long)
