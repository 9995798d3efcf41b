"""What compiling a grammar against a vocabulary, and matching with it, may cost.

Every limit is checked before (or while) paying for what it bounds, and over a limit
:class:`~sglc.grammar.errors.GrammarBudgetError` (a ``CompileBudgetError``) names the field
(``owner="EngineBudget"``):

| stage | limit | checked |
|---|---|---|
| inlining + NFA | ``max_automaton_nodes`` | NFA nodes counted on the IR before any automaton is built |
| DFA | ``max_automaton_nodes`` | as subset construction adds each node |
| token precompute | ``max_precompute_cells`` | positions x trie nodes, before the walk starts |
| token precompute | ``max_context_entries`` | context-dependent (token, exit) pairs, as they are found |
| everything | ``max_compile_seconds`` | wall clock, between stages and inside long loops |
| matching | ``max_stack_depth``, ``max_stacks`` | on every step, before the stacks are kept |
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields

from .errors import GrammarBudgetError


@dataclass(frozen=True, slots=True)
class EngineBudget:
    """Limits of the token-level grammar engine (see the module docstring)."""

    max_automaton_nodes: int = 200_000
    max_precompute_cells: int = 400_000_000
    max_context_entries: int = 2_000_000
    max_compile_seconds: float = 30.0
    max_stack_depth: int = 10_000
    max_stacks: int = 4_096

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"EngineBudget.{f.name} must be a positive number, got {v!r}")


DEFAULT_ENGINE_BUDGET = EngineBudget()


class EngineMeter:
    """One compile's running account of an :class:`EngineBudget` (the clock starts here)."""

    __slots__ = ("budget", "deadline")

    def __init__(self, budget: EngineBudget | None = None) -> None:
        self.budget = budget if budget is not None else DEFAULT_ENGINE_BUDGET
        self.deadline = time.monotonic() + self.budget.max_compile_seconds

    def check(self, limit: str, value: int, what: str) -> None:
        allowed = getattr(self.budget, limit)
        if value > allowed:
            raise GrammarBudgetError(limit, allowed, f"{what} {value:,}", owner="EngineBudget")

    def check_time(self, stage: str) -> None:
        if time.monotonic() > self.deadline:
            limit = self.budget.max_compile_seconds
            raise GrammarBudgetError("max_compile_seconds", limit,
                                     f"grammar compile time over {limit:g} s while {stage}", owner="EngineBudget")
