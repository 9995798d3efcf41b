"""GGUFFile: a GGUF model file read in place — its metadata, and its tensors under Hugging Face
names, the 2-D ones kept as :class:`GGUFWeight` (memory-mapped blocks, nothing decoded).

What the metadata and the names mean per architecture lives in ``architectures.py``; this module
reads: ``config_dict`` (the Hugging Face config.json the metadata describes, so GGUF files and HF
folders meet in one ``ModelConfig``) and ``state_dict`` (llama.cpp's ``token_embd``,
``blk.N.attn_q`` ... under the Hugging Face names the model classes read). Rows only move or split,
so every type stays exact: llama's q/k rows go back from llama.cpp's rotary order, fused q/k/v
split where Hugging Face keeps them apart, and 3-D expert tensors (``ffn_{gate,up,down}_exps``:
``[experts, rows, cols]``) split into one 2-D tensor per expert (rows of the same memory map), so
experts run on the same kernels as dense layers. Gemma's norms, stored as ``1 + w``, come back as
``w`` (float32; the model adds 1 again at load).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .architectures import (CONFIG_TENSORS, GLOBAL_TENSORS, SUPPORTED_GGUF_ARCHITECTURES, GGUFModelError, Meta,
                            architecture)
from .reader import GGUFFormatError, GGUFReaderLite
from .tensor_types import check_supported, type_name
from .weight import GGUFWeight

__all__ = ["SUPPORTED_GGUF_ARCHITECTURES", "GGUFFile", "GGUFModelError", "rope_row_order", "unpermute_rope_rows"]

_EXPERTS = {"ffn_gate_exps.weight": "gate", "ffn_up_exps.weight": "up", "ffn_down_exps.weight": "down"}


class GGUFFile:
    """One GGUF file, memory-mapped (the weights are read from the page cache, never copied whole)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.reader = GGUFReaderLite(self.path)
        except (GGUFFormatError, OSError) as err:
            raise GGUFModelError(f"{self.path}: not a readable GGUF file ({err})") from None
        self._tensors = self.reader.tensors

    def release_resident_pages(self) -> None:
        """See :meth:`GGUFReaderLite.release_resident_pages`."""
        self.reader.release_resident_pages()

    def field(self, key: str, default: Any = None) -> Any:
        return self.reader.field(key, default)

    @property
    def architecture(self) -> str:
        return str(self.field("general.architecture", ""))

    def has_tensor(self, name: str) -> bool:
        return name in self._tensors

    def tensor_types(self) -> dict[str, int]:
        """How many tensors of each type the file holds."""
        counts: dict[str, int] = {}
        for t in self._tensors.values():
            counts[type_name(t.type)] = counts.get(type_name(t.type), 0) + 1
        return counts

    def weight(self, name: str) -> GGUFWeight:
        """A 2-D tensor as shipped (Hugging Face's [out, in]: GGUF lists the shape inner first)."""
        t = self._tensors[name]
        kind = type_name(t.type)
        check_supported(kind, name)
        if len(t.shape) != 2:
            raise GGUFModelError(f"tensor {name!r} has shape {t.shape}, expected 2 dimensions")
        cols, rows = t.shape
        return GGUFWeight(name, kind, rows, cols, self.reader.tensor_bytes(t, kind))

    def vector_array(self, name: str) -> np.ndarray:
        """A 1-D tensor (norms, biases) decoded to a float32 array (no torch: models/native_model.py)."""
        t = self._tensors[name]
        kind = type_name(t.type)
        check_supported(kind, name)
        n = t.shape[0]
        return GGUFWeight(name, kind, 1, n, self.reader.tensor_bytes(t, kind)).dequantize().reshape(n)

    def vector(self, name: str) -> "torch.Tensor":
        """A 1-D tensor (norms, biases) decoded to float32."""
        import torch

        return torch.from_numpy(self.vector_array(name))

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape in Hugging Face's order (outermost first; GGUF lists it innermost first)."""
        return tuple(reversed(self._tensors[name].shape))

    def experts(self, name: str) -> list[GGUFWeight]:
        """A 3-D stacked expert tensor (``[experts, rows, cols]``) as one 2-D tensor per expert, each a
        view of its rows of the file."""
        t = self._tensors[name]
        kind = type_name(t.type)
        check_supported(kind, name)
        if len(t.shape) != 3:
            raise GGUFModelError(f"expert tensor {name!r} has shape {t.shape}, expected 3 dimensions")
        cols, rows, n = t.shape
        raw = self.reader.tensor_bytes(t, kind)
        return [GGUFWeight(f"{name}[{e}]", kind, rows, cols, raw[e * rows:(e + 1) * rows]) for e in range(n)]

    def config_dict(self) -> dict[str, Any]:
        """The model's config in Hugging Face's config.json layout, from the GGUF metadata
        (GGUFModelError for an architecture or metadata sglc does not run, naming it)."""
        return architecture(self.architecture).config(Meta(self))

    def arrays(self, config: dict[str, Any] | None = None) -> dict[str, np.ndarray | GGUFWeight]:
        """Every weight under its Hugging Face name (``config``: :meth:`config_dict`'s): 2-D as
        GGUFWeight, 1-D as float32 arrays; rows in Hugging Face's order, experts one by one."""
        config = self.config_dict() if config is None else config
        arch = architecture(self.architecture)
        names, experts = arch.tensors(config), arch.experts(config)
        out: dict[str, np.ndarray | GGUFWeight] = {}
        unknown = []
        for t in self._tensors.values():
            if t.name in CONFIG_TENSORS:
                continue
            if t.name in GLOBAL_TENSORS:
                out[GLOBAL_TENSORS[t.name]] = self._value(t.name)
                continue
            parts = t.name.split(".", 2)
            if len(parts) != 3 or parts[0] != "blk" or not parts[1].isdigit():
                unknown.append(t.name)
                continue
            p, suffix = f"model.layers.{parts[1]}.", parts[2]
            if suffix in _EXPERTS:
                for e, w in enumerate(self.experts(t.name)):
                    out[p + experts.name(e, _EXPERTS[suffix])] = w
            elif suffix == "ffn_gate_up_exps.weight":  # NOTE: convert_hf_to_gguf.py --fuse-gate-up-exps
                for e, w in enumerate(self.experts(t.name)):
                    half = w.rows // 2
                    out[p + experts.name(e, "gate")] = w.row_slice(0, half)
                    out[p + experts.name(e, "up")] = w.row_slice(half, w.rows)
            elif suffix in names:
                out[p + names[suffix]] = self._value(t.name)
            elif suffix in ("attn_qkv.weight", "attn_qkv.bias"):  # NOTE: convert_hf_to_gguf.py --fuse-qkv
                value, kind = self._value(t.name), suffix.rsplit(".", 1)[1]
                q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
                for proj, (a, b) in zip("qkv", ((0, q), (q, q + kv), (q + kv, q + 2 * kv))):
                    out[f"{p}self_attn.{proj}_proj.{kind}"] = (value.row_slice(a, b) if isinstance(value, GGUFWeight)
                                                              else value[a:b].copy())
            else:
                unknown.append(t.name)
        if unknown:
            raise GGUFModelError(f"{self.path}: tensors sglc does not know for GGUF architecture "
                                 f"{self.architecture!r}: {unknown[:8]}")
        for name, value in out.items():
            if arch.rope_permuted and name.endswith(("q_proj.weight", "q_proj.bias")):
                out[name] = unpermute_rope_rows(value, config["num_attention_heads"])
            elif arch.rope_permuted and name.endswith(("k_proj.weight", "k_proj.bias")):
                out[name] = unpermute_rope_rows(value, config["num_key_value_heads"])
            elif arch.norm_offset and name.endswith("norm.weight"):
                out[name] = value - arch.norm_offset  # NOTE: float32, as transformers' GGUF loader does
        return out

    def state_dict(self, config: dict[str, Any] | None = None) -> dict[str, "torch.Tensor | GGUFWeight"]:
        """:meth:`arrays` with the 1-D arrays as float32 tensors."""
        import torch

        return {name: torch.from_numpy(value) if isinstance(value, np.ndarray) else value
                for name, value in self.arrays(config).items()}

    def float_state_dict(self, config: dict[str, Any] | None = None) -> dict[str, "torch.Tensor"]:
        """:meth:`arrays` with every tensor decoded to float32 (a Hugging Face checkpoint)."""
        import torch

        return {name: torch.from_numpy(value if isinstance(value, np.ndarray) else value.dequantize())
                for name, value in self.arrays(config).items()}

    def _value(self, name: str) -> np.ndarray | GGUFWeight:
        return self.vector_array(name) if len(self._tensors[name].shape) == 1 else self.weight(name)


def rope_row_order(rows: int, n_head: int) -> np.ndarray:
    """Row ``i`` of the Hugging Face q/k is row ``order[i]`` of llama.cpp's: llama.cpp writes the
    rows of each head as (j, half) where Hugging Face has (half, j)."""
    return np.arange(rows).reshape(n_head, rows // n_head // 2, 2).swapaxes(1, 2).reshape(rows)


def unpermute_rope_rows(value, n_head: int):
    """llama.cpp's q / k rows (a GGUFWeight, or a 1-D / 2-D numpy array or torch tensor) in Hugging
    Face's order."""
    order = rope_row_order(value.shape[0], n_head)
    if isinstance(value, GGUFWeight):
        return value.reorder_rows(order)
    if isinstance(value, np.ndarray):
        return value[order]
    import torch

    return value[torch.from_numpy(order)].contiguous()
