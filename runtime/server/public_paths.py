"""What the server's info endpoints say about where the model lives: its name, not the path.

An absolute path tells every client the user's home directory and layout. By default the info
endpoints (``/get_model_info``, ``/model_info``, ``/get_server_info``, ``/server_info``, gRPC
``ModelInfo``) show a model path as the model's name: the Hugging Face ``org/name`` of a hub-cache snapshot
(``.../models--org--name/snapshots/HASH`` -> ``org/name``), else the file or folder name
(``/home/u/models/SmolLM2-135M-Instruct`` -> ``SmolLM2-135M-Instruct``). SGLang's client picks a
chat template by matching the model path against family names, which the name keeps.
``sglc serve --expose-paths`` shows the absolute paths.
"""
from __future__ import annotations

import ntpath
import posixpath
from typing import Any

__all__ = ["public_path", "without_paths"]


def _is_absolute(text: str) -> bool:
    return posixpath.isabs(text) or (len(text) > 2 and text[1] == ":" and text[2] in "\\/")  # NOTE: C:\...


def public_path(path: str) -> str:
    """`path` as the model's name when it is absolute (see the module docstring); else unchanged."""
    if not _is_absolute(path):
        return path
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    for part in reversed(parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return "/".join(part.split("--")[1:3])
    return ntpath.basename(path.rstrip("/\\")) or "model"


def without_paths(info: dict[str, Any]) -> dict[str, Any]:
    """`info` with every top-level absolute-path string value shown by public_path."""
    return {k: public_path(v) if isinstance(v, str) else v for k, v in info.items()}
