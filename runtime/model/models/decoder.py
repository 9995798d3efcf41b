"""The shared decoder every model family is built from, over a paged KV buffer.

One decoder layer is: RMSNorm -> attention (fused q/k/v projection, optional q/k RMSNorm, RoPE
from the layer's table, the attention backend with the layer's sliding window and soft-cap, the
output projection, optional post-norm) -> residual add fused with the next RMSNorm -> MLP (gated
dense or a sparse mixture of experts, SiLU or GeGLU, optional post-norm) -> residual add. What a
family changes is the :class:`ModelConfig` (norm offsets, activations, soft-caps, windows, rope
per layer type, experts) and, in its own module, the checkpoint's tensor names
(:meth:`DecoderForCausalLM.checkpoint_shapes`, :meth:`DecoderForCausalLM.load_layer`), as
vLLM's and SGLang's model folders do.

Weights are fused at load time (q/k/v into one matrix, gate/up into one) so that a layer is a
handful of large ops and little Python. Gemma's ``(1 + w)`` RMSNorm is folded into the weight at
load: exact in float32 (where transformers also adds in float32), one rounding of ``1 + w`` in
bf16/fp16 (relative error <= 2^-9 in bf16, the size of the activation's own rounding).
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
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
from ..gguf import GGUFFile, GGUFWeight
from ..gguf_convert import MARKER_FILE
from ..mapped_tensor import MappedTensor, map_tensor
from ..weights import check_state_dict, load_state_dict
from .decode_layers import DecodeLayers, build_decode_layers
from .gguf_linear import GGUFEmbedding
from .layer_ops import LayerOps, layer_ops_for
from .linear import can_pack_weights
from .moe import SparseMoE
from .quantized_linear import QUANTIZATIONS, QuantizationError, RowDispatchLinear, describe_linear
from .rope import RotaryEmbedding
from .weight_loader import AnyLinear, WeightLoader

log = logging.getLogger(__name__)



@dataclass(slots=True)
class Attention:
    """One layer's attention weights."""

    qkv: AnyLinear  # [q_size + 2 * kv_size, hidden]
    o: AnyLinear  # [hidden, q_size]
    q_norm: torch.Tensor | None = None  # [head_dim] ("head") or [q_size] ("full")
    k_norm: torch.Tensor | None = None
    post_norm: torch.Tensor | None = None  # sandwich norms: RMSNorm of the attention output


@dataclass(slots=True)
class DenseMLP:
    """A gated MLP: ``down(act(gate) * up)`` with gate and up fused."""

    gate_up: AnyLinear  # [2 * intermediate, hidden], gate first
    down: AnyLinear  # [hidden, intermediate]

    def __call__(self, x: torch.Tensor, act) -> torch.Tensor:
        return self.down(act(self.gate_up(x)))


@dataclass(slots=True)
class DecoderLayer:
    """One decoder layer: its norms, attention, MLP and which RoPE table it uses."""

    input_norm: torch.Tensor
    attn: Attention
    mlp_norm: torch.Tensor  # before the MLP: Llama's post_attention_layernorm, Gemma's pre_feedforward
    mlp: DenseMLP | SparseMoE
    post_mlp_norm: torch.Tensor | None = None  # sandwich norms: RMSNorm of the MLP output
    rope: int = 0  # index into the model's rope tables (Gemma 3: 0 global, 1 local)


