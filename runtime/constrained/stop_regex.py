"""stop_regex (SGLang's sampling field) as DFAs: where in the growing output a match of a pattern
first ENDS, what ``re.search`` on the output so far would find, found one character at a time in
constant time per character, without backtracking, so a client's pattern cannot stall the engine
thread (Python's ``re`` on ``(a+)+$`` can).

Each pattern P is compiled by :mod:`sglc.fsm` as ``[\\s\\S]*(?:P)`` (full-match semantics): the
DFA is in a final state exactly when some match of P ends at the last character read.

Where the work happens (nothing a client sends compiles in the server process):

- :func:`check_stop_regex` only parses (linear in the pattern, which the server's limits bound):
  SamplingParams calls it, so a pattern that is invalid or uses what a DFA cannot express
  (lookaround, backreferences, inline flags, ``^`` inside) fails at construction.
- :class:`StopRegexSpec` is the compile job: the engine hands it to its GrammarCache, which
  compiles it in the compile pool (compile_worker.py) under the server's CompileBudget, in-flight
  cap, deadline and memory limit, and keeps the DFA in a cache bounded by bytes.
- :func:`compile_stop_regex` is the compile itself (run in the worker; in-process only for a
  StopRegexMatcher built without compiled DFAs, i.e. tools and tests without an engine).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sglc.fsm import FSMError, compile_regex_metered
from sglc.fsm.budget import CompileBudget, CompileMeter
from sglc.fsm.dfa import DFA
from sglc.fsm.regex_parser import parse_regex

__all__ = ["StopRegexMatcher", "StopRegexSpec", "check_stop_regex", "compile_stop_regex", "dfa_nbytes"]

_HINT = "stop_regex runs as a DFA: no lookaround, backreferences, inline flags or '^'"


def _search(pattern: str) -> str:
    return r"[\s\S]*(?:" + pattern + ")"


def refusal(pattern: str, err: Exception) -> ValueError:
    """The ValueError a request gets for ``pattern`` (naming it) when ``err`` refused it."""
    if isinstance(err, RecursionError):
        return ValueError(f"stop_regex {pattern[:80]!r} nests too deeply")
    return ValueError(f"stop_regex {pattern[:80]!r} cannot be used: {err} ({_HINT})")


#: Parsing only: the size limits are the server's (its stop_regex byte limit before this, its
#: CompileBudget in the pool after), so they are lifted here; the nesting limit guards the parser.
_PARSE_ONLY = CompileBudget(max_pattern_chars=2**62, max_nfa_states=2**62)


def check_stop_regex(pattern: str) -> None:
    """Parse ``pattern`` (no compile): ValueError naming it when it is invalid or unsupported."""
    try:
        parse_regex(_search(pattern), meter=_PARSE_ONLY.start())
    except (FSMError, RecursionError) as err:
        raise refusal(pattern, err) from None


def compile_stop_regex(pattern: str, meter: CompileMeter | None = None) -> DFA:
    """The search DFA of one stop_regex pattern, compiled now (uncached) under ``meter`` (the
    default budget when none); ValueError naming the pattern when it is invalid, unsupported or
    over the budget."""
    try:
        return StopRegexSpec(pattern).compile(meter)
    except (FSMError, RecursionError) as err:
        raise refusal(pattern, err) from None


@dataclass(frozen=True, slots=True)
class StopRegexSpec:
    """A stop_regex compile job for the compile pool (it pickles as itself); its ``key`` cannot
    equal a ConstraintSpec's (no ConstraintSpec has kind "stop_regex")."""

    pattern: str
    kind: str = "stop_regex"

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.pattern)

    def compile(self, meter: CompileMeter | None = None) -> DFA:
        """The search DFA under ``meter`` (the default budget when none); raises the FSM library's
        errors (CompileBudgetError over budget)."""
        return compile_regex_metered(_search(self.pattern), meter).dfa

    def describe(self) -> str:
        shown = self.pattern if len(self.pattern) <= 80 else self.pattern[:77] + "..."
        return f"stop_regex {shown!r}"


def dfa_nbytes(dfa: DFA) -> int:
    """Bytes a character DFA holds, estimated: its tuples (a pointer and often an int object per
    cell), its interval tables, and the int table once built."""
    return 44 * dfa.num_states * dfa.num_classes + 64 * dfa.num_states + 40 * len(dfa.interval_starts)


class StopRegexMatcher:
    """One request's stop_regex state: ``feed(new_text)`` returns the first pattern a match of which
    ends inside the new text (or None). ``dfas``: the patterns' compiled DFAs (the engine's, from
    its compile pool); without them each pattern is compiled here (tools and tests only)."""

    __slots__ = ("patterns", "dfas", "states")

    def __init__(self, patterns: Sequence[str], dfas: Sequence[DFA] | None = None) -> None:
        self.patterns = list(patterns)
        if dfas is None:
            dfas = [compile_stop_regex(p) for p in self.patterns]
        assert len(dfas) == len(self.patterns), "one compiled DFA per stop_regex pattern"
        self.dfas = list(dfas)
        self.states = [dfa.initial for dfa in self.dfas]

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def feed(self, text: str, check: bool = True) -> str | None:
        """Read `text`; with `check` False (before min_new_tokens) only advance."""
        for ch in text:
            for k, dfa in enumerate(self.dfas):
                state = self.states[k]
                if state < 0:
                    continue
                state = self.states[k] = dfa.step(state, ch)
                if check and state in dfa.finals:
                    return self.patterns[k]
        return None
