"""WeightLoader: a checkpoint's tensors (Hugging Face names; safetensors tensors or GGUF tensors
as shipped) into a decoder's weights in the form its configuration runs: plain tensors in the
model's dtype and device, norms with the config's weight offset folded in, linears concatenated,
pre-packed or quantized, and a GGUF tensor on its type's native kernel (with a bf16 copy for
prefill while the copies stay small), its file pages released once it is repacked.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..gguf import GGUFWeight
from ..gguf.reader import release_pages_of
from ..native import bf16_is_native
from .gguf_linear import NIBBLE_TILE_TYPES, gguf_linear
from .half_linear import HALF_IN_MULTIPLE, HALF_KINDS, HalfTiledLinear
from .linear import Linear, can_pack_weights
from .quantized_linear import (CastLinear, QuantizedLinear, RowDispatchLinear, large_batch_dtype, large_batch_rows,
                               native_large_batch_rows, quantized_linear)
from .tiled_linear import native_tile_kernels, tiled_for_few_rows

AnyLinear = Linear | RowDispatchLinear | QuantizedLinear | HalfTiledLinear

#: Where bf16 is native, a GGUF model's linears get a bf16 copy for prefill (on AMX ~7x the
#: integer kernels' speed at 256 rows) while all the copies together stay under this many bytes:
#: the default model (135 M parameters, copies 0.27 GB) keeps its prefill figures; from ~160 M
#: parameters up memory stays at the file's size (resident memory <= file + KV pool + 300 MB)
#: and prefill runs on the integer kernels too.
GGUF_FLOAT_COPY_BYTES = 320 << 20


class StackedLinear:
    """Linears of the same input whose outputs are concatenated (a fused q/k/v whose parts ship
    in different GGUF types).

    Where every part is a native tiled GGUF linear filling whole tiles, calls of fewer rows than
    the parts' float copies take are one ``sglc_cpu.stacked_linear`` call (the rows quantized
    once, every part's tiles in one pass, one output: each part's columns are its own op's bit
    for bit); otherwise each part runs on its own and the outputs are concatenated."""

    __slots__ = ("parts", "out_features", "_kinds", "_tensors", "_bias", "_max_rows")
    kernel = "native"

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self.out_features = sum(p.out_features for p in parts)
        self._kinds: list[str] | None = None
        self._tensors: list[torch.Tensor] = []
        self._bias: torch.Tensor | None = None
        self._max_rows: int | float = 0
        found = [tiled_for_few_rows(p) for p in parts]
        if all(f is not None and f[0].out_features % 16 == 0 for f in found):
            tiled = [f[0] for f in found]
            kinds_and_tensors = [t.tiled() for t in tiled]
            self._kinds = [kind for kind, _ in kinds_and_tensors]
            self._tensors = [a for _, args in kinds_and_tensors for a in args]
            self._max_rows = min(f[1] for f in found)
            biases = [t.bias for t in tiled if t.bias is not None]
            if biases:  # NOTE: in the parts' bias dtype, so that the call's cast is a no-op
                self._bias = torch.cat([t.bias if t.bias is not None else biases[0].new_zeros(t.out_features)
                                        for t in tiled])

    def tiled_parts(self) -> tuple[list[str], list[torch.Tensor], torch.Tensor | None, int | float] | None:
        """(kinds, tensors, bias, row bound) of the one-call road, or None where it has none: what
        ``stacked_linear`` takes, and the row count from which the parts run on their own."""
        return None if self._kinds is None else (self._kinds, self._tensors, self._bias, self._max_rows)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._kinds is not None and x.shape[0] < self._max_rows:
            y = torch.ops.sglc_cpu.stacked_linear(x, self._kinds, self._tensors)
            return y if self._bias is None else y + self._bias.to(y.dtype)
        return torch.cat([p(x) for p in self.parts], dim=1)


class WeightLoader:
    """Reads a checkpoint's tensors (Hugging Face names) into the model's layers: plain tensors in
    the model's dtype and device, norms with the config's weight offset folded in, and linears
    (several tensors concatenated, pre-packed or quantized as the model is configured)."""

    # NOTE: ``model`` is the DecoderForCausalLM being loaded (not imported: decoder.py imports this
    # module); the loader reads its settings (dtype, device, quantization, packing) and config
    def __init__(self, model: Any, tensors: dict[str, torch.Tensor | GGUFWeight]) -> None:
        self.model = model
        self.tensors = tensors
        self.quantized = model.quantization != "none"
        self._bf16_native = bf16_is_native()
        # NOTE: a GGUF model keeps a float copy of its linears for prefill (where bf16 is native
        # and so faster) only while all those copies together stay small: above that, memory
        # stays at the file's size and prefill runs on the integer kernels too.
        float_bytes = sum(2 * t.rows * t.cols for t in tensors.values() if isinstance(t, GGUFWeight))
        self._gguf_float_copies = self._bf16_native and float_bytes <= GGUF_FLOAT_COPY_BYTES
        m = model
        self._half_tiles = (not self.quantized and m.dtype == torch.float32 and m.device.type == "cpu"
                            and m.native_ops is not False and native_tile_kernels())

    def keeps_half(self, t: torch.Tensor | GGUFWeight) -> bool:
        """Whether the checkpoint tensor ``t``, as a linear's weight, stays in its bf16 / float16 on
        half tiles (``half_linear``): a float32 model on a CPU with the native kernels, where the
        tiles' float32 products equal those of the widened weights from a copy the file's size."""
        return (self._half_tiles and isinstance(t, torch.Tensor) and t.dtype in HALF_KINDS and t.dim() == 2
                and t.shape[1] % HALF_IN_MULTIPLE == 0)

    def tensor(self, name: str) -> torch.Tensor:
        """``name`` in the model's dtype and device (a GGUF tensor decoded: e.g. an MoE router)."""
        m = self.model
        t = self.tensors[name]
        if isinstance(t, GGUFWeight):
            return torch.from_numpy(t.dequantize()).to(device=m.device, dtype=m.dtype).contiguous()
        out = t.to(device=m.device, dtype=m.dtype).contiguous()
        if out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            # NOTE: kept as loaded it would be a view of the checkpoint's file map, and one view
            # keeps the whole map, every page the load read, resident (a bf16 folder's embedding
            # held its 604 MB file: RSS = file + the packed linears)
            out = out.clone()
        return out

    def norm(self, name: str) -> torch.Tensor:
        """An RMSNorm weight; Gemma's ``1 + w`` added in float32, then cast once."""
        offset = self.model.config.norm_weight_offset
        if not offset:
            return self.tensor(name)
        w = self.tensors[name].float() + offset
        return w.to(device=self.model.device, dtype=self.model.dtype).contiguous()

    def weight(self, name: str) -> torch.Tensor | GGUFWeight:
        """A linear weight: kept in its checkpoint precision until quantized, else the model's
        dtype; a GGUF tensor as shipped, and a bf16 / float16 one where :meth:`keeps_half`."""
        if isinstance(self.tensors[name], GGUFWeight) or self.keeps_half(self.tensors[name]):
            return self.tensors[name]  # NOTE: a half weight is repacked into tiles: no clone needed
        if self.quantized:
            return self.tensors[name].to(device=self.model.device).contiguous()
        return self.tensor(name)

    def linear(self, names: str | Sequence[str], biases: str | Sequence[str] | None = None,
               kind: str | None = None, head: bool = False) -> AnyLinear:
        """The linear of the weights ``names`` stacked along their output rows (q/k/v, gate/up);
        ``head``: the lm_head (its float copy, if any, takes over at its own row count)."""
        names = [names] if isinstance(names, str) else list(names)
        b = None
        if biases is not None:
            biases = [biases] if isinstance(biases, str) else list(biases)
            b = torch.cat([self.tensor(n) for n in biases]).contiguous()
        if any(isinstance(self.tensors[n], GGUFWeight) for n in names):
            return self.gguf_linear([self.weight(n) for n in names], b, head)
        w = self.weight(names[0]) if len(names) == 1 else torch.cat([self.weight(n) for n in names]).contiguous()
        return self.build_linear(w, b, kind, head)

    def gguf_linear(self, weights: list[GGUFWeight], bias: torch.Tensor | None, head: bool = False) -> AnyLinear:
        """GGUF tensors stacked along their rows, on their type's native kernel (``gguf_linear``);
        tensors of different types (a Q4_K_M file's Q6_K attn_v beside Q4_K q and k) run as
        separate linears whose outputs are concatenated."""
        if any(not isinstance(w, GGUFWeight) for w in weights):
            raise ValueError(f"cannot stack GGUF and plain tensors into one linear: {[w.name for w in weights]}")
        if len({(w.type_name, w.cols) for w in weights}) > 1:
            parts, start = [], 0
            for w in weights:
                part_bias = None if bias is None else bias[start:start + w.rows]
                parts.append(self._gguf_one(w, part_bias))
                start += w.rows
            return StackedLinear(parts)
        w = weights[0].concat_rows(*weights[1:]) if len(weights) > 1 else weights[0]
        return self._gguf_one(w, bias, head)

    def _gguf_one(self, w: GGUFWeight, bias: torch.Tensor | None, head: bool = False) -> AnyLinear:
        linear = self._gguf_linear(w, bias, head)
        # NOTE: repacked (or decoded): its file pages need not stay resident while the rest loads
        release_pages_of(w.raw)
        return linear

    def _gguf_linear(self, w: GGUFWeight, bias: torch.Tensor | None, head: bool = False) -> AnyLinear:
        """One GGUF tensor as shipped on its type's kernel when the model is quantized (any
        ``quantization`` but "none": the file's types decide); decoded exactly into a float linear
        of the model's dtype when it is not (the float reference model), or on a GPU (the integer
        kernels are CPU ones)."""
        m = self.model
        if not self.quantized or m.device.type != "cpu":
            weight = torch.from_numpy(w.dequantize()).to(device=m.device, dtype=m.dtype).contiguous()
            b = None if bias is None else bias.to(device=m.device, dtype=m.dtype)
            return Linear.build(weight, b, pack=m.pack_weights and m.device.type == "cpu")
        native = False if m.native_ops is False else None
        small = gguf_linear(w, bias, m.dtype, pack=m.pack_weights, native=native)
        if getattr(small, "kernel", None) != "native" or not self._gguf_float_copies:
            return small
        large = Linear.build(torch.from_numpy(w.dequantize()).to(torch.bfloat16).contiguous(),
                             None if bias is None else bias.to(torch.bfloat16),
                             pack=m.pack_weights and can_pack_weights(torch.bfloat16, m.device))
        min_rows = native_large_batch_rows(w.type_name in NIBBLE_TILE_TYPES, head)
        return RowDispatchLinear(small, large if m.dtype == torch.bfloat16 else CastLinear(large), min_rows)

    def build_linear(self, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     kind: str | None = None, head: bool = False) -> AnyLinear:
        """``weight`` as the model's kind of linear (quantized, packed or plain; on half tiles where
        it is a bf16 / float16 weight :meth:`keeps_half`)."""
        m = self.model
        if weight.dtype != m.dtype and self.keeps_half(weight):
            return HalfTiledLinear(weight, bias)
        if self.quantized:  # NOTE: integer kernels for small batches, a float copy for big ones where it pays
            small = quantized_linear(kind or m.quantization, weight, bias,
                                     native=False if m.native_ops is False else None)
            large_dtype = large_batch_dtype(small, self._bf16_native)
            if large_dtype is None:
                return small
            large = Linear.build(weight.to(large_dtype).contiguous(),
                                 None if bias is None else bias.to(large_dtype),
                                 pack=m.pack_weights and can_pack_weights(large_dtype, m.device))
            return RowDispatchLinear(small, large if large_dtype == m.dtype else CastLinear(large),
                                     large_batch_rows(small, head))
        return Linear.build(weight, bias, pack=m.pack_weights)

    def float_linear(self, name: str) -> Linear | CastLinear:
        """A small linear whose output is in the compute dtype even when the model is quantized (MoE
        routers). A bf16/fp16 model computes it in float32 and rounds the output once, as a bf16
        GEMM with float32 accumulation does: oneDNN's bf16 kernel took ~70 us for one token's 16
        router logits against ~4 us for MKL's float32 GEMV, once per layer and token."""
        weight = self.tensor(name)
        if weight.dtype == torch.float32 or weight.device.type != "cpu":
            return Linear.build(weight, None, pack=self.model.pack_weights)
        return CastLinear(Linear.build(weight.float(), None, pack=self.model.pack_weights))
