"""Compiled constraints, shared by every request that asks for the same one.

- :func:`vocabulary_for` builds the FSM library's :class:`~sglc.fsm.Vocabulary` once per
  tokenizer (token bytes, special tokens excluded, stop tokens as EOS).
- :class:`GrammarCache` turns a :class:`~.spec.ConstraintSpec` into a :class:`CompiledGrammar`:
  compiled once per distinct constraint (an FSM dict from the compiler is only rebuilt, never
  recompiled), with its token index built once per (FSM, vocabulary), under the compile
  budget, in a worker process (compile_pool.py) unless configured inline.
- :class:`CompiledGrammar` adds what decoding needs per state on top of the token index:
  the allowed-token mask as a torch tensor (cached) and whether the state is terminal.

Bounds (nothing a client sends can exhaust the server): each compile has its
:class:`~sglc.fsm.CompileBudget`; identical constraints arriving together compile once (the
later ones wait on the first one's future); at most ``max_pending`` distinct compiles are in
flight, more raise :class:`~.errors.ConstraintCompilerBusy` at once; the cache keeps compiled
grammars up to ``cache_bytes`` (index arrays, tables and cached masks, least recently used
evicted first). Constraints refused for what they are (invalid, over a structural limit) are
remembered by key, so a client repeating one is refused without recompiling it.

Thread safety: ``GrammarCache.get`` may be called from any thread (requests are submitted
from several); a CompiledGrammar is read-only except for its caches, which are locked.
"""
from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from sglc import fsm

from .compile_pool import CompilePool
from .compile_worker import compile_index
from .compiler_config import ConstraintCompilerConfig
from .errors import ConstraintCompilerBusy
from .spec import ConstraintSpec

