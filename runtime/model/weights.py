"""Reading Hugging Face safetensors checkpoints and checking them against a ModelConfig."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from .model_config import ModelConfig

# Keys some checkpoints carry that the runtime recomputes instead of loading.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class WeightError(ValueError):
    """A checkpoint's tensors do not fit the model (missing, unexpected or misshapen tensors)."""


def safetensors_files(path: str | Path) -> list[Path]:
    """The .safetensors files of a model folder (following an index file when present)."""
    folder = Path(path)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = sorted({folder / name for name in weight_map.values()})
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} names weight files that do not exist: {missing}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors weight files in model folder {str(folder)!r}")
    return files


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the folder's safetensors files, by name (on CPU, checkpoint dtype)."""
    tensors: dict[str, torch.Tensor] = {}
    for file in safetensors_files(path):
        for name, tensor in load_file(str(file)).items():
            if not name.endswith(_IGNORED_SUFFIXES):
                tensors[name] = tensor
    return tensors


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face tensor names and shapes a Llama-family checkpoint must provide."""
    c = config
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (c.vocab_size, c.hidden_size),
        "model.norm.weight": (c.hidden_size,),
    }
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, c.hidden_size)
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (c.hidden_size,)
        shapes[p + "post_attention_layernorm.weight"] = (c.hidden_size,)
        shapes[p + "self_attn.q_proj.weight"] = (c.q_size, c.hidden_size)
        shapes[p + "self_attn.k_proj.weight"] = (c.kv_size, c.hidden_size)
        shapes[p + "self_attn.v_proj.weight"] = (c.kv_size, c.hidden_size)
        shapes[p + "self_attn.o_proj.weight"] = (c.hidden_size, c.q_size)
        if c.qkv_bias:
            shapes[p + "self_attn.q_proj.bias"] = (c.q_size,)
            shapes[p + "self_attn.k_proj.bias"] = (c.kv_size,)
            shapes[p + "self_attn.v_proj.bias"] = (c.kv_size,)
        if c.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (c.hidden_size,)
        shapes[p + "mlp.gate_proj.weight"] = (c.intermediate_size, c.hidden_size)
        shapes[p + "mlp.up_proj.weight"] = (c.intermediate_size, c.hidden_size)
        shapes[p + "mlp.down_proj.weight"] = (c.hidden_size, c.intermediate_size)
    return shapes


def check_state_dict(tensors: dict[str, torch.Tensor], config: ModelConfig, source: str = "") -> None:
    """Raise :class:`WeightError` naming every missing, unexpected or misshapen tensor."""
    expected = expected_shapes(config)
    allowed_extra = {"lm_head.weight"} if config.tie_word_embeddings else set()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected) - allowed_extra)
    misshapen = [
        f"{name}: expected {expected[name]}, got {tuple(tensors[name].shape)}"
        for name in sorted(set(expected) & set(tensors))
        if tuple(tensors[name].shape) != expected[name]
    ]
    if missing or unexpected or misshapen:
        where = f" in {source}" if source else ""
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (e.g. {missing[:5]})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensors (e.g. {unexpected[:5]})")
        if misshapen:
            parts.append(f"misshapen tensors: {misshapen[:5]}")
        raise WeightError(f"checkpoint does not match the config{where}: " + "; ".join(parts))
