"""Tokenizers and chat templates rebuilt from GGUF vocabularies (runtime/model/gguf_tokenizer.py).

Oracles: llama.cpp's ``ggml-vocab-<name>.gguf`` test vectors (the ids Hugging Face ``tokenizers``
gives on the model's own tokenizer.json, tests/llamacpp_vocab.py), transformers' own GGUF
tokenizer reader where it reads that vocabulary right, and transformers' ``apply_chat_template``
for the chat templates.
"""
from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest

from llamacpp_vocab import vocab_cases, vocab_file
from sglc.wire.chat_template import derive_chat_template
from sglc_runtime.model.gguf.reader import read_gguf_metadata
from sglc_runtime.model.gguf_tokenizer import (
    BYTE_LEVEL_PRE_TOKENIZERS,
    GGUFTokenizerError,
    GGUFVocab,
    build_tokenizer,
    write_gguf_tokenizer,
)
from sglc_runtime.model.tokenizer import Tokenizer

# every vocabulary with test vectors, and whether it adds BOS (llama.cpp's rule: the file's
# add_bos_token, else yes for SentencePiece and the Llama 3 pre-tokenizer)
ORACLE_VOCABS = {
    "llama-spm": True,  # Llama 2 / Mistral v0.1: SentencePiece BPE, byte fallback, prefix space
    "phi-3": True,  # SentencePiece, control tokens eat the whitespace after them
    "gemma-4": True,  # BPE over ▁-spaced text with stored merges
    "llama-bpe": True,  # Llama 3
    "qwen2": False,
    "qwen35": False,
    "gpt-2": False,
    "starcoder": False,
    "refact": False,
    "mpt": False,
    "command-r": True,
    "falcon": False,
    "deepseek-llm": True,
    "deepseek-coder": True,
}
NFC_VOCABS = {"qwen2", "mpt", "command-r"}  # their tokenizer.json normalizes to NFC first

# code, CJK, emoji (with joiners), digits and number-like symbols, whitespace runs
CORPUS = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i); }  // loop',
    "日本語のテキストと中文字符，한국어 텍스트。",
    "emoji 🎉🚀 👩‍👩‍👧 ok ✅ 🦙",
    "Numbers: 3.14159, 1234567890, 2024-01-01, 1e-5, 0x1F, ½ ²",
    "tabs\tand\t\ttabs, spaces    inside   words\n\n\nnewlines\r\nCRLF",
    "   leading and trailing   ",
    "I'm sure they'll say we've done it; DON'T",
    "héllo wörld — naïve café",
]
# text with the vocabulary's own control tokens in it (they must stay whole), and those tokens
WITH_SPECIALS = {
    "qwen2": ("<|im_start|>user\nhi<|im_end|>\n", ["<|im_start|>", "<|im_end|>"]),
    "qwen35": ("<|im_start|>user\nhi<|im_end|>\n", ["<|im_start|>", "<|im_end|>"]),
    "llama-bpe": ("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
                  ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
    "phi-3": ("<|user|>\nhi<|end|>\n<|assistant|>\n", ["<|user|>", "<|end|>", "<|assistant|>"]),
    "gpt-2": ("a<|endoftext|>b", ["<|endoftext|>"]),
    "llama-spm": ("<s> hi</s>", ["<s>", "</s>"]),
    "gemma-4": ("<|turn>user\nhi<turn|>\n", ["<|turn>", "<turn|>"]),
}
# Where transformers' GGUF reader (5.x) builds a tokenizer that differs from the model's own
# tokenizer.json, shown by the llama.cpp vectors; these pairs are not compared with it.
TRANSFORMERS_GGUF_DIFFERS = {
    ("llama-spm", CORPUS[6]): "Metaspace(prepend first) adds no ▁ before a leading space; Llama 2's "
                              "tokenizer.json (Prepend normalizer) does: .out has ' ' -> [259]",
    ("llama-spm", WITH_SPECIALS["llama-spm"][0]): "the same: Llama 2 prepends ▁ after a special token too",
    ("phi-3", WITH_SPECIALS["phi-3"][0]): "Phi-3's tokenizer.json has rstrip on <|user|>, <|end|>, "
                                       "<|assistant|> (llama.cpp too); transformers' reader drops it",
}
TRANSFORMERS_READS = ("gpt-2", "qwen2", "qwen35", "llama-bpe", "phi-3", "llama-spm")

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there, ça va? 日本語 🎉"},
    {"role": "assistant", "content": "Oui!  Fine.\n"},
    {"role": "user", "content": "What is 2+2?"},
]
TEMPLATE_VOCABS = ("phi-3", "qwen2", "qwen35", "gemma-4", "command-r")