_vocabularies: "weakref.WeakKeyDictionary[Any, fsm.Vocabulary]" = weakref.WeakKeyDictionary()
_vocab_lock = threading.Lock()
#: Bytes of cached masks per grammar (each mask is vocab_size bools: 48 KiB for SmolLM2, so 341).
_MASK_CACHE_BYTES = 16 * 2**20
#: Refused constraints remembered (keys and errors only).
_MAX_REFUSALS = 256


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
        self._max_masks = max(16, _MASK_CACHE_BYTES // max(index.vocab_size, 1))
        self._terminal: dict[int, bool] = {}
        self._lock = threading.Lock()
        self._static_nbytes = index.nbytes + _dfa_nbytes(compiled.dfa)

    @property
    def pattern(self) -> str:
        return self.fsm.pattern

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    @property
    def nbytes(self) -> int:
        """Bytes this grammar holds: token index arrays, DFA tables, cached masks (an estimate
        for the Python-object tables; exact for the arrays)."""
        with self._lock:
            num_masks = len(self._masks)
        return self._static_nbytes + num_masks * self.vocab_size

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
            while len(self._masks) > self._max_masks:
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


def _dfa_nbytes(dfa: fsm.dfa.DFA) -> int:
    """The character DFA's tuples (a pointer and often an int object per cell) and int32 table."""
    return 44 * dfa.num_states * dfa.num_classes + 64 * dfa.num_states


class GrammarCache:
    """Compiled grammars for one tokenizer, keyed by constraint and by FSM language.

    ``get(spec)`` compiles on a miss (raising the FSM library's ValueError subclasses for a bad
    or over-budget constraint, :class:`ConstraintCompilerBusy` when ``max_pending`` compiles
    are in flight) and returns the shared CompiledGrammar; equal constraints given differently
    (a regex and the compiler's FSM dict for it) share one grammar through the FSM fingerprint.
    ``close()`` stops the compile workers (a later miss starts them again).
    """

    def __init__(self, tokenizer: Any, *, device: torch.device | str = "cpu",
                 config: ConstraintCompilerConfig | None = None) -> None:
        self.vocab = vocabulary_for(tokenizer)
        self.device = torch.device(device)
        self.config = config if config is not None else ConstraintCompilerConfig()
        self._pool = CompilePool(self.vocab, self.config) if self.config.num_workers else None
        self._by_key: OrderedDict[tuple[str, str], CompiledGrammar] = OrderedDict()
        self._by_fingerprint: dict[str, CompiledGrammar] = {}
        self._pending: dict[tuple[str, str], Future] = {}
        self._refusals: OrderedDict[tuple[str, str], fsm.FSMError] = OrderedDict()
        self._lock = threading.Lock()
        self.num_hits = 0
        self.num_misses = 0
        self.num_shared = 0  # waited for an identical compile already in flight
        self.num_busy = 0  # refused: max_pending compiles in flight

    @property
    def budget(self) -> fsm.CompileBudget:
        return self.config.budget

    def get(self, spec: ConstraintSpec) -> CompiledGrammar:
        """The compiled grammar for ``spec``: from the cache, from an identical compile in
        flight, or compiled now (blocking the calling thread, not the server)."""
        key = spec.key
        with self._lock:
            hit = self._by_key.get(key)
            if hit is not None:
                self._by_key.move_to_end(key)
                self.num_hits += 1
                return hit
            refused = self._refusals.get(key)
            if refused is not None:
                raise copy.copy(refused)  # NOTE: a fresh instance: this one is shared between threads
            future = self._pending.get(key)
            owner = future is None
            if owner:
                if len(self._pending) >= self.config.max_pending:
                    self.num_busy += 1
                    raise ConstraintCompilerBusy(
                        f"too many constraint compilations in flight ({self.config.max_pending}, "
                        f"ConstraintCompilerConfig.max_pending); retry shortly")
                future = self._pending[key] = Future()
            else:
                self.num_shared += 1
        if not owner:
            return future.result()
        try:
            grammar = self._compile(spec)
            future.set_result(grammar)
            return grammar
        except BaseException as err:
            future.set_exception(err)
            raise
        finally:
            with self._lock:
                del self._pending[key]

    def _compile(self, spec: ConstraintSpec) -> CompiledGrammar:
        try:
            if self._pool is not None:
                index = self._pool.compile(spec, self.config.budget)
            else:
                index = compile_index(spec, self.vocab, self.config.budget.start())
        except fsm.FSMError as err:
            if not (isinstance(err, fsm.CompileBudgetError) and err.limit in _UNREPEATABLE):
                with self._lock:
                    self._refusals[spec.key] = err
                    while len(self._refusals) > _MAX_REFUSALS:
                        self._refusals.popitem(last=False)
            raise
        with self._lock:
            grammar = self._by_fingerprint.get(index.fsm.fingerprint)
        if grammar is None:
            grammar = CompiledGrammar(index.fsm, index, self.device)
        with self._lock:
            self.num_misses += 1
            grammar = self._by_fingerprint.setdefault(grammar.fsm.fingerprint, grammar)
            self._by_key[spec.key] = grammar
            self._evict()
        return grammar

    def _evict(self) -> None:
        """Drop least recently used keys until the distinct grammars fit ``cache_bytes`` (the
        newest always stays: it is being handed out). Caller holds the lock."""
        sizes = {id(g): g.nbytes for g in self._by_key.values()}
        total = sum(sizes.values())
        while total > self.config.cache_bytes and len(self._by_key) > 1:
            _, old = self._by_key.popitem(last=False)
            if not any(g is old for g in self._by_key.values()):
                total -= sizes.pop(id(old), 0)
                self._by_fingerprint.pop(old.fsm.fingerprint, None)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached grammars."""
        with self._lock:
            grammars = {id(g): g for g in self._by_key.values()}
        return sum(g.nbytes for g in grammars.values())

    @property
    def num_pending(self) -> int:
        """Distinct compiles in flight."""
        with self._lock:
            return len(self._pending)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the running compile workers (none inline)."""
        return [] if self._pool is None else [w.pid for w in self._pool.workers if w.pid is not None]

    def close(self) -> None:
        """Stop the compile workers (a later miss starts them again)."""
        if self._pool is not None:
            self._pool.close()

    def __len__(self) -> int:
        return len(self._by_key)


#: Budget refusals that depend on the moment (the machine's load), so they are not remembered.
_UNREPEATABLE = frozenset({"max_compile_seconds", "worker_memory_bytes"})
