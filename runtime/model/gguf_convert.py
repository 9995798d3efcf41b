"""The tokenizer and config folder of a GGUF file: what the runtime reads beside the weights.

A GGUF's weights are read in place (``gguf/file.py``, ``load_model(folder, gguf=path)``); the folder
holds only config.json (the Hugging Face config its metadata describes,
:meth:`~.gguf.GGUFFile.config_dict`) and tokenizer.json, tokenizer_config.json (with the chat
template) and generation_config.json (the stop ids), written by :mod:`.gguf_tokenizer`, which
rebuilds the model's Hugging Face tokenizer from the GGUF — a few MB at most, whatever the model's
size. It is written to a temporary sibling folder and renamed into place, so a crash never leaves a
half-written folder; a marker file names the source (by content), this writer's and the tokenizer
files' versions.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from .gguf import GGUFFile
from .gguf_tokenizer import TOKENIZER_FILES_VERSION, GGUFVocab, build_tokenizer, write_tokenizer_files
from .model_config import ModelConfig

#: bump when the output format changes; stale folders are then rebuilt (so does a new tokenizer version).
#: 3: config and tokenizer only (no float32 model.safetensors), every supported GGUF architecture.
CONVERTER_VERSION = 3
MARKER_FILE = "sglc_convert.json"


def _fingerprint(gguf_path: Path, edge: int = 4 << 20) -> str:
    """sha256 of the file's size, first and last ``edge`` bytes: names the weights, not where they live."""
    size = gguf_path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(gguf_path, "rb") as f:
        digest.update(f.read(edge))
        f.seek(max(size - edge, 0))
        digest.update(f.read(edge))
    return digest.hexdigest()


def _marker(gguf_path: Path) -> dict[str, Any]:
    # NOTE: not the path: the same wheel installed in two virtualenvs must share one conversion
    # (with the path in the marker, each venv re-converted and swapped the folder under the other's readers).
    return {"fingerprint": _fingerprint(gguf_path), "size": gguf_path.stat().st_size, "version": CONVERTER_VERSION,
            "tokenizer_version": TOKENIZER_FILES_VERSION}


def is_converted(gguf_path: str | Path, out_dir: str | Path) -> bool:
    """True when ``out_dir`` holds a complete conversion of this GGUF by this converter version."""
    marker = Path(out_dir) / MARKER_FILE
    try:
        return json.loads(marker.read_text()) == _marker(Path(gguf_path))
    except (OSError, ValueError):
        return False


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Write the config and tokenizer folder of ``gguf_path`` into ``out_dir`` unless it is already
    there; returns it. An architecture, tensor type or tokenizer sglc cannot run fails here, by
    name, before anything is written."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {str(gguf_path)!r}")
    if is_converted(gguf_path, out_dir):
        return out_dir
    f = GGUFFile(gguf_path)
    config = f.config_dict()
    ModelConfig.from_dict(config)  # NOTE: what no model family runs is refused here, by name
    f.state_dict(config)  # NOTE: tensor names, layouts and types checked now (no weight is decoded)
    vocab = GGUFVocab.from_file(gguf_path)
    tokenizer = build_tokenizer(vocab)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        write_tokenizer_files(vocab, tmp, tokenizer)
        _write_json(tmp / "config.json", config)
        _write_json(tmp / MARKER_FILE, _marker(gguf_path))  # NOTE: written last: marks completeness
        _swap_into_place(tmp, out_dir, gguf_path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _swap_into_place(tmp: Path, out_dir: Path, gguf_path: Path) -> None:
    """Rename ``tmp`` to ``out_dir``; a stale ``out_dir`` is moved aside and deleted first."""
    if out_dir.exists():
        if is_converted(gguf_path, out_dir):  # another process finished first
            return
        trash = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out_dir, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, out_dir)
    except OSError:
        if not is_converted(gguf_path, out_dir):
            raise


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
