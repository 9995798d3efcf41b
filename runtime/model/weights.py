"""Reading Hugging Face safetensors checkpoints and checking them against the names and shapes a
model family expects (``models/*.checkpoint_shapes``)."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file


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


def safetensors_header(file: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's JSON header and the byte where its data starts (format: u64
    little-endian header length N, N bytes of JSON ``{name: {"dtype", "shape", "data_offsets"}}``
    with offsets from the data's start, then the data)."""
    with open(file, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{file}: not a safetensors file (shorter than its header length)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 << 20:
            raise ValueError(f"{file}: safetensors header of {n} bytes is implausible")
        try:
            header = json.loads(fh.read(n))
        except ValueError:
            raise ValueError(f"{file}: safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError(f"{file}: safetensors header is not a JSON object")
    return header, 8 + n


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the folder's safetensors files, by name (on CPU, checkpoint dtype)."""
    tensors: dict[str, torch.Tensor] = {}
    for file in safetensors_files(path):
        for name, tensor in load_file(str(file)).items():
            if not name.endswith(_IGNORED_SUFFIXES):
                tensors[name] = tensor
    return tensors


def check_state_dict(tensors: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], source: str = "",
                     allowed_extra: set[str] | frozenset[str] = frozenset()) -> None:
    """Raise :class:`WeightError` naming every missing, unexpected or misshapen tensor of the
    ``expected`` names and shapes (a model family's ``checkpoint_shapes``); names in
    ``allowed_extra`` may be present without being expected (a tied checkpoint's lm_head)."""
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
