"""Compiled constraints, shared by every request that asks for the same one.

- :func:`vocabulary_for` builds the FSM library's :class:`~sglc.fsm.Vocabulary` once per
  tokenizer (token bytes, special tokens excluded, stop tokens as EOS).
- :class:`GrammarCache` turns a :class:`~.spec.ConstraintSpec` into a :class:`CompiledGrammar`:
  compiled once per distinct constraint (an FSM dict from the compiler is only rebuilt, never
  recompiled), with its token index built once per (FSM, vocabulary).
- :class:`CompiledGrammar` adds what decoding needs per state on top of the token index:
  the allowed-token mask as a torch tensor (cached) and whether the state is terminal.

Thread safety: ``GrammarCache.get`` may be called from any thread (requests are submitted
from several); a CompiledGrammar is read-only except for its caches, which are locked.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from sglc import fsm

from .spec import ConstraintSpec

_vocabularies: "weakref.WeakKeyDictionary[Any, fsm.Vocabulary]" = weakref.WeakKeyDictionary()
_vocab_lock = threading.Lock()
#: Cached masks per grammar (each is vocab_size bools, 48 KiB for SmolLM2).
_MAX_MASKS = 512


def vocabulary_for(tokenizer: Any) -> fsm.Vocabulary:
    """The FSM vocabulary of ``tokenizer`` (anything with ``all_token_bytes``,
    ``special_token_ids`` and ``stop_token_ids``), built on first use and kept with it."""
    with _vocab_lock:
        vocab = _vocabularies.get(tokenizer)
        if vocab is None:
            vocab = fsm.Vocabulary.from_tokenizer(tokenizer)
            _vocabularies[tokenizer] = vocab
        return vocab


class CompiledGrammar:
    """An FSM and its token index over one vocabulary (immutable, shared across requests)."""

    def __init__(self, compiled: fsm.FSM, index: fsm.TokenIndex, device: torch.device | str = "cpu") -> None:
        self.fsm = compiled
        self.index = index
        self.device = torch.device(device)
        self._eos = np.array(index.eos_token_ids, dtype=np.int64)
        self._masks: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._terminal: dict[int, bool] = {}
        self._lock = threading.Lock()

    @property
    def pattern(self) -> str:
        return self.fsm.pattern

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    def mask(self, state: int) -> torch.Tensor:
        """Bool [vocab_size] on ``device``, True where a token may come next (EOS only in final
        states). NOTE: cached and shared between requests: never modify it in place."""
        with self._lock:
            got = self._masks.get(state)
            if got is not None:
                self._masks.move_to_end(state)
                return got
        made = torch.from_numpy(self.index.mask(state)).to(self.device)
        with self._lock:
            self._masks[state] = made
            while len(self._masks) > _MAX_MASKS:
                self._masks.popitem(last=False)
        return made

    def is_terminal(self, state: int) -> bool:
        """True when the text so far is complete and nothing but EOS may follow."""
        got = self._terminal.get(state)
        if got is None:
            ids = self.index.allowed_token_ids(state)
            got = self.index.is_final(state) and bool(np.isin(ids, self._eos).all())
            self._terminal[state] = got
        return got

    def new_cursor(self) -> "ConstraintState":
        """A fresh per-request state at the start of the constraint."""
        from .state import ConstraintState

        return ConstraintState(self)

    def __repr__(self) -> str:
        shown = self.pattern if len(self.pattern) <= 60 else self.pattern[:57] + "..."
        return f"CompiledGrammar({shown!r}, {self.fsm.num_states} states)"


class GrammarCache:
    """Compiled grammars for one tokenizer, keyed by constraint and by FSM language.

    ``get(spec)`` compiles on a miss (raising the FSM library's ValueError subclasses for a bad
    constraint) and returns the shared CompiledGrammar; equal constraints given differently
    (a regex and the compiler's FSM dict for it) share one grammar through the FSM fingerprint.
    """

    def __init__(self, tokenizer: Any, *, device: torch.device | str = "cpu", max_entries: int = 256) -> None:
        self.vocab = vocabulary_for(tokenizer)
        self.device = torch.device(device)
        self.max_entries = max_entries
        self._by_key: OrderedDict[tuple[str, str], CompiledGrammar] = OrderedDict()
        self._by_fingerprint: dict[str, CompiledGrammar] = {}
        self._lock = threading.Lock()
        self.num_hits = 0
        self.num_misses = 0

    def get(self, spec: ConstraintSpec) -> CompiledGrammar:
        """The compiled grammar for ``spec``, from the cache when it was seen before."""
        with self._lock:
            hit = self._by_key.get(spec.key)
            if hit is not None:
                self._by_key.move_to_end(spec.key)
                self.num_hits += 1
                return hit
        compiled = spec.compile()  # NOTE: outside the lock: a slow compile must not block hits
        if compiled.is_empty():
            raise fsm.EmptyLanguageError(f"constraint {spec.describe()} matches no string")
        with self._lock:
            grammar = self._by_fingerprint.get(compiled.fingerprint)
        if grammar is None:
            grammar = CompiledGrammar(compiled, fsm.build_token_index(compiled, self.vocab), self.device)
        with self._lock:
            self.num_misses += 1
            grammar = self._by_fingerprint.setdefault(compiled.fingerprint, grammar)
            self._by_key[spec.key] = grammar
            while len(self._by_key) > self.max_entries:
                _, old = self._by_key.popitem(last=False)
                if old not in self._by_key.values():
                    self._by_fingerprint.pop(old.fsm.fingerprint, None)
        return grammar

    def __len__(self) -> int:
        return len(self._by_key)
