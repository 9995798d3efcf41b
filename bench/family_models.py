"""Random-weight models of each architecture at a realistic size (0.3-0.75 B parameters), as the
GGUF files people serve (Q4_K_M), for bench/bench_families.py. Not committed: built here once, with
llama.cpp's own converter and quantizer (the tools scripts/make_gguf_fixtures.py uses for the test
fixtures, reused from there), and cached under bench/out/family_models/.

Shapes follow the real checkpoints of each family (Qwen3-0.6B, Llama-3.2-1B scaled down, Gemma-3-1B,
Phi-3-mini scaled down, a Qwen3-MoE with 16 experts); the vocabulary is a byte-level BPE of 32,768
tokens trained here on seeded random words, so the embedding and the head cost what a 32k vocabulary
costs (its special tokens include the ones llama.cpp looks up by name for a model named phi3). Random weights decode at the same speed as trained ones: the work does not depend
on the values.

    python bench/family_models.py --llama-cpp DIR --quantize BIN [--only qwen3 gemma3] [--quant Q5_K_M]
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.make_gguf_fixtures import convert, write_tokenizer_files  # noqa: E402

OUT = ROOT / "bench" / "out" / "family_models"
QUANT = "Q4_K_M"
COMMON = dict(vocab_size=32768, max_position_embeddings=8192, bos_token_id=0, eos_token_id=2, pad_token_id=0)

#: name -> (config, model class); 0.32 (Llama) to 0.74 (Gemma 3) B parameters
FAMILIES = {
    "llama": (lambda: transformers.LlamaConfig(**COMMON, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                                               num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True),
              transformers.LlamaForCausalLM),
    "qwen3": (lambda: transformers.Qwen3Config(**COMMON, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                               num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                               tie_word_embeddings=True), transformers.Qwen3ForCausalLM),
    "gemma3": (lambda: transformers.Gemma3TextConfig(**COMMON, hidden_size=1152, intermediate_size=6912,
                                                     num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
                                                     head_dim=256, query_pre_attn_scalar=256, sliding_window=512),
               transformers.Gemma3ForCausalLM),
    "phi3": (lambda: transformers.Phi3Config(**COMMON, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                                             num_attention_heads=16, num_key_value_heads=16, sliding_window=None,
                                             tie_word_embeddings=False), transformers.Phi3ForCausalLM),
    "qwen3moe": (lambda: transformers.Qwen3MoeConfig(**COMMON, hidden_size=1024, num_hidden_layers=16,
                                                     num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                                                     num_experts=16, num_experts_per_tok=4, moe_intermediate_size=768,
                                                     norm_topk_prob=True, tie_word_embeddings=True),
                 transformers.Qwen3MoeForCausalLM),
}


SPECIALS = ["<eos>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<|endoftext|>"]


def bench_vocabulary() -> Tokenizer:
    """A byte-level BPE of exactly 32,768 tokens (ids 0-2 as the fixtures' toy vocabulary)."""
    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = list(range(26, 0, -1))
    words = ["".join(rng.choices(letters, weights=weights, k=rng.randint(2, 10))) for _ in range(120_000)]
    text = (" ".join(rng.choices(words, k=50)) for _ in range(40_000))
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=COMMON["vocab_size"], special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(text, trainer)
    assert t.get_vocab_size() == COMMON["vocab_size"], t.get_vocab_size()
    return t


def gguf_path(name: str, quant: str = QUANT) -> Path:
    return OUT / f"{name}-{quant}.gguf"


def build(name: str, llama_cpp: Path, quantize: Path, quant: str = QUANT) -> Path:
    """The family's GGUF of llama-quantize's type ``quant`` (Q4_K_M by default), built once
    (random weights, seed 0)."""
    target = gguf_path(name, quant)
    if target.exists():
        return target
    OUT.mkdir(parents=True, exist_ok=True)
    config, cls = FAMILIES[name]
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        folder = Path(tmp) / name
        torch.manual_seed(0)
        model = cls(config()).to(torch.bfloat16).eval()
        print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters", flush=True)
        model.save_pretrained(folder)
        del model
        write_tokenizer_files(folder, bench_vocabulary())
        f16 = Path(tmp) / f"{name}-F16.gguf"
        convert(llama_cpp, folder, f16, "f16")
        subprocess.run([str(quantize), str(f16), str(target), quant, "2"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"{target}: {target.stat().st_size / 2**20:.0f} MiB", flush=True)
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree (convert_hf_to_gguf.py)")
    ap.add_argument("--quantize", type=Path, required=True, help="the llama-quantize binary")
    ap.add_argument("--only", nargs="*", help=f"families (default: all of {', '.join(FAMILIES)})")
    ap.add_argument("--quant", default=QUANT, help=f"llama-quantize's type (default {QUANT}; e.g. Q5_K_M, Q6_K, Q8_0)")
    args = ap.parse_args()
    for name in args.only or FAMILIES:
        build(name, args.llama_cpp, args.quantize, args.quant)


if __name__ == "__main__":
    main()
