"""``compile_grammar``: grammar IR + vocabulary -> :class:`CompiledGrammar`, the immutable,
shareable product a :class:`~sglc.grammar.matcher.GrammarMatcher` runs on.

It holds the byte automaton (``automaton.py``), the per-position token classes
(``token_masks.py``) and the vocabulary, plus read-only tables in the shapes the matcher's
Python loop reads fastest (lists, built on first use). Its one mutable part is a cache, under a
lock, of masks per set of stack-top nodes (and per set of context-dependent groups taken, and
EOS or not): those depend only on the grammar, so every request on the grammar shares them. It
pickles (arrays and the vocabulary; caches are dropped), so a worker process can build it.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from functools import cached_property

import numpy as np

from sglc.fsm.vocabulary import Vocabulary

from .automaton import Automaton, build_automaton
from .automaton_budget import DEFAULT_ENGINE_BUDGET, EngineBudget, EngineMeter
from .automaton_native import native_builder
from .context_check_native import native_context_check
from .frame_check import check_in_frames
from .ir import Grammar
from .token_masks import TokenClasses, classify_tokens
from .token_walk_native import native_walker

#: Bytes of cached masks per compiled grammar (48 KiB each on a 49k vocabulary: 341).
_UNION_CACHE_BYTES = 16 * 2**20
#: Cached frame checks per compiled grammar (a few dozen bytes each); cleared when full.
_MAX_FRAME_CHECKS = 1 << 20


class CompiledGrammar:
    """A grammar compiled against one vocabulary (see the module docstring)."""

    def __init__(self, grammar: Grammar, vocab: Vocabulary, automaton: Automaton, classes: TokenClasses,
                 budget: EngineBudget) -> None:
        self.grammar = grammar
        self.vocab = vocab
        self.automaton = automaton
        self.classes = classes
        self.budget = budget
        self._init_caches()

    def _init_caches(self) -> None:
        self._frames: dict[tuple[int, tuple[int, ...], bool], int] = {}
        self._lock = threading.Lock()
        self._unions: OrderedDict[tuple, np.ndarray] = OrderedDict()  # union_mask's and composed_mask's
        self._max_unions = max(16, _UNION_CACHE_BYTES // max(self.vocab.size, 1))

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k in ("grammar", "vocab", "automaton", "classes", "budget")}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_caches()

    # --- sizes -------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.vocab.eos_token_ids

    @property
    def nbytes(self) -> int:
        a = self.automaton
        return (self.classes.nbytes + a.table.nbytes + a.follow.nbytes
                + len(self._unions) * self.vocab.size)

    # --- tables the matcher reads (Python lists: indexing them is what its loop does) -------------
    @cached_property
    def next_rows(self) -> list[list[int]]:
        """``next_rows[node][byte]``: the node after ``byte`` in the same rule, or -1."""
        return self.automaton.table.tolist()

    @cached_property
    def node_refs(self) -> list[tuple[tuple[int, int], ...]]:
        """``(callee start node, return node)`` per node."""
        a = self.automaton
        starts = a.rule_start.tolist()
        return [tuple((starts[c], t) for c, t in a.refs(n)) for n in range(a.num_nodes)]

    @cached_property
    def node_final(self) -> list[bool]:
        return self.automaton.final.tolist()

    @cached_property
    def node_has_bytes(self) -> list[bool]:
        return self.automaton.has_bytes.tolist()

    @cached_property
    def node_single_byte(self) -> list[int]:
        """The only byte with an edge out of the node, -1 when there are several (or none)."""
        ok = self.automaton.table >= 0
        single = ok.sum(axis=1) == 1
        return np.where(single, ok.argmax(axis=1), -1).tolist()

    @cached_property
    def node_groups(self) -> list[tuple[tuple[int, int], ...]]:
        """Per node: its context-dependent groups as ``(group id, exit node)``."""
        c = self.classes
        out: list[tuple[tuple[int, int], ...]] = []
        offs = c.group_offsets.tolist()
        gnode = c.group_node.tolist()
        for n, p in enumerate(c.position_of.tolist()):
            out.append(() if p < 0 else tuple((g, gnode[g]) for g in range(offs[p], offs[p + 1])))
        return out

    @cached_property
    def group_token_arrays(self) -> list[np.ndarray]:
        """The token ids of each context-dependent group (views into ``classes.group_tokens``)."""
        c = self.classes
        offs = c.token_offsets.tolist()
        return [c.group_tokens[offs[g]:offs[g + 1]] for g in range(len(offs) - 1)]

    @property
    def initial_node(self) -> int:
        return int(self.automaton.rule_start[self.automaton.root])

    # --- the shared part of a mask ------------------------------------------------------------
    def union_mask(self, nodes: tuple[int, ...]) -> np.ndarray:
        """Bool [vocab]: tokens accepted inside the rule at any of ``nodes`` (sorted, distinct
        stack tops). Cached and shared: read-only."""
        got = self._unions.get(nodes)  # NOTE: one OrderedDict call is atomic: a hit needs no lock
        if got is not None:
            self._lru_touch(nodes)
            return got
        rows = self.classes.position_of[list(nodes)]
        packed = np.bitwise_or.reduce(self.classes.accepted[rows], axis=0)
        made = np.unpackbits(packed, count=self.vocab.size).view(bool)
        return self._keep(nodes, made)

    def frame_check(self, group: int, frames: tuple[int, ...], bottom: bool) -> int:
        """Whether the stack frames ``frames`` (return nodes, nearest first; ``bottom``: nothing
        below them) decide the context-dependent ``group`` (frame_check.py: TAKEN, REFUSED or
        DEPENDS). Cached and shared."""
        key = (group, frames, bottom)
        got = self._frames.get(key)
        if got is None:
            if len(self._frames) >= _MAX_FRAME_CHECKS:
                self._frames.clear()
            got = self._frames[key] = check_in_frames(
                self.next_rows, self.node_refs, self.node_final, self.node_has_bytes,
                self.group_exit_nodes[group], frames, bottom, self.classes.suffixes[group])
        return got

    @cached_property
    def group_exit_nodes(self) -> list[int]:
        return self.classes.group_node.tolist()

    def _lru_touch(self, key) -> None:
        try:
            self._unions.move_to_end(key)
        except KeyError:  # NOTE: another thread evicted it since the get: still a valid mask
            pass

    def _keep(self, key, made: np.ndarray) -> np.ndarray:
        """Cache ``made`` (read-only from now on) under ``key``, least recently used out first."""
        made.setflags(write=False)
        with self._lock:
            self._unions[key] = made
            while len(self._unions) > self._max_unions:
                self._unions.popitem(last=False)
        return made

    def composed_mask(self, tops: tuple[int, ...], extra: tuple[int, ...], eos: bool) -> np.ndarray:
        """Bool [vocab]: :meth:`union_mask` of ``tops`` plus the tokens of context-dependent
        groups ``extra`` (sorted, distinct) plus EOS when ``eos``. Cached and shared like the
        unions (a matcher meets the same few combinations again and again: a 49k-token copy each
        time was most of a new state's mask)."""
        key = (tops, extra, eos)
        got = self._unions.get(key)
        if got is not None:
            self._lru_touch(key)
            return got
        made = self.union_mask(tops).copy() if tops else np.zeros(self.vocab.size, dtype=bool)
        if extra:
            arrays = self.group_token_arrays
            made[np.concatenate([arrays[g] for g in extra])] = True
        if eos and self.eos_token_ids:
            made[list(self.eos_token_ids)] = True
        return self._keep(key, made)

    def __repr__(self) -> str:
        return (f"CompiledGrammar({len(self.automaton.rule_names)} rules, {self.automaton.num_nodes} nodes, "
                f"{self.classes.num_positions} positions, {self.classes.num_context_tokens} context tokens)")


def compile_grammar(grammar: Grammar, vocab: Vocabulary, budget: EngineBudget | None = None) -> CompiledGrammar:
    """Compile ``grammar`` against ``vocab`` under ``budget`` (the default when None): raises
    ``GrammarError`` (not whole; :class:`~.automaton.LeftRecursionError`),
    ``EmptyLanguageError`` or ``CompileBudgetError`` naming the limit."""
    budget = budget if budget is not None else DEFAULT_ENGINE_BUDGET
    native_builder(), native_walker(), native_context_check()  # NOTE: built (once per machine) before the compile's clock starts
    meter = EngineMeter(budget)
    auto = build_automaton(grammar, meter)
    classes = classify_tokens(auto, vocab, meter)
    return CompiledGrammar(grammar, vocab, auto, classes, budget)
