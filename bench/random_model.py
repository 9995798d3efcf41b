"""A Llama-family model folder with random weights, shaped like a given config.json.

For GPU benchmarks where the real checkpoint cannot travel (attention cost does not depend on
weight values) and for small test models. The embedding (tied to the output head) is scaled up
so that greedy picks have clear margins: an identity check between two attention backends then
compares attention, not which of two near-tied tokens float rounding happened to favour.

    python -m bench.random_model CONFIG_DIR OUT_DIR [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from sglc_runtime.model.model_config import ModelConfig
from sglc_runtime.model.models import expected_shapes

_COPIED = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")


def random_state_dict(config: ModelConfig, seed: int = 0, std: float = 0.02,
                      embed_scale: float = 5.0) -> dict[str, torch.Tensor]:
    """float32 tensors for every name the config needs; norms are ones, matrices N(0, std)."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in expected_shapes(config).items():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = torch.randn(shape, generator=gen) * std
    tensors["model.embed_tokens.weight"] *= embed_scale
    return tensors


def tiny_config(**overrides) -> dict:
    """config.json dict of a tiny Llama (2 layers, 4 query / 2 kv heads, head_dim 16)."""
    d = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": True, "torch_dtype": "float32"}
    d.update(overrides)
    return d


def write_random_model(config_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """Copy config and tokenizer files of ``config_dir`` and write random ``model.safetensors``."""
    src, out = Path(config_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in _COPIED:
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    config = ModelConfig.from_dict(json.loads((out / "config.json").read_text()))
    save_file(random_state_dict(config, seed), str(out / "model.safetensors"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(write_random_model(args.config_dir, args.out_dir, args.seed))


if __name__ == "__main__":
    main()