_folders: dict[str, Path] = {}
_tokenizers: dict[str, Tokenizer] = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(name)``: the runtime Tokenizer over the folder written for ggml-vocab-<name>.gguf."""
    root = tmp_path_factory.mktemp("gguf-tokenizers")

    def get(name: str) -> Tokenizer:
        if name not in _tokenizers:
            _folders[name] = root / name
            write_gguf_tokenizer(vocab_file(name), _folders[name])
            _tokenizers[name] = Tokenizer(_folders[name])
        return _tokenizers[name]

    yield get
    _folders.clear()
    _tokenizers.clear()
    _hf_folder_tokenizers.clear()


_hf_folder_tokenizers: dict[str, object] = {}


def _transformers_folder(name: str):
    """transformers' AutoTokenizer over the folder we wrote (its own chat-template rendering)."""
    from transformers import AutoTokenizer

    if name not in _hf_folder_tokenizers:
        _hf_folder_tokenizers[name] = AutoTokenizer.from_pretrained(str(_folders[name]))
    return _hf_folder_tokenizers[name]


def _transformers_gguf(name: str):
    """transformers' own GGUF tokenizer for the file (what ``from_pretrained(gguf_file=)`` builds)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    arch, tokenizer_dict, _ = get_gguf_tokenizer(str(vocab_file(name)))
    return convert_gguf_tokenizer(arch, tokenizer_dict)[0]


# ---------------------------------------------------------------- the llama.cpp oracle


@pytest.mark.parametrize("name", list(ORACLE_VOCABS))
def test_token_ids_equal_the_models_huggingface_tokenizer(built, name):
    """Every test text of ggml-vocab-<name> encodes (without special tokens) to its .out ids."""
    tok, cases = built(name), vocab_cases(name)
    wrong = [(text, want, tok.encode(text, add_special_tokens=False)) for text, want in cases
             if tok.encode(text, add_special_tokens=False) != want]
    assert not wrong, f"{len(wrong)}/{len(cases)} differ, first: {wrong[0]!r}"


@pytest.mark.parametrize("name", list(ORACLE_VOCABS))
def test_decode_restores_the_text(built, name):
    """decode(encode(text)) == text (NFC-normalized where the tokenizer normalizes)."""
    tok = built(name)
    for text, _ in vocab_cases(name) + [(t, None) for t in CORPUS]:
        want = unicodedata.normalize("NFC", text) if name in NFC_VOCABS else text
        if name.startswith("deepseek"):  # NOTE: their added tokens ø ö ú ... are not byte-level spelled, and
            # Hugging Face's ByteLevel decoder turns each into U+FFFD (transformers' reader too)
            want = want.translate({ord(c): "\ufffd" for c in "øöúÿõ÷ûýÀùÁþü"})
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == want, repr(text)


@pytest.mark.parametrize("name", list(ORACLE_VOCABS))
def test_bos_is_added_once_as_the_file_says(built, name):
    """add_special_tokens adds BOS where llama.cpp would; a text that starts with it keeps one."""
    tok = built(name)
    plain = tok.encode("Hello world", add_special_tokens=False)
    assert tok.encode("Hello world") == ([tok.bos_token_id] if ORACLE_VOCABS[name] else []) + plain
    assert tok.add_bos_token == ORACLE_VOCABS[name]
    if ORACLE_VOCABS[name]:
        assert tok.encode(tok.bos_token + "Hello world")[:2] != [tok.bos_token_id] * 2


def test_token_bytes_spell_the_text(built):
    """Byte-level tokens map back through GPT-2's byte table; SentencePiece ones through ▁ and
    <0xNN> (the prefix space the normalizer added is a space of the first token)."""
    for name in ("qwen2", "llama-bpe", "gemma-4", "llama-spm"):
        tok = built(name)
        for text in CORPUS:
            got = b"".join(tok.token_bytes(i) for i in tok.encode(text, add_special_tokens=False))
            assert got == (b" " if name == "llama-spm" else b"") + text.encode("utf-8"), (name, text)


@pytest.mark.parametrize("name", list(WITH_SPECIALS))
def test_control_tokens_in_text_stay_whole(built, name):
    """Control tokens written in a text become their own ids; Phi-3's eat the whitespace after."""
    tok, (text, specials) = built(name), WITH_SPECIALS[name]
    ids = tok.encode(text, add_special_tokens=False)
    assert [tok.id_to_token(i) for i in ids if i in tok.special_token_ids] == specials
    if name == "phi-3":
        assert ids == [32010] + tok.encode("hi", add_special_tokens=False) + [32007, 32001]


