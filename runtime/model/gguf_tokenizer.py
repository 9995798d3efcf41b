"""Hugging Face tokenizer files (tokenizer.json + tokenizer_config.json) from a GGUF's vocabulary.

A GGUF carries its tokenizer as metadata under llama.cpp's names: ``tokenizer.ggml.model`` (the
algorithm), ``tokenizer.ggml.pre`` (which pre-tokenizer a byte-level vocabulary was trained with,
named by llama.cpp's convert_hf_to_gguf.py from a hash of the original tokenizer), the tokens,
their types, scores and merges, the special ids and flags, and ``tokenizer.chat_template``. This
module rebuilds the ``tokenizers.Tokenizer`` that the model's own Hugging Face tokenizer.json
describes, so that token ids equal Hugging Face ``tokenizers`` on the same model:

- ``gpt2`` (byte-level BPE): the vocabulary and merges as stored; the normalizer and pre-tokenizer
  of the original tokenizer.json by ``tokenizer.ggml.pre`` (:data:`BYTE_LEVEL_PRE_TOKENIZERS`);
- ``llama`` (SentencePiece BPE: Llama 2, Mistral v0.1, Phi-3, Gemma 1-3): BPE with byte fallback,
  merges recovered from the scores the way transformers' sentencepiece converter does, spaces
  written as ``▁`` by a normalizer that also prepends one when ``add_space_prefix`` (llama.cpp's
  default for SPM) — the shape of those models' shipped tokenizer.json ("legacy" Llama);
- ``gemma4`` (SentencePiece-style BPE with stored merges): spaces as ``▁``, no prefix space.

The oracle is llama.cpp's ``models/ggml-vocab-*.gguf`` with their ``.inp``/``.out`` test vectors
(the ids Hugging Face ``tokenizers`` gives, without special tokens) — tests/test_gguf_tokenizer.py.

BOS/EOS: where the file says to add them (``tokenizer.ggml.add_bos_token``, else llama.cpp's
default for the vocabulary), tokenizer.json's post-processor adds them (a TemplateProcessing, as
Llama 3's own tokenizer.json does) and tokenizer_config.json says so; the runtime
:class:`~.tokenizer.Tokenizer` adds them once (a chat template's ``{{ bos_token }}`` is not doubled).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .gguf.reader import read_gguf_metadata

#: bump when the files written change; folders holding an older version are rebuilt
TOKENIZER_FILES_VERSION = 3  # 3: Phi-3's rstrip only on its SentencePiece vocabulary

# llama.cpp token types (tokenizer.ggml.token_type)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_SPACE = "\u2581"  # SentencePiece's visible space

# Pre-tokenizer regexes, spelled as in the models' own tokenizer.json (Oniguruma syntax).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# NOTE: DeepSeek's character classes are written as escapes: an editor's Unicode normalization would
# silently turn some of them (KELVIN SIGN, OHM SIGN, Greek with oxia) into other characters.
_DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+"
)
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"


@dataclass(frozen=True)
class _ByteLevelPre:
    """One family's byte-level pre-tokenization, as its original tokenizer.json spells it.

    ``steps`` run in order (a ``tokenizers`` pre-tokenizer Sequence): ``("split", regex)`` keeps
    each match as a piece, ``("digits", individual)``, ``("punct",)`` (runs of punctuation), and
    ``("bytes", use_regex)``: the byte-level step (with or without GPT-2's own word regex).
    """

    steps: tuple[tuple, ...]
    nfc: bool = False  # an NFC normalizer first
    ignore_merges: bool = False  # a word that is itself a token is taken whole (Llama 3)


_GPT2 = _ByteLevelPre((("bytes", True),))
_DIGITS = _ByteLevelPre((("digits", True), ("bytes", True)))
_LLAMA3 = _ByteLevelPre((("split", _LLAMA3_SPLIT), ("bytes", False)), ignore_merges=True)
_QWEN2 = _ByteLevelPre((("split", _QWEN2_SPLIT), ("bytes", False)), nfc=True)
_QWEN35 = _ByteLevelPre((("split", _QWEN35_SPLIT), ("bytes", False)))  # NOTE: no NFC (the .out says so)
_MPT = _ByteLevelPre((("bytes", True),), nfc=True)  # GPT-NeoX-20B's tokenizer
_COMMAND_R = _ByteLevelPre((("digits", True), ("bytes", True)), nfc=True)
_FALCON = _ByteLevelPre((("punct",), ("bytes", True), ("digits", False), ("split", r"[0-9][0-9][0-9]")))
_DEEPSEEK_LLM = _ByteLevelPre((("split", r"[\r\n]"), ("split", _DEEPSEEK_LETTERS),
                               ("split", _DEEPSEEK_PUNCT), ("split", r"\s+$"),
                               ("split", _CJK), ("digits", False), ("bytes", False)))
_DEEPSEEK_CODER = _ByteLevelPre((("split", r"[\r\n]"), ("split", r"\s?\p{L}+"), ("split", r"\s?\p{P}+"),
                                 ("split", _CJK), ("digits", True), ("bytes", False)))

#: ``tokenizer.ggml.pre`` names this module builds, by family (names llama.cpp gives the same split)
BYTE_LEVEL_PRE_TOKENIZERS: dict[str, _ByteLevelPre] = {
    "llama3": _LLAMA3, "llama-v3": _LLAMA3, "llama-bpe": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2,
    "qwen35": _QWEN35,
    "gpt2": _GPT2, "gpt-2": _GPT2, "phi-2": _GPT2,
    "smollm": _DIGITS, "starcoder": _DIGITS, "refact": _DIGITS,
    "mpt": _MPT,
    "command-r": _COMMAND_R,
    "falcon": _FALCON,
    "deepseek-llm": _DEEPSEEK_LLM,
    "deepseek-coder": _DEEPSEEK_CODER,
}
#: ``tokenizer.ggml.model`` values this module builds
SUPPORTED_TOKENIZER_MODELS = ("gpt2", "llama", "gemma4")
# SentencePiece vocabularies whose merges follow the file's token order, not the scores
# (transformers' GGUF reader found this for Gemma 1-3; their scores do not follow the merge order).
_MERGES_BY_POSITION = {"gemma", "gemma2", "gemma3"}
_PLACEHOLDER = re.compile(r"\[PAD\d+\]")
# Tokens llama.cpp ends generation on by their text (llama-vocab.cpp's end-of-generation list).
_END_OF_GENERATION = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                      "<EOT>", "<|end_of_text|>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>")


class GGUFTokenizerError(ValueError):
    """The GGUF's tokenizer cannot be rebuilt (unsupported model or pre-tokenizer, bad metadata)."""


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer metadata of one GGUF (``tokenizer.ggml.*`` and ``tokenizer.chat_template``)."""

    model: str
    pre: str | None
    architecture: str
    name: str
    tokens: list[str]
    token_types: np.ndarray
    scores: np.ndarray | None
    merges: list[str] | None
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    eot_id: int | None
    eom_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None
    named_chat_templates: dict[str, str]  # tokenizer.chat_template.<name> (Command-R: tool_use, rag)
    context_length: int | None

    @classmethod
    def from_metadata(cls, md: dict[str, Any]) -> "GGUFVocab":
        """Read the tokenizer keys, with llama.cpp's defaults where the file is silent."""
        model = md.get("tokenizer.ggml.model")
        if model is None or "tokenizer.ggml.tokens" not in md:
            raise GGUFTokenizerError("the GGUF holds no tokenizer (no tokenizer.ggml.model / tokens)")
        tokens = list(md["tokenizer.ggml.tokens"])
        types = np.asarray(md.get("tokenizer.ggml.token_type", np.full(len(tokens), _NORMAL)), dtype=np.int64)
        if len(types) != len(tokens):
            raise GGUFTokenizerError(f"{len(tokens)} tokens but {len(types)} token types")
        pre = md.get("tokenizer.ggml.pre")
        arch = str(md.get("general.architecture", ""))

        def tid(key: str) -> int | None:
            v = md.get(f"tokenizer.ggml.{key}")
            return None if v is None or not 0 <= int(v) < len(tokens) else int(v)

        # NOTE: llama.cpp's defaults (llama-vocab.cpp): SPM adds BOS and a prefix space; the Llama 3
        # pre-tokenizer adds BOS; other BPE vocabularies add neither. The file's keys override them.
        spm = model == "llama"
        add_bos = spm or (model == "gpt2" and pre is not None and BYTE_LEVEL_PRE_TOKENIZERS.get(pre) is _LLAMA3)
        scores = md.get("tokenizer.ggml.scores")
        return cls(
            model=str(model),
            pre=None if pre is None else str(pre),
            architecture=arch,
            name=str(md.get("general.name", "")),
            tokens=tokens,
            token_types=types,
            scores=None if scores is None else np.asarray(scores, dtype=np.float64),
            merges=None if "tokenizer.ggml.merges" not in md else list(md["tokenizer.ggml.merges"]),
            bos_id=tid("bos_token_id"),
            eos_id=tid("eos_token_id"),
            unk_id=tid("unknown_token_id"),
            pad_id=tid("padding_token_id"),
            eot_id=tid("eot_token_id"),
            eom_id=tid("eom_token_id"),
            add_bos=bool(md.get("tokenizer.ggml.add_bos_token", add_bos)),
            add_eos=bool(md.get("tokenizer.ggml.add_eos_token", False)),
            add_space_prefix=bool(md.get("tokenizer.ggml.add_space_prefix", spm)),
            chat_template=md.get("tokenizer.chat_template"),
            named_chat_templates={name: md[f"tokenizer.chat_template.{name}"]
                                  for name in md.get("tokenizer.chat_templates", [])
                                  if f"tokenizer.chat_template.{name}" in md},
            context_length=md.get(f"{arch}.context_length"),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> "GGUFVocab":
        """The tokenizer metadata of the GGUF at ``path`` (its tensors are not read)."""
        return cls.from_metadata(read_gguf_metadata(path))

    def token(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.tokens[token_id]

    def stop_ids(self) -> list[int]:
        """Ids that end generation: EOS (first), the file's EOT/EOM, and each token llama.cpp ends
        generation on that the chat template writes (a turn's end: Phi-3's ``<|end|>``, Qwen's
        ``<|im_end|>`` in a file whose EOS is ``<|endoftext|>``) — what the models' own
        generation_config.json lists."""
        ids = [i for i in (self.eos_id, self.eot_id, self.eom_id) if i is not None]
        templates = [t for t in (self.chat_template, *self.named_chat_templates.values()) if t]
        ends = set(_END_OF_GENERATION)
        ids += [i for i, text in enumerate(self.tokens) if text in ends and any(text in t for t in templates)]
        return list(dict.fromkeys(ids))


# ---------------------------------------------------------------------------------- building


def check_supported(vocab: GGUFVocab) -> None:
    """Raise :class:`GGUFTokenizerError` naming what is unsupported and listing what is."""
    if vocab.model not in SUPPORTED_TOKENIZER_MODELS:
        raise GGUFTokenizerError(
            f"GGUF tokenizer model {vocab.model!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_TOKENIZER_MODELS)}")
    if vocab.model == "gpt2" and vocab.pre not in BYTE_LEVEL_PRE_TOKENIZERS:
        what = "names no pre-tokenizer (tokenizer.ggml.pre)" if vocab.pre in (None, "default") else \
            f"pre-tokenizer {vocab.pre!r} is not supported"
        raise GGUFTokenizerError(
            f"GGUF byte-level BPE tokenizer: {what}; supported: {', '.join(sorted(BYTE_LEVEL_PRE_TOKENIZERS))}")
    if vocab.model in ("gpt2", "gemma4") and vocab.merges is None:
        raise GGUFTokenizerError(f"GGUF {vocab.model!r} tokenizer has no tokenizer.ggml.merges")
    if vocab.model == "llama" and vocab.scores is None and vocab.architecture not in _MERGES_BY_POSITION:
        raise GGUFTokenizerError("GGUF SentencePiece tokenizer has no tokenizer.ggml.scores to rank merges by")
    if len(set(vocab.tokens)) != len(vocab.tokens):
        raise GGUFTokenizerError("GGUF vocabulary spells two tokens the same; ids cannot be kept")


def build_tokenizer(vocab: GGUFVocab):
    """The ``tokenizers.Tokenizer`` equivalent to the model's Hugging Face tokenizer.json."""
    check_supported(vocab)
    if vocab.model == "gpt2":
        tok = _byte_level(vocab)
    else:
        tok = _sentencepiece(vocab)
    _add_tokens(tok, vocab)
    _set_post_processor(tok, vocab)
    if tok.get_vocab_size(with_added_tokens=True) != len(vocab.tokens):
        raise GGUFTokenizerError(
            f"tokenizer has {tok.get_vocab_size(with_added_tokens=True)} ids, the GGUF {len(vocab.tokens)}")
    return tok


def _byte_level(vocab: GGUFVocab):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    spec = BYTE_LEVEL_PRE_TOKENIZERS[vocab.pre]
    merges = [_merge_pair(m) for m in vocab.merges]
    tok = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(vocab.tokens)}, merges=merges,
                               fuse_unk=False, byte_fallback=False, ignore_merges=spec.ignore_merges))
    if spec.nfc:
        tok.normalizer = normalizers.NFC()
    steps = []
    for step in spec.steps:
        if step[0] == "split":
            steps.append(pre_tokenizers.Split(Regex(step[1]), behavior="isolated", invert=False))
        elif step[0] == "digits":
            steps.append(pre_tokenizers.Digits(individual_digits=step[1]))
        elif step[0] == "punct":
            steps.append(pre_tokenizers.Punctuation(behavior="contiguous"))
        else:
            steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=step[1]))
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _set_post_processor(tok, vocab: GGUFVocab) -> None:
    """BOS/EOS around a text when the file says to add them (Llama 3's tokenizer.json does this with
    the same TemplateProcessing), so that transformers, reading the folder, adds them too."""
    from tokenizers import processors

    bos = vocab.token(vocab.bos_id) if vocab.add_bos else None
    eos = vocab.token(vocab.eos_id) if vocab.add_eos else None
    steps = [tok.post_processor] if tok.post_processor is not None else []
    if bos is not None or eos is not None:
        ends = [(t, i) for t, i in ((bos, vocab.bos_id), (eos, vocab.eos_id)) if t is not None]
        single = " ".join(([f"{bos}:0"] if bos else []) + ["$A:0"] + ([f"{eos}:0"] if eos else []))
        pair = single + " " + " ".join(([f"{bos}:1"] if bos else []) + ["$B:1"] + ([f"{eos}:1"] if eos else []))
        steps.append(processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(dict(ends).items())))
    if len(steps) > 1:
        tok.post_processor = processors.Sequence(steps)
    elif steps:
        tok.post_processor = steps[0]


