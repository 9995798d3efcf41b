"""stop_regex (SGLang's sampling field) as DFAs: where in the growing output a match of a pattern
first ENDS, what ``re.search`` on the output so far would find, found one character at a time in
constant time per character, without backtracking, so a client's pattern cannot stall the engine
thread (Python's ``re`` on ``(a+)+$`` can).

Each pattern P is compiled by :mod:`sglc.fsm` as ``[\\s\\S]*(?:P)`` (full-match semantics): the
DFA is in a final state exactly when some match of P ends at the last character read. Compiles
run under sglc.fsm's default CompileBudget (states, time) and are cached there by pattern.
Constructs a DFA cannot express (lookaround, backreferences, inline flags, ``^`` inside) are
refused with a ValueError naming the pattern.
"""
from __future__ import annotations

from typing import Sequence

from sglc.fsm import FSMError, compile_regex

__all__ = ["StopRegexMatcher", "compile_stop_regex"]


def compile_stop_regex(pattern: str):  # -> sglc.fsm.dfa.DFA
    """The search DFA of one stop_regex pattern; ValueError naming the pattern when it is invalid,
    unsupported or over the compile budget."""
    try:
        return compile_regex(r"[\s\S]*(?:" + pattern + ")").dfa
    except FSMError as err:
        raise ValueError(f"stop_regex {pattern[:80]!r} cannot be used: {err} (stop_regex runs as a DFA: no "
                         "lookaround, backreferences, inline flags or '^')") from None
    except RecursionError:
        raise ValueError(f"stop_regex {pattern[:80]!r} nests too deeply") from None


class StopRegexMatcher:
    """One request's stop_regex state: ``feed(new_text)`` returns the first pattern a match of which
    ends inside the new text (or None)."""

    __slots__ = ("patterns", "dfas", "states")

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = list(patterns)
        self.dfas = [compile_stop_regex(p) for p in self.patterns]  # NOTE: cache hits after validation
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
