"""Tokenizer: a model folder's tokenizer.json (``tokenizers``), its special tokens, stop tokens,
chat template (rendered with jinja2 like transformers does) and each token's raw bytes."""
from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from tokenizers import Tokenizer as _HFTokenizer


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars)))


_UNICODE_TO_BYTE = {c: b for b, c in bytes_to_unicode().items()}


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _token_text(value: Any) -> str | None:
    """A special token from tokenizer_config.json: a string or an AddedToken-like dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    """Text <-> token ids for one model folder.

    Attributes:
        bos_token_id, eos_token_id, pad_token_id: ids (or None) from tokenizer_config.json.
        stop_token_ids: ids that end generation: the EOS of tokenizer_config.json plus every
            ``eos_token_id`` of generation_config.json / config.json.
        chat_template: the jinja2 template string, or None.
    """

    def __init__(self, path: str | Path) -> None:
        folder = Path(path)
        file = folder / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json in model folder {str(folder)!r}")
        self.path = folder
        self._tok = _HFTokenizer.from_file(str(file))
        cfg = _read_json(folder / "tokenizer_config.json")
        gen = _read_json(folder / "generation_config.json")
        model_cfg = _read_json(folder / "config.json")
        self.bos_token = _token_text(cfg.get("bos_token"))
        self.eos_token = _token_text(cfg.get("eos_token"))
        self.pad_token = _token_text(cfg.get("pad_token"))
        self.bos_token_id = self._id_or_none(self.bos_token, model_cfg.get("bos_token_id"))
        self.eos_token_id = self._id_or_none(self.eos_token, model_cfg.get("eos_token_id"))
        self.pad_token_id = self._id_or_none(self.pad_token, None)
        self.unk_token = _token_text(cfg.get("unk_token"))
        self.add_bos_token = bool(cfg.get("add_bos_token", False))
        self.add_eos_token = bool(cfg.get("add_eos_token", False))
        stops: set[int] = set()
        for source in (gen.get("eos_token_id"), model_cfg.get("eos_token_id"), self.eos_token_id):
            if isinstance(source, int):
                stops.add(source)
            elif isinstance(source, list):
                stops.update(int(s) for s in source)
        self.stop_token_ids: frozenset[int] = frozenset(stops)
        template = cfg.get("chat_template")
        if template is None and (folder / "chat_template.jinja").is_file():
            template = (folder / "chat_template.jinja").read_text()
        named: dict[str, str] = {}
        if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        self.chat_template: str | None = template
        #: every named template (``tool_use``, ``rag`` ...) where the config lists several
        self.chat_templates: dict[str, str] = named
        self._compiled: dict[str, Any] = {}

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "Tokenizer":
        """Same as ``Tokenizer(path)``."""
        return cls(path)

    def _id_or_none(self, token: str | None, fallback: Any) -> int | None:
        if token is not None:
            tid = self._tok.token_to_id(token)
            if tid is not None:
                return tid
        if isinstance(fallback, list):
            fallback = fallback[0] if fallback else None
        return int(fallback) if fallback is not None else None

    # ------------------------------------------------------------------ text <-> ids
    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in the text (``<|im_start|>``) stay whole.

        ``add_special_tokens`` adds what tokenizer.json's post-processor puts around a text (e.g.
        Llama 3's ``<|begin_of_text|>``) and the BOS/EOS that tokenizer_config.json's
        ``add_bos_token``/``add_eos_token`` ask for, like transformers — except that ids already
        at the start (end), as a chat template writes ``{{ bos_token }}``, are not added twice
        (llama.cpp's server and SGLang tokenize a rendered chat without adding them).
        """
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if not add_special_tokens:
            return ids
        prefix, suffix = self._special_around
        if prefix and ids[:len(prefix)] != prefix:
            ids = prefix + ids
        if suffix and ids[len(ids) - len(suffix):] != suffix:
            ids = ids + suffix
        return ids

    @cached_property
    def _special_around(self) -> tuple[list[int], list[int]]:
        """``(prefix, suffix)``: the ids ``add_special_tokens`` puts before and after a text."""
        plain = self._tok.encode("a", add_special_tokens=False).ids
        full = self._tok.encode("a", add_special_tokens=True).ids
        prefix, suffix = [], []
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                prefix, suffix = full[:start], full[start + len(plain):]
                break
        if self.add_bos_token and self.bos_token_id is not None and self.bos_token_id not in prefix:
            prefix = [self.bos_token_id] + prefix
        if self.add_eos_token and self.eos_token_id is not None and self.eos_token_id not in suffix:
            suffix = suffix + [self.eos_token_id]
        return prefix, suffix

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (invalid UTF-8 becomes U+FFFD, as in transformers)."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """Id of a vocabulary entry (in its vocabulary spelling), or None."""
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """Vocabulary spelling of an id (byte-level tokens use GPT-2's byte alphabet)."""
        return self._tok.id_to_token(token_id)

    @cached_property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of added tokens marked special (control tokens such as ``<|im_end|>``)."""
        return frozenset(
            i for i, a in self._tok.get_added_tokens_decoder().items() if a.special
        )

    # ------------------------------------------------------------------ bytes
    @cached_property
    def _decoder_kind(self) -> str:
        """"byte_level", "sentencepiece" (▁ and <0xNN> byte fallback) or "other"."""
        def kinds(node: Any) -> set[str]:
            if not isinstance(node, dict):
                return set()
            found = {node.get("type", "")}
            for child in node.get("decoders", []) or []:
                found |= kinds(child)
            return found

        decoder = self._tok.decoder
        found = kinds(json.loads(decoder.__getstate__()) if decoder is not None else None)
        if "ByteLevel" in found:
            return "byte_level"
        if found & {"ByteFallback", "Metaspace", "Replace"}:
            return "sentencepiece"
        return "other"

    @cached_property
    def all_token_bytes(self) -> list[bytes]:
        """``all_token_bytes[i]`` is the exact bytes token ``i`` contributes to decoded text.

        Special tokens give their text's UTF-8; byte-level tokens map each character back
        through GPT-2's table; sentencepiece tokens map ``▁`` to a space and ``<0xNN>`` to
        that byte. A token may be an incomplete UTF-8 sequence.
        """
        added = {i: a.content for i, a in self._tok.get_added_tokens_decoder().items()}
        kind = self._decoder_kind
        out: list[bytes] = []
        for i in range(self.vocab_size):
            piece = self._tok.id_to_token(i)
            if piece is None:
                out.append(b"")
            elif i in added:
                out.append(added[i].encode("utf-8"))
            elif kind == "byte_level" and all(ch in _UNICODE_TO_BYTE for ch in piece):
                out.append(bytes(_UNICODE_TO_BYTE[ch] for ch in piece))
            elif kind == "sentencepiece":
                if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                    out.append(bytes([int(piece[3:5], 16)]))
                else:
                    out.append(piece.replace("\u2581", " ").encode("utf-8"))
            else:
                out.append(self._tok.decode([i], skip_special_tokens=False).encode("utf-8"))
        return out

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes of one token (see :attr:`all_token_bytes`)."""
        return self.all_token_bytes[token_id]

    # ------------------------------------------------------------------ chat
    def _compiled_template(self, tools: Any = None):
        """The default template, or ``tool_use`` when tools are given and the config names one
        (transformers' choice)."""
        if self.chat_template is None:
            raise ValueError(f"the tokenizer in {str(self.path)!r} has no chat_template")
        name = "tool_use" if tools is not None and "tool_use" in self.chat_templates else "default"
        if name not in self._compiled:
            self._compiled[name] = compile_chat_template(
                self.chat_templates["tool_use"] if name == "tool_use" else self.chat_template)
        return self._compiled[name]

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = False,
        tokenize: bool = False,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str | list[int]:
        """Render ``messages`` (``[{"role": ..., "content": ...}]``) with the chat template, as
        transformers' ``apply_chat_template`` does: the same jinja environment, the special tokens
        (``bos_token``, ``eos_token``, ``unk_token``, ``pad_token``; those the tokenizer has) as
        variables, ``tools``/``documents`` defined (None unless given), message keys whose value is
        None dropped, and a message's reasoning under ``reasoning_content`` and ``thinking`` too.

        Returns the prompt text, or its token ids (without extra special tokens) if ``tokenize``.
        Extra keyword arguments are passed to the template (and override the special tokens).
        """
        specials = {name: value for name, value in (
            ("bos_token", self.bos_token), ("eos_token", self.eos_token), ("unk_token", self.unk_token),
            ("pad_token", self.pad_token)) if value is not None}
        text = self._compiled_template(tools).render(
            messages=[_template_message(m) for m in messages],
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **{**specials, **kwargs},
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as transformers hands it to a template: None values dropped, reasoning aliased."""
    out = {k: v for k, v in dict(message).items() if v is not None}
    reasoning = next((out[k] for k in _REASONING_FIELDS if out.get(k) is not None), None)
    if reasoning is not None:
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
    return out


def compile_chat_template(source: str):
    """A jinja2 template compiled in transformers' chat-template environment (``apply_chat_template``).

    NOTE: the same options, filters and globals as transformers 4.4x-5.x: a sandbox with
    ``trim_blocks``/``lstrip_blocks`` and loop controls, ``tojson`` without HTML escaping,
    ``raise_exception``, ``strftime_now``, ``dict``, a ``namespace`` refusing underscore names, and
    the ``{% generation %}`` block (rendered as its body), so every template renders identically.
    """
    import jinja2
    from jinja2.exceptions import SecurityError, TemplateError
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(Extension):
        """``{% generation %}...{% endgeneration %}`` marks assistant text for a training mask: the body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (jinja's signature trick)
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(f"chat templates cannot set underscore attributes on a namespace: {name!r}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(source)
