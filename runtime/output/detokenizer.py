"""Incremental detokenization that never emits half a character.

Byte-level BPE splits a multi-byte UTF-8 character over several tokens; decoding only some of
them gives U+FFFD. Like vLLM/SGLang we keep two offsets into the token list: `prefix_offset`
(start of a small context window, so tokenizers that add a leading space per piece decode the
window the same way as the whole text) and `read_offset` (tokens already turned into text).
Each step decodes window and window+new tokens; the difference is the new text. When it ends
in U+FFFD (a character still incomplete) the offsets stay put and only the text before the
trailing U+FFFD run is emitted; the rest follows once the character completes.
"""
from __future__ import annotations

import inspect
from typing import Callable, Protocol, Sequence

_REPLACEMENT = "\ufffd"
# Tokens of context decoded before the new ones (SGLang uses 5 as well).
_CONTEXT_TOKENS = 5


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], *args, **kwargs) -> str: ...


def _decode_fn(tokenizer: Decoder, skip_special_tokens: bool) -> Callable[[list[int]], str]:
    """A one-argument decode; passes skip_special_tokens when the tokenizer's decode takes it."""
    try:
        params = inspect.signature(tokenizer.decode).parameters.values()
        takes_flag = any(p.name == "skip_special_tokens" or p.kind is p.VAR_KEYWORD for p in params)
    except (TypeError, ValueError):  # compiled methods without a signature (HF `tokenizers`)
        takes_flag = True
    if takes_flag:
        return lambda ids: tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    return tokenizer.decode


class IncrementalDetokenizer:
    """Turns a growing list of output token ids into text deltas.

    `context_ids` (e.g. the last prompt tokens) only give the first tokens their context;
    their text is never emitted. `append(token_id)` returns the new stable text ("" while a
    character is incomplete); `flush()` returns whatever remains (U+FFFD included) at the end.
    """

    __slots__ = ("_decode", "ids", "prefix_offset", "read_offset", "num_context", "num_held", "text")

    def __init__(self, tokenizer: Decoder, *, skip_special_tokens: bool = True,
                 context_ids: Sequence[int] = ()) -> None:
        self._decode = _decode_fn(tokenizer, skip_special_tokens)
        self.ids: list[int] = list(context_ids[-_CONTEXT_TOKENS:]) if context_ids else []
        self.num_context = len(self.ids)
        self.prefix_offset = 0
        self.read_offset = self.num_context
        self.num_held = 0  # chars of the pending window already emitted
        self.text = ""  # all emitted output text

    @property
    def output_ids(self) -> list[int]:
        return self.ids[self.num_context :]

    def append(self, token_id: int) -> str:
        """Add one token; return the newly stable text."""
        self.ids.append(token_id)
        return self._advance(final=False)

    def extend(self, token_ids: Sequence[int]) -> str:
        """Add several tokens at once (e.g. jump-forward); return the newly stable text."""
        self.ids.extend(token_ids)
        return self._advance(final=False)

    def flush(self) -> str:
        """At the end of the request: emit the rest even if it is an incomplete character."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        if self.read_offset >= len(self.ids):
            return ""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        pending = full[len(prefix) :]
        if final or (len(full) > len(prefix) and not full.endswith(_REPLACEMENT)):
            delta = pending[self.num_held :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            self.num_held = 0
        else:
            # NOTE: text before a trailing run of U+FFFD is stable (UTF-8 resynchronizes), so it
            # can go out now; the offsets stay until the character completes.
            stable = pending.rstrip(_REPLACEMENT)
            delta = stable[self.num_held :] if len(full) > len(prefix) else ""
            self.num_held += len(delta)
        self.text += delta
        return delta
