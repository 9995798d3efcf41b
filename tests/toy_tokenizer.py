"""A tiny byte-level BPE tokenizer trained in-process (id 0 is ``<eos>``): stop and detokenizer
tests need real multi-byte token splits, not the default model."""
from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = 0


def train_toy_tokenizer() -> Tokenizer:
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator(["the quick brown fox jumps over the lazy dog. hello world, line one two"] * 20, trainer)
    assert t.token_to_id("<eos>") == EOS
    return t
