"""Make the tiny GGUF fixtures of tests/test_gguf_architectures.py (tests/data/gguf/) with llama.cpp's own
tools: every supported architecture as a random-weight transformers model, converted by llama.cpp's
convert_hf_to_gguf.py and quantized by its llama-quantize. Not run by the tests; the files it wrote
are committed. Run it from the repository root:

    python scripts/make_gguf_fixtures.py --llama-cpp /work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        --quantize /work/llamacpp/build/bin/llama-quantize

llama.cpp: the copy vendored in the llama-cpp-python 0.3.36 sdist (ggml 0.25.3, commit 0c1e570), as
/work/llamacpp/README.txt builds it (``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36``,
the cmake configuration there, then ``ninja -C build llama-quantize``). The converter runs with its own
gguf-py first on the path. Per model:

1. the transformers model: ``torch.manual_seed(0)``, the config class below, norm weights randomised
   (+ 0.2 N(0, 1): transformers initialises them to constants), ``save_pretrained`` (float32), with a
   byte-level BPE vocabulary of exactly 400 tokens trained here on a seeded word list (ChatML specials
   and a ChatML chat template);
2. ``convert_hf_to_gguf.py MODEL --outtype f32`` (and ``--outtype f16`` for the F16 fixtures);
3. ``llama-quantize MODEL-F32.gguf MODEL-TYPE.gguf TYPE`` for the quantized ones.

Beside the GGUF files: ``MODEL.config.json`` (the transformers config) and ``MODEL.reference.json``
(the source weights' fingerprint under their Hugging Face names: each matrix's row sums, each vector
whole), so the tests check where every tensor landed without the source model.

The configs follow tests/test_model_families.py (3 layers, hidden 64, 4 heads, 2 KV heads), with what
llama.cpp's converter cannot carry left out so that the GGUF describes the same model: no sliding window
on Llama/Mistral/Mixtral/Qwen2 (not written for those architectures), no OLMoE ``clip_qkv`` (not
written), Gemma 2's ``query_pre_attn_scalar`` equal to ``head_dim`` (llama.cpp derives the scale from
the head size), Gemma 3 with 6 layers (llama.cpp's default local/global pattern of 6 is not written
either), no dense layers in Qwen3-MoE. The K-quant models are 256 wide (a K-quant block is 256 values;
narrower tensors fall back to other types). Two patches, both about the toy vocabulary: its
pre-tokenizer is declared ``gpt-2`` (it is GPT-2's byte-level split; llama.cpp names pre-tokenizers by
a hash of known tokenizers), and Gemma 2, whose converter reads only SentencePiece models, takes the
byte-level one (as Gemma 3's converter does without tokenizer.model). The converters that try SentencePiece
first (Llama's, Qwen2's) get the FileNotFoundError they get without tokenizer.model where sentencepiece is
installed (it is not here) and go on to the byte-level vocabulary.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 400
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, bos_token_id=0, eos_token_id=2, pad_token_id=0)
WIDE = dict(SMALL, hidden_size=256, intermediate_size=256, num_hidden_layers=2)
GEMMA = dict(SMALL, head_dim=16, query_pre_attn_scalar=16)
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

#: name -> (config, model class, GGUF types)
MODELS = {
    "llama": (lambda: transformers.LlamaConfig(**SMALL, tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}), transformers.LlamaForCausalLM, ["F16"]),
    "llama_wide": (lambda: transformers.LlamaConfig(**WIDE, tie_word_embeddings=True, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32}),
        transformers.LlamaForCausalLM, ["Q4_K_M", "Q6_K"]),
    "mistral": (lambda: transformers.MistralConfig(**SMALL, sliding_window=None), transformers.MistralForCausalLM,
                ["Q4_1"]),
    "mixtral": (lambda: transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2,
                                                   sliding_window=None), transformers.MixtralForCausalLM, ["Q8_0"]),
    "qwen2": (lambda: transformers.Qwen2Config(**SMALL), transformers.Qwen2ForCausalLM, ["Q5_0"]),
    "qwen3_wide": (lambda: transformers.Qwen3Config(**WIDE, head_dim=64), transformers.Qwen3ForCausalLM,
                   ["Q4_K_M", "Q5_K_M"]),
    "gemma2": (lambda: transformers.Gemma2Config(**GEMMA, sliding_window=7, attn_logit_softcapping=8.0,
                                                 final_logit_softcapping=2.0), transformers.Gemma2ForCausalLM,
               ["Q5_1"]),
    "gemma3": (lambda: transformers.Gemma3TextConfig(**dict(GEMMA, num_hidden_layers=6), sliding_window=7,
                                                     rope_parameters={
                                                         "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                            "rope_theta": 1e6},
                                                         "sliding_attention": {"rope_type": "default",
                                                                               "rope_theta": 1e4}}),
               transformers.Gemma3ForCausalLM, ["Q8_0"]),
    "phi3": (lambda: transformers.Phi3Config(**SMALL, sliding_window=11,
                                             original_max_position_embeddings=16, rope_parameters={
                                                 "rope_type": "longrope", "rope_theta": 1e4,
                                                 "partial_rotary_factor": 0.5,
                                                 "short_factor": [1.0 + 0.05 * i for i in range(4)],
                                                 "long_factor": [1.5 + 0.2 * i for i in range(4)]}),
             transformers.Phi3ForCausalLM, ["Q4_0"]),
    "olmoe": (lambda: transformers.OlmoeConfig(**dict(SMALL, num_key_value_heads=4), num_experts=6,
                                               num_experts_per_tok=2), transformers.OlmoeForCausalLM, ["Q4_1"]),
    "qwen3moe": (lambda: transformers.Qwen3MoeConfig(**SMALL, head_dim=16, num_experts=6, num_experts_per_tok=2,
                                                     moe_intermediate_size=32, norm_topk_prob=True),
                 transformers.Qwen3MoeForCausalLM, ["Q4_0"]),
}


def reference(folder: Path) -> dict:
    """Row sums of every matrix (3-D: of every row of every expert) and every vector of the checkpoint."""
    from safetensors.torch import load_file

    sums, vectors = {}, {}
    for name, t in sorted(load_file(str(folder / "model.safetensors")).items()):
        values = t.double().sum(-1).reshape(-1) if t.dim() > 1 else t.double()
        (sums if t.dim() > 1 else vectors)[name] = [float(f"{x:.7g}") for x in values.tolist()]
    return {"row_sums": sums, "vectors": vectors}


def toy_vocabulary() -> Tokenizer:
    """A byte-level BPE of exactly VOCAB tokens (ids 0-2: <eos>, <|im_start|>, <|im_end|>)."""
    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = ["".join(rng.choices(letters, weights=range(26, 0, -1), k=rng.randint(2, 8))) for _ in range(600)]
    text = [" ".join(rng.choices(words, k=40)) for _ in range(200)]
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<eos>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator(text, trainer)
    assert t.get_vocab_size() == VOCAB, t.get_vocab_size()
    return t


def save_model(name: str, folder: Path, tokenizer: Tokenizer) -> None:
    config, cls, _ = MODELS[name]
    torch.manual_seed(0)
    model = cls(config()).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(folder)
    write_tokenizer_files(folder, tokenizer)


def write_tokenizer_files(folder: Path, tokenizer: Tokenizer) -> None:
    """The toy vocabulary as a Hugging Face tokenizer (tokenizer.json + config with the ChatML template)."""
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "eos_token": "<|im_end|>", "bos_token": "<eos>", "unk_token": "<eos>",
        "pad_token": "<eos>",
        "add_bos_token": False, "chat_template": CHATML}, indent=2))


CONVERT = """
import sys
sys.argv = sys.argv[1:]
sys.path[:0] = [{llama_cpp!r}, {gguf_py!r}]
from conversion.base import TextModel
from conversion.gemma import Gemma2Model
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"  # the toy vocabulary: GPT-2's byte-level split
def no_tokenizer_model(self):  # what the converter raises without tokenizer.model (once sentencepiece imports)
    raise FileNotFoundError(self.dir_model / "tokenizer.model")
