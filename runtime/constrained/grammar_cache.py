"""GrammarCache: compiled constraints, one per distinct constraint, shared by every request.

- :func:`vocabulary_for` builds the FSM library's :class:`~sglc.fsm.Vocabulary` once per
  tokenizer (token bytes, special tokens excluded, stop tokens as EOS).
- :class:`GrammarCache` turns a :class:`~.spec.ConstraintSpec` into a
  :class:`~.grammar.CompiledGrammar`: compiled once per distinct constraint (an FSM dict from
  the compiler is only rebuilt, never recompiled), with its token index built once per (FSM,
  vocabulary), under the compile budget, in a worker process (compile_pool.py) unless
  configured inline.

Bounds (nothing a client sends can exhaust the server): each compile has its
:class:`~sglc.fsm.CompileBudget`; identical constraints arriving together compile once (the
later ones wait on the first one's future); at most ``max_pending`` distinct compiles are in
flight, more raise :class:`~.errors.ConstraintCompilerBusy` at once; the cache keeps compiled
grammars up to ``cache_bytes`` (index arrays, tables and cached masks, least recently used
evicted first). Constraints refused for what they are (invalid, over a structural limit) are
remembered by key (the last 256, keys and errors only), so a client repeating one is refused
without recompiling it.

stop_regex patterns take the same road (:meth:`GrammarCache.get_stop_regex`): the same compile
pool, in-flight sharing, ``max_pending`` and refusals; their search DFAs are kept up to
``stop_regex_cache_bytes``, least recently used evicted first.

Thread safety: ``GrammarCache.get`` may be called from any thread (requests are submitted
from several).
"""
from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

import torch

from sglc import fsm

from .compile_pool import CompilePool
from .cfg_grammar import CompiledCFG
from .compile_worker import compile_constraint
from .compiler_config import ConstraintCompilerConfig
from .errors import ConstraintCompilerBusy
from .grammar import CompiledGrammar
from .stop_regex import StopRegexSpec, dfa_nbytes
from sglc.wire.constraint_spec import ConstraintSpec

_vocabularies: "weakref.WeakKeyDictionary[Any, fsm.Vocabulary]" = weakref.WeakKeyDictionary()
_vocab_lock = threading.Lock()
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
        self._stop_dfas: OrderedDict[str, tuple[Any, int]] = OrderedDict()  # pattern -> (DFA, nbytes)
        self._stop_nbytes = 0
        self._lock = threading.Lock()
        self.num_hits = 0
        self.num_misses = 0
        self.num_shared = 0  # waited for an identical compile already in flight
        self.num_busy = 0  # refused: max_pending compiles in flight
        #: Compiles run (in the pool, or inline without workers), by kind: regex, json_schema,
        #: choices, fsm, stop_regex; refused ones included.
        self.num_compiles: dict[str, int] = {}

    @property
    def budget(self) -> fsm.CompileBudget:
        return self.config.budget

    def get(self, spec: ConstraintSpec) -> CompiledGrammar | CompiledCFG:
        """The compiled constraint for ``spec`` (an FSM's CompiledGrammar, or a CompiledCFG for a
        context-free grammar): from the cache, from an identical compile in flight, or compiled
        now (blocking the calling thread, not the server)."""
        return self._get(spec, self._lookup_grammar, self._compile)

    def get_stop_regex(self, pattern: str) -> Any:  # -> sglc.fsm.dfa.DFA
        """The search DFA of one stop_regex pattern (see stop_regex.py), like :meth:`get`: cached,
        shared in flight, compiled in the pool under the budget; the FSM library's ValueErrors
        for a bad or over-budget pattern, ConstraintCompilerBusy past ``max_pending``."""
        return self._get(StopRegexSpec(pattern), self._lookup_stop_regex, self._compile_stop_regex)

    def _lookup_grammar(self, key: tuple[str, str]) -> CompiledGrammar | None:
        hit = self._by_key.get(key)
        if hit is not None:
            self._by_key.move_to_end(key)
        return hit

    def _lookup_stop_regex(self, key: tuple[str, str]) -> Any:
        hit = self._stop_dfas.get(key[1])
        if hit is None:
            return None
        self._stop_dfas.move_to_end(key[1])
        return hit[0]

    def _get(self, spec: Any, lookup: Any, compile_: Any) -> Any:
        key = spec.key
        with self._lock:
            hit = lookup(key)
            if hit is not None:
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
            value = compile_(spec)
            future.set_result(value)
            return value
        except BaseException as err:
            future.set_exception(err)
            raise
        finally:
            with self._lock:
                del self._pending[key]

    def _run(self, spec: Any) -> Any:
        """One compile of ``spec`` in the pool (inline without workers); refusals for what the
        constraint is are remembered."""
        with self._lock:
            self.num_compiles[spec.kind] = self.num_compiles.get(spec.kind, 0) + 1
        try:
            if self._pool is not None:
                return self._pool.compile(spec, self.config.budget)
            if isinstance(spec, StopRegexSpec):
                return spec.compile(self.config.budget.start())
            return compile_constraint(spec, self.vocab, self.config.budget.start())
        except fsm.FSMError as err:
            if not (isinstance(err, fsm.CompileBudgetError) and err.limit in _UNREPEATABLE):
                with self._lock:
                    # NOTE: a copy: the raised error's traceback would keep every frame it passes
                    # through (the request, its handler's buffers) alive while it is remembered.
                    self._refusals[spec.key] = copy.copy(err)
                    while len(self._refusals) > _MAX_REFUSALS:
                        self._refusals.popitem(last=False)
            raise

    def _compile_stop_regex(self, spec: StopRegexSpec) -> Any:
        dfa = self._run(spec)
        size = dfa_nbytes(dfa)
        with self._lock:
            self.num_misses += 1
            old = self._stop_dfas.pop(spec.pattern, None)
            self._stop_nbytes += size - (old[1] if old is not None else 0)
            self._stop_dfas[spec.pattern] = (dfa, size)
            # NOTE: the newest always stays: it is being handed out
            while self._stop_nbytes > self.config.stop_regex_cache_bytes and len(self._stop_dfas) > 1:
                _, (_, n) = self._stop_dfas.popitem(last=False)
                self._stop_nbytes -= n
        return dfa

    def _compile(self, spec: ConstraintSpec) -> CompiledGrammar | CompiledCFG:
        index = self._run(spec)
        if not isinstance(index, fsm.TokenIndex):  # a context-free grammar (sglc.grammar)
            cfg = CompiledCFG(index, spec.key, self.device)
            with self._lock:
                self.num_misses += 1
                self._by_key[spec.key] = cfg
                self._evict()
            return cfg
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
                if isinstance(old, CompiledGrammar):
                    self._by_fingerprint.pop(old.fsm.fingerprint, None)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached grammars."""
        with self._lock:
            grammars = {id(g): g for g in self._by_key.values()}
        return sum(g.nbytes for g in grammars.values())

    @property
    def stop_regex_nbytes(self) -> int:
        """Bytes held by the cached stop_regex DFAs (an estimate; see stop_regex.dfa_nbytes)."""
        with self._lock:
            return self._stop_nbytes

    @property
    def num_stop_regexes(self) -> int:
        """stop_regex DFAs cached."""
        with self._lock:
            return len(self._stop_dfas)

    @property
    def num_refusals(self) -> int:
        """Refused constraints remembered (at most 256)."""
        with self._lock:
            return len(self._refusals)

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