# ---------------------------------------------------------------- transformers' GGUF reader


@pytest.mark.parametrize("name", TRANSFORMERS_READS)
def test_token_ids_equal_transformers_gguf_reader(built, name):
    """On code, CJK, emoji, digits and whitespace runs, ids equal transformers' GGUF tokenizer
    (except TRANSFORMERS_GGUF_DIFFERS, where the .out vectors show transformers is the one off)."""
    ours, theirs = built(name), _transformers_gguf(name)
    texts = CORPUS + ([WITH_SPECIALS[name][0]] if name in WITH_SPECIALS else [])
    compared = 0
    for text in texts:
        if (name, text) in TRANSFORMERS_GGUF_DIFFERS:
            continue
        assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False).ids, \
            repr(text)
        compared += 1
    assert compared >= len(CORPUS) - 1


def test_default_model_vocabulary_builds_as_before():
    """The default model's GGUF (smollm pre-tokenizer) gives one digit per token and ChatML specials."""
    from sglc_runtime.model.default_model import find_default_gguf

    tok = build_tokenizer(GGUFVocab.from_file(find_default_gguf()))
    assert [tok.id_to_token(i) for i in tok.encode("2024", add_special_tokens=False).ids] == ["2", "0", "2", "4"]
    assert tok.encode("<|im_end|>", add_special_tokens=False).ids == [2]


@pytest.mark.parametrize("name, stops", [
    ("phi-3", ["<|endoftext|>", "<|end|>"]),
    ("qwen2", ["<|endoftext|>", "<|im_end|>"]),
    ("gemma-4", ["<eos>", "<turn|>", "<|tool_response>"]),
    ("llama-spm", ["</s>"]),
])
def test_turn_ends_the_template_writes_stop_generation(built, name, stops):
    """Stop ids are EOS plus each end-of-generation token (llama.cpp's list) that the chat template
    writes, as the models' generation_config.json lists them (Phi-3 stops at <|end|>)."""
    tok = built(name)
    assert {tok.id_to_token(i) for i in tok.stop_token_ids} == set(stops)
    assert tok.eos_token_id == tok.token_to_id(stops[0])


def test_gemma_sentencepiece_files_build_as_transformers_builds_them():
    """A SentencePiece vocabulary of a Gemma 1-3 file (merges by token order, no prefix space; no
    such vector file ships) encodes as transformers' Gemma GGUF builder does. Stand-in: the
    llama-spm vocabulary relabelled gemma3 without a prefix space."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    md = dict(read_gguf_metadata(vocab_file("llama-spm")),
              **{"general.architecture": "gemma3", "tokenizer.ggml.add_space_prefix": False})
    ours = build_tokenizer(GGUFVocab.from_metadata(md))
    theirs, _ = convert_gguf_tokenizer("gemma3", {
        "tokenizer_type": "llama", "tokens": md["tokenizer.ggml.tokens"], "scores": list(md["tokenizer.ggml.scores"]),
        "token_type": list(md["tokenizer.ggml.token_type"]), "add_prefix_space": False})
    for text in CORPUS + [t for t, _ in vocab_cases("llama-spm")]:
        assert ours.encode(text, add_special_tokens=False).ids == \
            theirs.encode(text, add_special_tokens=False).ids, repr(text)


@pytest.mark.parametrize("name", ("llama-spm", "phi-3"))
def test_metadata_reader_equals_gguf_py(name):
    """read_gguf_metadata gives every key gguf-py's GGUFReader gives, with equal values."""
    import numpy as np
    from gguf import GGUFReader

    ours = read_gguf_metadata(vocab_file(name))
    fields = {k: f for k, f in GGUFReader(str(vocab_file(name))).fields.items() if not k.startswith("GGUF.")}
    assert set(ours) == set(fields)
    for key, field in fields.items():
        want = field.contents()
        got = ours[key]
        assert (np.array_equal(np.asarray(want), got) if isinstance(got, np.ndarray) else got == want), key