TextModel._create_vocab_sentencepiece = no_tokenizer_model
Gemma2Model.set_vocab = lambda self: self._set_vocab_gpt2()  # reads SentencePiece models only
import runpy
runpy.run_path({script!r}, run_name="__main__")
"""


def convert(llama_cpp: Path, folder: Path, out: Path, outtype: str) -> None:
    code = CONVERT.format(llama_cpp=str(llama_cpp), gguf_py=str(llama_cpp / "gguf-py"),
                          script=str(llama_cpp / "convert_hf_to_gguf.py"))
    subprocess.run([sys.executable, "-c", code, "convert", str(folder), "--outtype", outtype, "--outfile", str(out)],
                   check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree (convert_hf_to_gguf.py)")
    ap.add_argument("--quantize", type=Path, required=True, help="the llama-quantize binary")
    ap.add_argument("--out", type=Path, default=Path("tests/data/gguf"))
    ap.add_argument("--only", nargs="*", help="model names (default: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = toy_vocabulary()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or MODELS:
            folder = Path(tmp) / name
            save_model(name, folder, tokenizer)
            shutil.copyfile(folder / "config.json", args.out / f"{name}.config.json")
            (args.out / f"{name}.reference.json").write_text(json.dumps(reference(folder)))
            f32 = Path(tmp) / f"{name}-F32.gguf"
            convert(args.llama_cpp, folder, f32, "f32")
            for kind in MODELS[name][2]:
                target = args.out / f"{name}-{kind}.gguf"
                if kind == "F16":
                    convert(args.llama_cpp, folder, target, "f16")
                else:
                    subprocess.run([str(args.quantize), str(f32), str(target), kind], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                print(f"{target}: {target.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