def _merge_pair(merge: str) -> tuple[str, str]:
    """``"a b"`` -> ``("a", "b")``; the separator is the first space after the first character, as
    llama.cpp reads it (a left half may itself be a space)."""
    i = merge.find(" ", 1)
    if i < 0:
        raise GGUFTokenizerError(f"GGUF merge {merge!r} has no separating space")
    return merge[:i], merge[i + 1:]


def _sentencepiece(vocab: GGUFVocab):
    """SentencePiece BPE (``llama``) and Gemma 4's BPE (``gemma4``): byte fallback, ``▁`` spaces."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    tokens = _respell_spaces(vocab.tokens)
    ids = {s: i for i, s in enumerate(tokens)}
    if vocab.merges is not None:
        merges = [_merge_pair(m) for m in vocab.merges]
    else:
        merges = _spm_merges(tokens, vocab.scores, by_position=vocab.architecture in _MERGES_BY_POSITION)
    unk = vocab.token(vocab.unk_id)
    tok = Tokenizer(models.BPE(vocab=ids, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    prefix = vocab.add_space_prefix and vocab.model == "llama"
    steps = [normalizers.Prepend(_SPACE)] if prefix else []
    steps.append(normalizers.Replace(" ", _SPACE))
    tok.normalizer = normalizers.Sequence(steps) if len(steps) > 1 else steps[0]
    dec = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        dec.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(dec)
    return tok


def _respell_spaces(tokens: list[str]) -> list[str]:
    """Tokens stored as runs of real spaces (Gemma's files) spelled with ``▁``, as SentencePiece does.

    NOTE: a SentencePiece vocabulary never holds a literal space (the normalizer has replaced every
    one with ``▁`` before lookup), so such a token could otherwise never be produced.
    """
    return [_SPACE * len(t) if t and " " in t and not t.strip() else t for t in tokens]


def _spm_merges(tokens: list[str], scores: np.ndarray | None, by_position: bool) -> list[tuple[str, str]]:
    """The merges SentencePiece's BPE applies, best first: every split of a token into two tokens,
    ranked by the token's score (or its position), then by the two halves' ids — how transformers'
    sentencepiece converter wrote the shipped tokenizer.json files."""
    ids = {s: i for i, s in enumerate(tokens)}
    found = []
    for i, piece in enumerate(tokens):
        rank = i if by_position else -float(scores[i])
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            li, ri = ids.get(left), ids.get(right)
            if li is not None and ri is not None:
                found.append((rank, i, li, ri, left, right))
    found.sort(key=lambda m: m[:4])
    return [(m[4], m[5]) for m in found]


def _added_token_flags(vocab: GGUFVocab, text: str) -> dict[str, bool]:
    """lstrip/rstrip of a special token. Phi-3's tokenizer.json eats the whitespace after its
    control tokens except ``<unk>``, ``<s>`` and ``<|endoftext|>`` (llama.cpp sets the same)."""
    # NOTE: only Phi-3's SentencePiece vocabulary does. llama.cpp decides by the model's name alone,
    # but a byte-level vocabulary in a file named phi-3/phi3 (Phi-4 is arch phi3 too; our phi3
    # fixture) comes from a tokenizer.json without rstrip: transformers' GGUF reader and that model's
    # own tokenizer keep the newline after <|im_end|> that the chat template writes.
    phi3 = vocab.model == "llama" and (vocab.architecture == "phi3" or any(
        n in vocab.name.lower() for n in ("phi-3", "phi3")))
    return {"lstrip": False, "rstrip": phi3 and text not in ("<unk>", "<s>", "<|endoftext|>")}


def _added(vocab: GGUFVocab) -> list[tuple[int, str, bool]]:
    """``(id, text, special)`` of the tokens matched whole in text: control and unknown tokens
    (special), user-defined ones (not special). Padding placeholders (``[PAD151646]``, written by
    llama.cpp to fill the embedding rows) exist in no tokenizer and stay unreachable."""
    out = []
    for i, (text, ty) in enumerate(zip(vocab.tokens, vocab.token_types.tolist())):
        if ty not in (_UNKNOWN, _CONTROL, _USER_DEFINED) or _PLACEHOLDER.fullmatch(text):
            continue
        out.append((i, text, ty != _USER_DEFINED))
    return out


def _add_tokens(tok, vocab: GGUFVocab) -> None:
    from tokenizers import AddedToken

    special, user = [], []
    for _i, text, is_special in _added(vocab):
        token = AddedToken(text, special=is_special, normalized=False, **_added_token_flags(vocab, text))
        (special if is_special else user).append(token)
    tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)


# ---------------------------------------------------------------------------------- writing


def tokenizer_config(vocab: GGUFVocab) -> dict[str, Any]:
    """tokenizer_config.json: special tokens, BOS/EOS flags, the chat template, added tokens."""
    added = {}
    for i, text, is_special in _added(vocab):
        added[str(i)] = {"content": text, "special": is_special, "normalized": False, "single_word": False,
                         **_added_token_flags(vocab, text)}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": vocab.add_bos,
        "add_eos_token": vocab.add_eos,
        "bos_token": vocab.token(vocab.bos_id),
        "eos_token": vocab.token(vocab.eos_id),
        "unk_token": vocab.token(vocab.unk_id),
        "pad_token": vocab.token(vocab.pad_id),
        "chat_template": _chat_template_entry(vocab),
        "model_max_length": int(vocab.context_length or 2048),
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": added,
        "sglc_gguf_tokenizer": {"model": vocab.model, "pre": vocab.pre, "version": TOKENIZER_FILES_VERSION},
    }


def _chat_template_entry(vocab: GGUFVocab) -> str | list[dict[str, str]] | None:
    """The template string, or Hugging Face's list of named templates when the GGUF has several."""
    if not vocab.named_chat_templates:
        return vocab.chat_template
    named = {"default": vocab.chat_template} if vocab.chat_template is not None else {}
    named.update(vocab.named_chat_templates)
    return [{"name": name, "template": template} for name, template in named.items()]


def write_tokenizer_files(vocab: GGUFVocab, folder: str | Path, tok=None) -> None:
    """Write tokenizer.json, tokenizer_config.json and generation_config.json for ``vocab`` into
    ``folder`` (which must exist).

    ``tok`` is ``build_tokenizer(vocab)`` when the caller has built it already.
    """
    folder = Path(folder)
    (tok or build_tokenizer(vocab)).save(str(folder / "tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", tokenizer_config(vocab))
    _write_json(folder / "generation_config.json", generation_config(vocab))


def generation_config(vocab: GGUFVocab) -> dict[str, Any]:
    """generation_config.json: BOS, PAD and the ids that end generation (:meth:`GGUFVocab.stop_ids`)."""
    stops = vocab.stop_ids()
    out = {"bos_token_id": vocab.bos_id, "eos_token_id": stops[0] if len(stops) == 1 else (stops or None),
           "pad_token_id": vocab.pad_id}
    return {k: v for k, v in out.items() if v is not None}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_gguf_tokenizer(gguf_path: str | Path, folder: str | Path) -> GGUFVocab:
    """Write the tokenizer files (:func:`write_tokenizer_files`) for the GGUF at ``gguf_path`` into
    ``folder`` (created if missing). Only the file's metadata is read, never its tensors.

    Raises :class:`GGUFTokenizerError` for a tokenizer this module cannot rebuild, before writing
    anything. Returns the vocabulary read.
    """
    vocab = GGUFVocab.from_file(gguf_path)
    tok = build_tokenizer(vocab)
    Path(folder).mkdir(parents=True, exist_ok=True)
    write_tokenizer_files(vocab, folder, tok)
    return vocab
