"""The compiled constraint: a minimal character DFA plus its compressed view (SGLang, App. B).

A state is *forced* when it is not final and its only move is one single character: from
there the text is fixed until the next final state or branch. ``forced_string(state)`` is that
fixed text (what jump-forward appends without sampling). The *compressed graph* keeps only the
branch points (the initial state and every non-forced state); each of its edges is one first
step (a character class) followed by the forced characters up to the next branch point, so a
chain like ``{"name": "`` becomes a single edge carrying a string.

An :class:`FSM` is immutable once built: construct it with :func:`compile_regex` (cached) or
:func:`compile_regex_metered` (under a running compile budget), from a DFA, or with
``sglc.fsm.serialize.fsm_from_dict``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from .budget import CompileBudget, CompileMeter, as_meter
from .charset import CharSet, describe_ranges
from .dfa import DFA, determinize, minimize
from .nfa import build_nfa
from .regex_parser import parse_regex, too_deep

if TYPE_CHECKING:
    from .byte_dfa import ByteDFA


@dataclass(frozen=True)
class Edge:
    """A compressed edge: one step on ``first`` (code-point ranges), then the forced ``text``."""

    source: int
    target: int
    first: tuple[tuple[int, int], ...]
    text: str

    @property
    def label(self) -> str:
        """A printable label: a string literal when the whole edge is fixed text."""
        if len(self.first) == 1 and self.first[0][0] == self.first[0][1]:
            return repr(chr(self.first[0][0]) + self.text)
        head = describe_ranges(self.first)
        return head + (f" {self.text!r}" if self.text else "")


class FSM:
    """A compiled, immutable constraint automaton over Unicode code points.

    States are ints ``0..num_states-1``; ``initial`` is 0. ``-1`` stands for "rejected".
    """

    def __init__(self, dfa: DFA, pattern: str = "", byte_dfa: "ByteDFA | None" = None) -> None:
        self._dfa = dfa
        self._pattern = pattern
        if byte_dfa is not None:  # NOTE: fills the cached property (one built elsewhere, e.g. in a worker)
            self.__dict__["byte_dfa"] = byte_dfa

    # -- identity ----------------------------------------------------------------------
    @property
    def dfa(self) -> DFA:
        """The minimal character-level DFA."""
        return self._dfa

    @property
    def pattern(self) -> str:
        """The source the FSM was compiled from (informational; not part of the language)."""
        return self._pattern

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FSM):
            return NotImplemented
        return self._dfa == other._dfa and self._pattern == other._pattern

    def __hash__(self) -> int:
        return hash((self._dfa, self._pattern))

    @cached_property
    def fingerprint(self) -> str:
        """A hex digest of the language (equal for equal minimal DFAs, whatever the pattern)."""
        d = self._dfa
        payload = json.dumps(
            [d.interval_starts, d.interval_classes, d.transitions, d.initial, sorted(d.finals)],
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    # -- the automaton -----------------------------------------------------------------
    @property
    def initial(self) -> int:
        return self._dfa.initial

    @property
    def num_states(self) -> int:
        return self._dfa.num_states

    @property
    def finals(self) -> frozenset[int]:
        return self._dfa.finals

    def is_final(self, state: int) -> bool:
        """Whether the text read so far may end at ``state``."""
        return state in self._dfa.finals

    def transitions(self, state: int) -> list[tuple[tuple[tuple[int, int], ...], int]]:
        """``(code-point ranges, target)`` for every move out of ``state``."""
        return self._grouped[state]

    @cached_property
    def _grouped(self) -> tuple[list[tuple[tuple[tuple[int, int], ...], int]], ...]:
        # NOTE: classes are global to the DFA; per state, classes with one target are merged.
        d = self._dfa
        out = []
        for s in range(d.num_states):
            by_target: dict[int, list[tuple[int, int]]] = {}
            for c, t in d.out_edges(s):
                by_target.setdefault(t, []).extend(d.class_ranges(c))
            merged = [(CharSet.of_ranges(r).ranges, t) for t, r in by_target.items()]
            merged.sort(key=lambda rt: rt[0][0])
            out.append(merged)
        return tuple(out)

    def step(self, state: int, ch: str) -> int:
        """The state after ``ch``; -1 when ``ch`` is not allowed from ``state``."""
        return self._dfa.step(state, ch)

    def walk(self, text: str, state: int | None = None) -> int:
        """The state after ``text`` from ``state`` (default: initial); -1 when rejected."""
        return self._dfa.walk(text, state)

    def accepts(self, text: str) -> bool:
        """Whether ``text`` as a whole matches (Python ``re.fullmatch`` semantics)."""
        return self._dfa.accepts(text)

    def is_empty(self) -> bool:
        """Whether the language is empty (no text at all can satisfy the constraint)."""
        return not self._dfa.finals

    # -- compression -------------------------------------------------------------------
    @cached_property
    def _forced_char(self) -> tuple[str | None, ...]:
        out: list[str | None] = []
        d = self._dfa
        for s in range(d.num_states):
            edges = d.out_edges(s)
            ch = None
            if s not in d.finals and len(edges) == 1:
                ranges = d.class_ranges(edges[0][0])
                if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
                    ch = chr(ranges[0][0])
            out.append(ch)
        return tuple(out)

    def is_forced(self, state: int) -> bool:
        """Whether ``state`` is non-final with exactly one move, on exactly one character."""
        return self._forced_char[state] is not None

    @cached_property
    def _forced_strings(self) -> tuple[str, ...]:
        forced = self._forced_char
        trans = self._dfa.transitions
        memo: dict[int, str] = {}
        for start in range(self.num_states):
            chain: list[int] = []
            s = start
            # NOTE: a forced chain cannot loop: a cycle of forced (non-final, single-move)
            # states never reaches a final state, and minimal DFAs have no such states.
            while s not in memo and forced[s] is not None:
                chain.append(s)
                s = trans[s][self._dfa.class_of(ord(forced[s]))]
            tail = memo.setdefault(s, "")  # s is memoized already, or not forced
            for t in reversed(chain):
                tail = forced[t] + tail  # type: ignore[operator]
                memo[t] = tail
        return tuple(memo.get(s, "") for s in range(self.num_states))

    def forced_string(self, state: int) -> str:
        """The longest text forced from ``state``: it stops at a final state or a branch."""
        return self._forced_strings[state]

    @cached_property
    def nodes(self) -> tuple[int, ...]:
        """The compressed graph's nodes: the initial state and every non-forced state."""
        keep = (s for s in range(self.num_states) if s == self.initial or not self.is_forced(s))
        return tuple(keep)

    @cached_property
    def edges(self) -> tuple[Edge, ...]:
        """The compressed graph's edges (see the module docstring)."""
        nodes = set(self.nodes)
        out = []
        for u in self.nodes:
            for ranges, target in self.transitions(u):
                text = []
                v = target
                while v not in nodes:
                    ch = self._forced_char[v]
                    assert ch is not None
                    text.append(ch)
                    v = self._dfa.step(v, ch)
                out.append(Edge(u, v, ranges, "".join(text)))
        return tuple(out)

    def __str__(self) -> str:
        lines = [
            f"FSM {self._pattern!r}: {self.num_states} states, "
            f"{len(self.nodes)} compressed nodes, {len(self.edges)} edges"
        ]
        for e in self.edges:
            mark = " (final)" if self.is_final(e.target) else ""
            lines.append(f"  {e.source} --{e.label}--> {e.target}{mark}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"FSM(pattern={self._pattern!r}, num_states={self.num_states})"

    # -- bytes -------------------------------------------------------------------------
    @cached_property
    def byte_dfa(self) -> "ByteDFA":
        """The same language over UTF-8 bytes (what token walking uses); built on first use
        under the default budget unless :meth:`build_byte_dfa` built it first."""
        return self.build_byte_dfa()

    def build_byte_dfa(self, meter: CompileMeter | None = None) -> "ByteDFA":
        """``byte_dfa``, built now (if it was not yet) under ``meter``'s budget."""
        from .byte_dfa import build_byte_dfa

        if "byte_dfa" not in self.__dict__:
            self.__dict__["byte_dfa"] = build_byte_dfa(self._dfa, meter)
        return self.__dict__["byte_dfa"]


@lru_cache(maxsize=256)
def compile_regex(pattern: str, budget: CompileBudget | None = None) -> FSM:
    """Compile a regex (Python syntax, full-match semantics) into a minimal, compressed FSM.
    Cached (256 patterns); ``budget`` defaults to ``DEFAULT_BUDGET``.

    Raises ``InvalidRegexError`` / ``UnsupportedRegexError`` (see ``regex_parser``) and
    ``CompileBudgetError`` when the pattern costs more than the budget allows.
    """
    return compile_regex_metered(pattern, CompileMeter(budget))


def compile_regex_metered(pattern: str, meter: CompileMeter | None = None) -> FSM:
    """:func:`compile_regex` without the cache, under a running ``meter`` (one clock for this
    and whatever later stages share the meter, e.g. the token index)."""
    meter = as_meter(meter)
    tree = parse_regex(pattern, meter=meter)
    try:
        nfa = build_nfa(tree)
    except RecursionError:  # NOTE: only past a raised max_nesting_depth; never a traceback
        raise too_deep(meter) from None
    return FSM(minimize(determinize(nfa, meter), meter), pattern)