def test_string_arrays_are_decoded_only_when_read(tmp_path):
    """Opening a GGUF walks its vocabulary without decoding it (a start that never reads it pays
    nothing); the first read gives every string, and a string array cut short is refused."""
    from sglc_runtime.model.gguf.reader import GGUFFormatError, GGUFReaderLite, StringArray

    reader = GGUFReaderLite(vocab_file("qwen2"))
    tokens = reader.field("tokenizer.ggml.tokens")
    assert isinstance(tokens, StringArray) and tokens._items is None
    assert reader.array_length("tokenizer.ggml.tokens") == len(tokens) > 150_000 and tokens._items is None
    from gguf import GGUFReader

    want = GGUFReader(str(vocab_file("qwen2"))).fields["tokenizer.ggml.tokens"].contents()
    assert tokens == want and tokens[-1] == want[-1] and tokens[1:3] == want[1:3]
    data = vocab_file("qwen2").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:data.index(want[100_000].encode())])  # ends inside the tokens array
    with pytest.raises(GGUFFormatError, match="truncated|past the end"):
        GGUFReaderLite(cut)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("name, model, says", [
    ("bert-bge", "bert", "tokenizer model 'bert' is not supported"),
    ("nomic-bert-moe", "t5", "tokenizer model 't5' is not supported"),
    ("aquila", "gpt2", "names no pre-tokenizer"),
    ("gpt-neox", "gpt2", "names no pre-tokenizer"),
])
def test_unsupported_vocabularies_are_refused_by_name(tmp_path, name, model, says):
    """A tokenizer that cannot be rebuilt exactly is refused naming what and listing what is supported,
    and nothing is written."""
    assert read_gguf_metadata(vocab_file(name))["tokenizer.ggml.model"] == model
    with pytest.raises(GGUFTokenizerError, match=says) as err:
        write_gguf_tokenizer(vocab_file(name), tmp_path / "out")
    assert "supported:" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_unknown_pre_tokenizer_is_refused_listing_the_supported_ones():
    """A byte-level vocabulary with a pre-tokenizer we do not build names it and every supported name."""
    md = dict(read_gguf_metadata(vocab_file("gpt-2")), **{"tokenizer.ggml.pre": "tekken"})
    with pytest.raises(GGUFTokenizerError, match="pre-tokenizer 'tekken' is not supported") as err:
        build_tokenizer(GGUFVocab.from_metadata(md))
    assert all(name in str(err.value) for name in BYTE_LEVEL_PRE_TOKENIZERS)


# ---------------------------------------------------------------- chat templates


@pytest.mark.parametrize("name", TEMPLATE_VOCABS)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_chat_template_renders_like_transformers(built, name, add_generation_prompt):
    """The GGUF's tokenizer.chat_template renders (and tokenizes) exactly as transformers'
    apply_chat_template renders it on the same folder."""
    ours = built(name)
    theirs = _transformers_folder(name)
    assert ours.chat_template == read_gguf_metadata(vocab_file(name))["tokenizer.chat_template"]
    want = theirs.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=add_generation_prompt)
    got = ours.apply_chat_template(MESSAGES, add_generation_prompt=add_generation_prompt)
    assert got == want
    assert ours.apply_chat_template(MESSAGES, add_generation_prompt=add_generation_prompt, tokenize=True) == \
        theirs(want, add_special_tokens=False).input_ids