class DecoderForCausalLM:
    """Causal LM whose ``forward(batch, kv_buffer)`` returns float32 logits.

    Construct with :meth:`from_pretrained` (a safetensors folder) or with a config and then
    :meth:`load_state_dict`. Inference only; ``forward`` runs under ``torch.inference_mode``.
    A family subclasses it with its checkpoint names (:meth:`checkpoint_shapes`,
    :meth:`load_layer`); everything else is shared.
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
        SiLU / GeGLU) on fused CPU kernels; None = when they build, True = required, False =
        eager torch ops (see :mod:`.layer_ops`)."""
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
        self.ops: LayerOps = layer_ops_for(self.device, self.dtype, native_ops)
        self.native_ops = native_ops
        c = config
        self.attn = (
            attention
            if isinstance(attention, AttentionBackend)
            else create_backend(attention, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.attn_scale)
        )
        if native_ops is False and isinstance(self.attn, TorchAttentionBackend):
            self.attn.native = False  # NOTE: eager means eager everywhere (A/B runs, debugging)
        # NOTE: a backend that cannot run sliding windows or soft-capping refuses them here, by name
        self.attn.set_layer_options([c.layer_window(i) for i in range(c.num_hidden_layers)], c.attn_logit_softcap)
        self.rope = RotaryEmbedding(c.head_dim, c.rope_theta, c.rope_scaling, c.max_position_embeddings,
                                    self.device, c.rotary_dim)
        #: RoPE tables by index (DecoderLayer.rope): the global one, then the local one if it differs
        self.ropes = [self.rope]
        if c.local_rope_theta is not None:
            self.ropes.append(RotaryEmbedding(c.head_dim, c.local_rope_theta, c.local_rope_scaling,
                                              c.max_position_embeddings, self.device, c.rotary_dim))
        self.act = self.ops.gelu_tanh_mul if c.hidden_act == "gelu_tanh" else self.ops.silu_mul
        self.embed_scale = (None if c.embed_scale is None
                            else torch.tensor(c.embed_scale).to(device=self.device, dtype=self.dtype))
        self.embed: torch.Tensor | None = None
        self.lm_head: AnyLinear | None = None
        self.final_norm: torch.Tensor | None = None
        self.layers: list[DecoderLayer] = []
        #: the layers as one native call each for decode batches (None: the Python loop always)
        self.decode_layers: DecodeLayers | None = None

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
        gguf: str | Path | None = None,
        decode_gguf: bool = False,
    ) -> "DecoderForCausalLM":
        """Load config.json and the safetensors weights of a Hugging Face model folder; with
        ``gguf``, the weights of that GGUF file instead, read in place (its folder holds the
        config and tokenizer: ``default_model.resolve_model_path``). ``decode_gguf``: decode its
        tensors to float32 first, as a safetensors checkpoint gives them, so that ``quantization``
        re-quantizes them (the int8/int4 paths measured against the file's own types)."""
        config = ModelConfig.from_pretrained(path)
        model = cls(config, dtype=dtype, device=device, attention=attention, pack_weights=pack_weights,
                    quantization=quantization, native_ops=native_ops)
        if gguf is not None:
            f = GGUFFile(gguf)
            gguf_config = f.config_dict()
            tensors = f.float_state_dict(gguf_config) if decode_gguf else f.state_dict(gguf_config)
            model.load_state_dict(tensors, source=str(gguf))
            # NOTE: the linears hold their repacked tiles now: the file's pages need not stay resident
            f.release_resident_pages()
        elif (Path(path) / MARKER_FILE).is_file() and not any(Path(path).glob("*.safetensors")):
            raise FileNotFoundError(f"{str(path)!r} holds the config and tokenizer of a GGUF file, whose weights are "
                                    "read from the file: load_model(path, gguf=...) (default_model.gguf_source)")
        else:
            model.load_state_dict(load_state_dict(path), source=str(path), folder=Path(path))
        return model

    @classmethod
    def checkpoint_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """Hugging Face tensor names and shapes a checkpoint of this family must provide."""
        c = config
        shapes: dict[str, tuple[int, ...]] = {
            "model.embed_tokens.weight": (c.vocab_size, c.hidden_size),
            "model.norm.weight": (c.hidden_size,),
        }
        if not c.tie_word_embeddings:
            shapes["lm_head.weight"] = (c.vocab_size, c.hidden_size)
        for i in range(c.num_hidden_layers):
            shapes.update(cls.layer_shapes(c, i, f"model.layers.{i}."))
        return shapes

    @classmethod
    def layer_shapes(cls, config: ModelConfig, layer: int, prefix: str) -> dict[str, tuple[int, ...]]:
        """The tensors of one layer (names after ``prefix``); a family's module defines them."""
        raise NotImplementedError

    def load_layer(self, layer: int, prefix: str, w: WeightLoader) -> DecoderLayer:
        """One layer from the checkpoint (names after ``prefix``); a family's module defines it."""
        raise NotImplementedError

    def load_state_dict(self, tensors: dict[str, torch.Tensor], source: str = "", folder: Path | None = None) -> None:
        """Take Hugging Face-named tensors; checks names and shapes first (:class:`WeightError`).
        ``folder``: the safetensors folder they came from, whose embedding is then looked up in
        place where it is stored in the model's dtype (``mapped_tensor.py``)."""
        c = self.config
        check_state_dict(tensors, self.checkpoint_shapes(c), source,
                         allowed_extra={"lm_head.weight"} if c.tie_word_embeddings else set())
        w = WeightLoader(self, tensors)
        head_name = "model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
        embedding = tensors["model.embed_tokens.weight"]
        if isinstance(embedding, GGUFWeight) and self.device.type == "cpu":
            # NOTE: looked up from its blocks; the head on its type's kernel
            self.embed = GGUFEmbedding(embedding, self.dtype)
            self.lm_head = w.linear(head_name, head=True)
        elif isinstance(embedding, GGUFWeight):
            # NOTE: off the CPU every GGUF tensor is decoded (the block kernels are CPU code), the
            # embedding too: a row lookup from blocks reads the ids on the host, which a CUDA graph
            # cannot capture and an eager step would pay as a sync.
            self.embed = w.tensor("model.embed_tokens.weight")
            self.lm_head = (w.build_linear(self.embed, kind="int8", head=True) if c.tie_word_embeddings
                            else w.linear(head_name, head=True))
        else:
            mapped = self._embedding_in_place(folder)
            self.embed = mapped.tensor if mapped is not None else w.tensor("model.embed_tokens.weight")
            # NOTE: reuse the embedding where it is the head's weight as is: a quantized head needs its
            # source, a half-tiled one the stored dtype, a float one the model's (not a table kept in bf16)
            tied = (c.tie_word_embeddings and not w.quantized and self.embed.dtype == self.dtype
                    and not w.keeps_half(tensors[head_name]))
            head = self.embed if tied else w.weight(head_name)
            self.lm_head = w.build_linear(head, kind="int8", head=True)
            if mapped is not None:  # NOTE: packing a tied head read every row: only looked-up rows need stay
                mapped.release_pages()
        self.final_norm = w.norm("model.norm.weight")
        # NOTE: layers load on every core: repacking is numpy and torch work that releases the GIL
        with ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 8))) as pool:
            self.layers = list(pool.map(lambda i: self.load_layer(i, f"model.layers.{i}.", w), range(c.num_hidden_layers)))
        self.decode_layers = build_decode_layers(self)
        log.info("model kernels: %s", self.describe_kernels())

    def _embedding_in_place(self, folder: Path | None) -> MappedTensor | None:
        """The checkpoint's embedding over its own map of the file (on a CPU, where it is stored in
        the model's dtype, or in bf16 / float16 for a float32 model), or None: then it is copied like
        every other tensor."""
        if folder is None or self.device.type != "cpu":
            return None
        mapped = map_tensor(folder, "model.embed_tokens.weight")
        c = self.config
        if mapped is None or tuple(mapped.tensor.shape) != (c.vocab_size, c.hidden_size):
            return None
        # NOTE: a bf16 / float16 table serves a float32 model too: its rows widen exactly when looked up
        widens = self.dtype == torch.float32 and mapped.tensor.dtype in (torch.bfloat16, torch.float16)
        return mapped if mapped.tensor.dtype == self.dtype or widens else None

    def graph_unsafe_reason(self) -> str | None:
        """Why the decode forward cannot be captured as a CUDA graph (None: it can)."""
        c = self.config
        if any(c.is_moe_layer(i) for i in range(c.num_hidden_layers)):
            return "its mixture-of-experts layers group tokens by expert with counts read on the host"
        return None

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
            parts.append(f"layer linears: {describe_linear(layer.attn.qkv)}")
        if self.lm_head is not None:
            parts.append(f"lm_head: {describe_linear(self.lm_head)}")
        parts.append(f"decode attention: {self.attn.describe_decode()}")
        parts.append(f"norms/rope/{self.config.hidden_act}: {self.ops.name}")
        if self.decode_layers is not None:
            bound = self.decode_layers.max_rows
            parts.append("decode layers: one native call each" + ("" if bound == float("inf") else f" below {bound} rows"))
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
        c, ops, attn_backend = self.config, self.ops, self.attn
        attn_backend.prepare(batch)
        # NOTE: the largest position from the host-side lengths: no device sync on a GPU.
        max_pos = max(p + e for p, e in zip(batch.prefix_lens, batch.extend_lens)) - 1
        ropes = [ops.rope_inputs(r, batch.positions, self.dtype, max_pos) for r in self.ropes]
        # NOTE: a fresh tensor either way: native ops add into it
        h = self.embed(batch.input_ids) if isinstance(self.embed, GGUFEmbedding) else F.embedding(batch.input_ids, self.embed)
        if h.dtype != self.dtype:  # NOTE: a bf16 / float16 table looked up in place for a float32 model
            h = h.to(self.dtype)
        if self.embed_scale is not None:
            h.mul_(self.embed_scale)
        x = ops.rms_norm(h, self.layers[0].input_norm, c.rms_norm_eps)
        fused = self.decode_layers
        if (fused is not None and batch.num_tokens < fused.max_rows and kv_buffer.k[0].dtype == self.dtype
                and attn_backend.native_decode_inputs(0) is not None):  # NOTE: a pure decode batch on the kernel
            h = self._decode_layers(fused, h, x, ropes, kv_buffer)
        else:
            h = self._layers(h, x, ropes, kv_buffer)

        rows = _logit_rows(batch)
        if rows is not None:
            h = h.index_select(0, rows.to(h.device))
        h = ops.rms_norm(h, self.final_norm, c.rms_norm_eps)
        logits = _float_logits(self.lm_head, h)
        if c.final_logit_softcap is not None:
            cap = c.final_logit_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits

    __call__ = forward

    def _layers(self, h: torch.Tensor, x: torch.Tensor, ropes: list, kv_buffer: KVBuffer) -> torch.Tensor:
        """Every layer over the step's tokens (``x``: the first layer's input norm of the residual
        stream ``h``); returns the residual stream after the last layer."""
        c, ops, attn_backend, layers, act = self.config, self.ops, self.attn, self.layers, self.act
        t = x.shape[0]
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q_size, kv_size, eps = c.q_size, c.kv_size, c.rms_norm_eps
        head_norm, clip = c.qk_norm == "head", c.clip_qkv
        for i, layer in enumerate(layers):
            # --- attention: projections, q/k norms, RoPE, the backend (the loop is inlined: it runs
            # once per layer and step, and a one-stream step is ~6 ms)
            attn = layer.attn
            qkv = attn.qkv(x)
            if attn.q_norm is not None and head_norm and clip is None:  # NOTE: per head (Qwen3, Gemma 3)
                qk = ops.head_norm_rope(qkv, ropes[layer.rope], nh, nkv, hd, attn.q_norm, attn.k_norm, eps)
            else:
                if attn.q_norm is not None and head_norm:
                    ops.head_norm(qkv, nh, nkv, hd, attn.q_norm, attn.k_norm, eps)
                elif attn.q_norm is not None:  # NOTE: over all heads at once (OLMoE)
                    q, k = qkv[:, :q_size], qkv[:, q_size:q_size + kv_size]
                    q.copy_(ops.rms_norm(q, attn.q_norm, eps))
                    k.copy_(ops.rms_norm(k, attn.k_norm, eps))
                if clip is not None:
                    qkv.clamp_(-clip, clip)
                qk = ops.rope(qkv, ropes[layer.rope], nh + nkv, hd)
            v = qkv[:, q_size + kv_size:].view(t, nkv, hd)
            a = attn.o(attn_backend.forward(i, qk[:, :nh], qk[:, nh:], v, kv_buffer))
            if attn.post_norm is not None:
                a = ops.rms_norm(a, attn.post_norm, eps)
            # --- MLP
            h, x = ops.add_rms_norm(h, a, layer.mlp_norm, eps)
            mlp = layer.mlp
            y = mlp.down(act(mlp.gate_up(x))) if type(mlp) is DenseMLP else mlp(x, act)
            if layer.post_mlp_norm is not None:
                y = ops.rms_norm(y, layer.post_mlp_norm, eps)
            if i + 1 < len(layers):  # NOTE: the residual add fused with the next layer's norm
                h, x = ops.add_rms_norm(h, y, layers[i + 1].input_norm, eps)
            else:
                h = h + y
        return h

    def _decode_layers(self, fused: DecodeLayers, h: torch.Tensor, x: torch.Tensor, ropes: list,
                       kv_buffer: KVBuffer) -> torch.Tensor:
        """The layers of a pure decode batch on the native decode attention, one native call each
        (see :mod:`.decode_layers`); returns the residual stream after the last layer."""
        inputs = self.attn.native_decode_inputs
        for i, (layer, rope, next_norm) in enumerate(zip(fused.layers, fused.ropes, fused.next_norms)):
            x = layer.forward(h, x, *ropes[rope], kv_buffer.k[i], kv_buffer.v[i], *inputs(i), next_norm)
        return h


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
