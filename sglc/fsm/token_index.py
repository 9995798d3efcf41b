"""DFA x vocabulary -> token index: for each FSM state, the allowed tokens and where each leads.

Tokens are walked over the FSM's *byte* DFA (``FSM.byte_dfa``), so a token may cross several
FSM edges (``"}\\n``) or end in the middle of a UTF-8 character. The walk follows the
vocabulary's prefix trie, breadth-first and vectorized with numpy, for many start states at
once: every shared token prefix is walked once per state, and a branch of the trie is dropped
as soon as the DFA rejects it.

The index covers every state reachable from the initial state by tokens, computed in waves;
other states (e.g. reached by jump-forward bytes rather than tokens) are computed on first use.
EOS tokens are allowed exactly in final states and lead back to the same state.
Tokens that lead into a dead end are pruned, so a request can always finish: if a state
reached by tokens cannot lead (by tokens) to a final state, the vocabulary cannot express the
pattern and :class:`IncompatibleVocabularyError` names that state and the characters the
pattern needs there; a dead end in the middle of a character (a token splitting it in a way no
other token completes) is only pruned. Indexes are cached in-process by (FSM fingerprint,
vocabulary fingerprint), up to ``_CACHE_BYTES`` of index arrays.

Budget (``meter``): byte states x vocabulary size is checked against ``max_index_cells`` before
the walk starts; the walk runs over chunks of start states (so its frontier stays near
``_WALK_CELLS`` entries whatever the pattern) and counts transitions against
``max_index_transitions`` and the clock after each chunk. States computed on first use later
are not metered: they are bounded by the cells check, and failing mid-decode would be worse.
Entries are int32 (half the memory of int64; vocabularies and byte DFAs fit easily).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from .budget import CompileMeter, as_meter
from .byte_dfa import ByteDFA
from .charset import describe_ranges
from .compressed import FSM
from .errors import EmptyLanguageError, IncompatibleVocabularyError
from .vocabulary import Vocabulary

#: Bytes of index arrays the in-process cache of ``build_token_index`` keeps.
_CACHE_BYTES = 256 * 2**20
_cache: "OrderedDict[tuple[str, str], TokenIndex]" = OrderedDict()
_cache_lock = threading.Lock()
#: Start states x vocabulary size walked at once: bounds the walk's frontier arrays (~100 MB).
_WALK_CELLS = 2**21


def _walk(bdfa: ByteDFA, vocab: Vocabulary, origins: np.ndarray) -> tuple[np.ndarray, ...]:
    """All ``(origin state, token id, end state)`` triples for tokens the DFA accepts from
    each origin (as a prefix of the language)."""
    trie = vocab.trie
    flat = bdfa.table.reshape(-1)  # flat[state * 256 + byte]
    f_origin = origins.astype(np.int64)
    f_node = np.zeros(len(origins), dtype=np.int64)
    f_state = f_origin.copy()
    out_o, out_t, out_s = [], [], []
    while len(f_node):
        # Expand every frontier (node, state) pair into its trie children ...
        counts = trie.child_count[f_node]
        total = int(counts.sum())
        if total == 0:
            break
        first = np.cumsum(counts) - counts
        child = np.repeat(trie.child_start[f_node] - first, counts) + np.arange(total)
        state = np.repeat(f_state, counts)
        # ... and keep the children whose byte the DFA accepts.
        nxt = flat[state * 256 + trie.node_byte[child]]
        keep = np.flatnonzero(nxt >= 0)
        f_origin = np.repeat(f_origin, counts)[keep]
        f_node, f_state = child[keep], nxt[keep].astype(np.int64)
        tok = trie.node_token[f_node]
        has = np.flatnonzero(tok >= 0)
        if len(has):
            out_o.append(f_origin[has])
            out_t.append(tok[has])
            out_s.append(f_state[has])
    o, t, s = (np.concatenate(x) if x else np.zeros(0, dtype=np.int64) for x in (out_o, out_t, out_s))
    if len(trie.duplicate_tokens):
        # NOTE: tokens whose bytes equal an earlier token's share its trie node and its moves.
        dup_of, dup_ids = trie.duplicate_tokens[:, 0], trie.duplicate_tokens[:, 1]
        sort = np.argsort(dup_of)
        pos = np.searchsorted(dup_of[sort], t, side="left")
        end = np.searchsorted(dup_of[sort], t, side="right")
        extra = np.repeat(np.arange(len(t)), end - pos)
        if len(extra):
            offs = np.arange(len(extra)) - np.repeat(np.cumsum(end - pos) - (end - pos), end - pos)
            o = np.concatenate([o, o[extra]])
            s = np.concatenate([s, s[extra]])
            t = np.concatenate([t, dup_ids[sort][pos[extra] + offs]])
    return o, t, s


class IndexArrays(NamedTuple):
    """A token index as four flat arrays (what a compile worker process sends back): the
    entry of ``states[i]`` is ``token_ids[offsets[i]:offsets[i+1]]`` with ``next_states``
    alongside."""

    states: np.ndarray  # int32 [n]
    offsets: np.ndarray  # int64 [n + 1]
    token_ids: np.ndarray  # int32
    next_states: np.ndarray  # int32

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self)


class TokenIndex:
    """Immutable per-(FSM, vocabulary) table of allowed tokens; see the module docstring.

    ``entry(state)`` is ``(token_ids, next_states)``: sorted token ids (int32) and the state
    each leads to. States are byte-DFA states; the FSM's own states keep their ids.
    """

    def __init__(self, fsm: FSM, vocab: Vocabulary, meter: CompileMeter | None = None) -> None:
        if fsm.is_empty():
            raise EmptyLanguageError(f"pattern {fsm.pattern!r} matches no string")
        meter = as_meter(meter)
        self.fsm = fsm
        self.vocab = vocab
        self.byte_dfa = fsm.build_byte_dfa(meter)
        # NOTE: before any walking: the index can hold up to this many (state, token) pairs.
        meter.check("max_index_cells", self.byte_dfa.num_states * vocab.size,
                    f"token index cells ({self.byte_dfa.num_states:,} byte states x {vocab.size:,} tokens)")
        self._eos = np.array(vocab.eos_token_ids, dtype=np.int32)
        self._entries: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        self._meter: CompileMeter | None = meter
        self._num_transitions = 0
        self._build()
        self._meter = None  # NOTE: states computed on first use later are not metered

    @classmethod
    def from_arrays(cls, fsm: FSM, vocab: Vocabulary, arrays: IndexArrays) -> TokenIndex:
        """The index :meth:`to_arrays` flattened, over ``vocab`` (the same vocabulary it was
        built on) and ``fsm`` (whose ``byte_dfa`` it was built with). Nothing is recomputed."""
        self = cls.__new__(cls)
        self.fsm, self.vocab, self.byte_dfa = fsm, vocab, fsm.byte_dfa
        self._eos = np.array(vocab.eos_token_ids, dtype=np.int32)
        self._lock = threading.Lock()
        self._meter = None
        self._entries = {}
        states, offsets, ids, nexts = arrays
        for a in (ids, nexts):
            a.setflags(write=False)
        for i, state in enumerate(states.tolist()):
            self._entries[state] = (ids[offsets[i]:offsets[i + 1]], nexts[offsets[i]:offsets[i + 1]])
        self._num_transitions = len(ids)
        return self

    def to_arrays(self) -> IndexArrays:
        """Every computed entry as flat arrays (see :class:`IndexArrays`)."""
        states = np.array(sorted(self._entries), dtype=np.int32)
        entries = [self._entries[s] for s in states.tolist()]
        offsets = np.zeros(len(entries) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(ids) for ids, _ in entries])
        empty = np.zeros(0, dtype=np.int32)
        ids = np.concatenate([e[0] for e in entries] or [empty]).astype(np.int32, copy=False)
        nexts = np.concatenate([e[1] for e in entries] or [empty]).astype(np.int32, copy=False)
        return IndexArrays(states, offsets, ids, nexts)

    @property
    def nbytes(self) -> int:
        """Bytes held by the entries and the byte DFA's table (shared arrays counted once)."""
        seen: set[int] = set()
        total = self.byte_dfa.table.nbytes
        for pair in self._entries.values():
            for a in pair:
                base = a.base if a.base is not None else a
                if id(base) not in seen:
                    seen.add(id(base))
                    total += base.nbytes
        return total

    # -- construction ------------------------------------------------------------------
    def _compute(self, states: list[int]) -> None:
        # NOTE: in chunks of start states, so the walk's frontier (start states x trie nodes
        # alive) stays small whatever the pattern; the budget is checked after each chunk.
        chunk = max(1, _WALK_CELLS // max(self.vocab.size, 1))
        for i in range(0, len(states), chunk):
            self._compute_chunk(states[i : i + chunk])
            if self._meter is not None:
                self._meter.check("max_index_transitions", self._num_transitions, "token index transitions")
                self._meter.check_time("building the token index")

    def _compute_chunk(self, states: list[int]) -> None:
        origins = np.array(states, dtype=np.int64)
        o, t, s = _walk(self.byte_dfa, self.vocab, origins)
        # NOTE: (origin, token) pairs are unique, so one int64 key sorts by origin then token.
        order = np.argsort(o * self.vocab.size + t)
        o, t, s = o[order], t[order].astype(np.int32), s[order].astype(np.int32)
        bounds = np.searchsorted(o, origins, side="left"), np.searchsorted(o, origins, side="right")
        for state, a, b in zip(states, *bounds):
            ids, nexts = t[a:b], s[a:b]
            if state in self.byte_dfa.finals and len(self._eos):
                ids = np.concatenate([ids, self._eos])
                nexts = np.concatenate([nexts, np.full(len(self._eos), state, dtype=np.int32)])
                sort = np.argsort(ids, kind="stable")
                ids, nexts = ids[sort], nexts[sort]
            ids.setflags(write=False)
            nexts.setflags(write=False)
            self._entries[state] = (ids, nexts)
            self._num_transitions += len(ids)

    def _explore(self, states: list[int]) -> None:
        """Compute entries for ``states`` and everything reachable from them by tokens."""
        wave = [s for s in states if s not in self._entries]
        seen = set(self._entries) | set(wave)
        while wave:
            self._compute(wave)
            reached = np.unique(np.concatenate([self._entries[st][1] for st in wave]))
            wave = sorted(set(reached.tolist()) - seen)
            seen.update(wave)

    def _dead_states(self) -> set[int]:
        """Computed states from which no token sequence reaches a final state."""
        preds: dict[int, list[int]] = {s: [] for s in self._entries}
        for s, (_, nexts) in self._entries.items():
            for t in np.unique(nexts).tolist():
                preds[t].append(s)
        alive = {s for s in self._entries if s in self.byte_dfa.finals}
        stack = list(alive)
        while stack:
            for p in preds[stack.pop()]:
                if p not in alive:
                    alive.add(p)
                    stack.append(p)
        return set(self._entries) - alive

    def _prune(self, dead: set[int]) -> None:
        """Drop every token that leads into a dead state (it could only strand the request)."""
        if not dead:
            return
        dead_arr = np.array(sorted(dead), dtype=np.int64)
        empty = np.zeros(0, dtype=np.int32)
        empty.setflags(write=False)
        for s, (ids, nexts) in list(self._entries.items()):
            if s in dead:
                self._entries[s] = (empty, empty)
                continue
            keep = ~np.isin(nexts, dead_arr)
            if not keep.all():
                self._num_transitions -= int((~keep).sum())
                ids, nexts = ids[keep], nexts[keep]
                ids.setflags(write=False)
                nexts.setflags(write=False)
                self._entries[s] = (ids, nexts)

    def _build(self) -> None:
        self._explore([self.byte_dfa.initial])
        dead = self._dead_states()
        # NOTE: a dead *character* state means the vocabulary can spell a prefix of the
        # pattern's text but not go on from it: the pattern is not expressible. Dead interior
        # states (a token that splits a character in a way no token completes) are pruned.
        fatal = sorted(s for s in dead if s < self.byte_dfa.num_char_states)
        if fatal:
            stuck = [s for s in fatal if len(self._entries[s][0]) == 0]
            state = stuck[0] if stuck else fatal[0]
            raise IncompatibleVocabularyError(state, self._needed(state), self.fsm.pattern)
        self._prune(dead)

    def _needed(self, state: int) -> list[str]:
        """What the pattern allows next from ``state``, for error messages."""
        if state < self.byte_dfa.num_char_states:
            return [describe_ranges(r) for r, _ in self.fsm.transitions(state)]
        return [f"byte 0x{b:02x}" for b in self.byte_dfa.allowed_bytes(state)]

    # -- queries -----------------------------------------------------------------------
    @property
    def initial(self) -> int:
        return self.byte_dfa.initial

    @property
    def finals(self) -> frozenset[int]:
        return self.byte_dfa.finals

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.vocab.eos_token_ids

    def is_final(self, state: int) -> bool:
        return state in self.byte_dfa.finals

    def entry(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """``(allowed token ids, next states)`` for ``state``; computed on first use if the
        state was not reachable by tokens at build time."""
        got = self._entries.get(state)
        if got is None:
            if not 0 <= state < self.byte_dfa.num_states:
                n = self.byte_dfa.num_states
                raise ValueError(f"state {state} out of range (the byte DFA has {n} states)")
            with self._lock:
                if state not in self._entries:
                    self._explore([state])
                    self._prune(self._dead_states())
            got = self._entries[state]
        return got

    def allowed_token_ids(self, state: int) -> np.ndarray:
        return self.entry(state)[0]

    def next_state(self, state: int, token_id: int) -> int:
        """The state after ``token_id``; -1 when the token is not allowed from ``state``."""
        ids, nexts = self.entry(state)
        i = int(np.searchsorted(ids, token_id))
        return int(nexts[i]) if i < len(ids) and ids[i] == token_id else -1

    def mask(self, state: int) -> np.ndarray:
        """A boolean array over the vocabulary: True for allowed tokens."""
        out = np.zeros(self.vocab.size, dtype=bool)
        out[self.entry(state)[0]] = True
        return out

    def states(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """A copy of ``{state: (token_ids, next_states)}`` for every computed state."""
        return dict(self._entries)

    @property
    def num_states(self) -> int:
        return len(self._entries)

    @property
    def num_transitions(self) -> int:
        return sum(len(ids) for ids, _ in self._entries.values())


def build_token_index(fsm: FSM, vocab: Vocabulary, *, use_cache: bool = True,
                      meter: CompileMeter | None = None) -> TokenIndex:
    """The token index for ``fsm`` over ``vocab``, from the in-process cache when available
    (``meter``: the running compile budget; the default budget when none is given)."""
    key = (fsm.fingerprint, vocab.fingerprint)
    if use_cache:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
                return hit
    index = TokenIndex(fsm, vocab, meter)
    if use_cache:
        with _cache_lock:
            _cache[key] = index
            total = sum(i.nbytes for i in _cache.values())
            while len(_cache) > 1 and total > _CACHE_BYTES:
                _, old = _cache.popitem(last=False)
                total -= old.nbytes
    return index


def clear_token_index_cache() -> None:
    """Forget every cached index (tests and benchmarks use this to time cold builds)."""
    with _cache_lock:
        _cache.clear()
