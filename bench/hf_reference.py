"""transformers' own model of a model folder, the float reference our runtime is measured against.

A Hugging Face folder loads with ``from_pretrained``. A GGUF's folder holds only config.json and the
tokenizer (its weights stay in the file), so its reference is transformers' class for that config
with the GGUF's tensors decoded to float32 under Hugging Face names (``GGUFFile.float_state_dict``:
exactly the values the runtime's float path runs, see tests/test_gguf_architectures.py), written as
a temporary safetensors checkpoint so that transformers applies its own checkpoint conversions
(e.g. per-expert tensors into its fused expert weights).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def hf_causal_lm(path: str | os.PathLike, dtype: torch.dtype | str = torch.float32,
                 gguf: str | os.PathLike | None = None, config: str | os.PathLike | None = None):
    """transformers' ``AutoModelForCausalLM`` of the folder ``path`` (eval mode), its weights from
    ``gguf`` when given (``default_model.gguf_source`` names the default model's); ``config``: another
    config.json for them (e.g. the model's own before conversion)."""
    import transformers
    from safetensors.torch import save_file

    from sglc_runtime.model.gguf import GGUFFile

    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if gguf is None:
        return transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()
    f = GGUFFile(gguf)
    tensors = {name: t.contiguous() for name, t in f.float_state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        save_file(tensors, str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        (Path(tmp) / "config.json").write_bytes(Path(config or Path(path) / "config.json").read_bytes())
        return transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype).eval()