def test_named_templates_are_kept_and_tool_use_is_picked_for_tools(built):
    """Command-R's tool_use and rag templates reach tokenizer_config.json as named templates, and
    tools select tool_use as in transformers."""
    ours = built("command-r")
    theirs = _transformers_folder("command-r")
    assert set(ours.chat_templates) == {"default", "tool_use", "rag"}
    tools = [{"name": "search", "description": "Web search", "parameter_definitions": {
        "query": {"description": "what to look for", "type": "str", "required": True}}}]
    want = theirs.apply_chat_template(MESSAGES, tools=tools, tokenize=False, add_generation_prompt=True)
    assert ours.apply_chat_template(MESSAGES, tools=tools, add_generation_prompt=True) == want
    assert "## Available Tools" in want


def test_chat_template_from_gguf_equals_transformers_gguf_loading(built):
    """transformers reading the GGUF itself gives the same template text, BOS and rendering."""
    from transformers import AutoTokenizer

    path = vocab_file("phi-3")
    theirs = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ours = built("phi-3")
    want = theirs.apply_chat_template(MESSAGES[1:], tokenize=False, add_generation_prompt=True)
    assert ours.apply_chat_template(MESSAGES[1:], add_generation_prompt=True) == want
    assert ours.encode("Hello") == theirs("Hello").input_ids


JINJA_PROBE = """\
{%- set ns = namespace(n=0) -%}
{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ pad_token | default('none') }}|
{%- for m in messages -%}
  {%- if m.role == 'skip' %}{% continue %}{% endif -%}
  {%- set ns.n = ns.n + 1 -%}
  {% generation %}[{{ m.role }}:{{ m.content | tojson }}:{{ m.reasoning_content | default('') }}]{% endgeneration %}
  {%- if 'tool_calls' in m %}TOOLCALLS{% endif -%}
  {%- if ns.n > 3 %}{% break %}{% endif -%}
{%- endfor -%}
{{ ns.n }}|{{ tools is none }}|{{ documents is none }}|{{ dict(a=1) | tojson }}|{{ {'k': 'é'} | tojson(indent=1) }}
{{- strftime_now('%Y') -}}
{%- if add_generation_prompt %}GEN{% endif -%}
{%- if messages | length > 9 %}{{ raise_exception('too many messages') }}{% endif -%}
"""


def test_jinja_environment_matches_transformers(built, tmp_path):
    """Features templates use render the same as transformers: special-token variables, tojson,
    namespace, dict, loop controls, {% generation %}, strftime_now, raise_exception, tools/documents
    defined as None, None-valued message keys dropped, reasoning under reasoning_content."""
    from jinja2.exceptions import TemplateError
    from transformers import AutoTokenizer

    built("phi-3")
    folder = tmp_path / "probe"
    shutil.copytree(_folders["phi-3"], folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(dict(cfg, chat_template=JINJA_PROBE)))
    ours, theirs = Tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    messages = [{"role": "user", "content": 'say "hi" <b>'}, {"role": "skip", "content": "x"},
                {"role": "assistant", "content": "ok", "tool_calls": None, "reasoning": "because"},
                {"role": "user", "content": "é😀"}, {"role": "user", "content": "5"},
                {"role": "user", "content": "6"}]
    for gen in (False, True):
        want = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        assert ours.apply_chat_template(messages, add_generation_prompt=gen) == want
    assert "TOOLCALLS" not in want and ":because]" in want and '"say \\"hi\\" <b>"' in want
    with pytest.raises(TemplateError, match="too many messages"):
        ours.apply_chat_template(messages * 2)
    with pytest.raises(TemplateError, match="too many messages"):
        theirs.apply_chat_template(messages * 2, tokenize=False)


@pytest.mark.parametrize("name", ("qwen2", "qwen35", "gemma-4"))
def test_roles_assemble_the_templates_text(built, name):
    """sgl.system/user/assistant wrap contents in the prefixes/suffixes derived from the model's
    template; assembled, they give exactly apply_chat_template's text."""
    tok = built(name)

    def render(messages, add_generation_prompt=False):
        return tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    # NOTE: contents without outer whitespace: Gemma 4's template strips a message (prefixes and
    # suffixes around raw content cannot express that).
    messages = [dict(m, content=m["content"].strip()) for m in MESSAGES]
    t = derive_chat_template(render)
    assert t is not None
    text = "".join(t.role_prefix[m["role"]] + m["content"] + t.role_suffix[m["role"]] for m in messages)
    assert text == render(messages)
    assert text + t.generation_prefix == render(messages, add_generation_prompt=True)
