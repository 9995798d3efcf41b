"""Grammar budgets: what turning one grammar (text or schema) into the IR may cost, checked
before the work each limit bounds (DESIGN.md §9).

| limit | bounds | checked |
|---|---|---|
| ``max_grammar_chars`` | grammar text, schema JSON text, regex text | before parsing |
| ``max_nesting_depth`` | nested groups ``( [ {`` in grammar text | a linear scan before parsing |
| ``max_schema_depth`` | nested JSON schema levels (``$ref`` chains too) | a scan before converting, and as the converter descends |
| ``max_rules`` | rules in the grammar | as each rule is added |
| ``max_expr_nodes`` | IR expression nodes over all rules | counted as each node is built |
| ``max_repeat_bound`` | ``{m,n}`` bounds, ``minItems``/``maxItems``/``maxLength`` | as each bound is read |
| ``max_compile_seconds`` | wall time of one front end run | inside every loop that builds |

Over a limit, :class:`~sglc.grammar.errors.GrammarBudgetError` names the limit, its value and
how to raise it (``--grammar-budget max_rules=5000`` style text goes through :meth:`parse`).
Defaults leave room for the grammars of llama.cpp's grammars/ folder, lark's examples and
OpenAI-style recursive schemas while refusing a megabyte of text or a million rules at once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from sglc.fsm.budget import check_limits, parse_limits

from .errors import GrammarBudgetError


@dataclass(frozen=True, slots=True)
class GrammarBudget:
    """Limits on one grammar front end run (see the module docstring for where each is checked).

    - max_grammar_chars: characters of grammar text (GBNF, lark, a schema's JSON, a regex).
    - max_nesting_depth: nested groups in grammar text.
    - max_schema_depth: nested JSON schema levels, ``$ref`` hops included.
    - max_rules: rules in the resulting grammar.
    - max_expr_nodes: expression nodes in the resulting grammar (``Grammar.size()``).
    - max_repeat_bound: the largest finite repetition bound (``{m,n}``, array and string sizes).
    - max_compile_seconds: wall time of the whole front end run.
    """

    max_grammar_chars: int = 200_000
    max_nesting_depth: int = 100
    max_schema_depth: int = 100
    max_rules: int = 5_000
    max_expr_nodes: int = 200_000
    max_repeat_bound: int = 10_000
    max_compile_seconds: float = 5.0

    def __post_init__(self) -> None:
        check_limits(self)

    @classmethod
    def parse(cls, text: str) -> "GrammarBudget":
        """A budget from ``"max_rules=100,max_compile_seconds=2"`` (the rest default);
        ValueError naming an unknown or malformed entry."""
        values = parse_limits(cls, text, "grammar budget")
        return cls(**values)  # type: ignore[arg-type]

    def start(self) -> "GrammarMeter":
        """A meter for one front end run under this budget; its clock starts now."""
        return GrammarMeter(self)


#: The budget used when a caller gives none.
DEFAULT_GRAMMAR_BUDGET = GrammarBudget()


class GrammarMeter:
    """One front end run's account of a :class:`GrammarBudget`: counters and a deadline.
    Not thread-safe; one run, one meter."""

    __slots__ = ("budget", "deadline", "nodes", "rules")

    def __init__(self, budget: GrammarBudget | None = None) -> None:
        self.budget = budget if budget is not None else DEFAULT_GRAMMAR_BUDGET
        self.deadline = time.monotonic() + self.budget.max_compile_seconds
        self.nodes = 0
        self.rules = 0

    def check(self, limit: str, value: int, what: str) -> None:
        """Raise when ``value`` exceeds the budget's ``limit`` field; ``what`` names it."""
        allowed = getattr(self.budget, limit)
        if value > allowed:
            raise GrammarBudgetError(limit, allowed, f"{what} {value:,}")

    def add_nodes(self, count: int = 1) -> None:
        """Count ``count`` expression nodes as built (and look at the clock now and then)."""
        self.nodes += count
        if self.nodes > self.budget.max_expr_nodes:
            raise GrammarBudgetError("max_expr_nodes", self.budget.max_expr_nodes, f"expression nodes over {self.budget.max_expr_nodes:,}")
        if self.nodes & 0x3FF == 0:
            self.check_time("building the grammar")

    def add_rule(self) -> None:
        self.rules += 1
        if self.rules > self.budget.max_rules:
            raise GrammarBudgetError("max_rules", self.budget.max_rules, f"rules over {self.budget.max_rules:,}")

    def check_time(self, stage: str) -> None:
        if time.monotonic() > self.deadline:
            limit = self.budget.max_compile_seconds
            raise GrammarBudgetError("max_compile_seconds", limit, f"grammar compile time over {limit:g} s while {stage}")


def as_meter(budget: "GrammarBudget | GrammarMeter | None") -> GrammarMeter:
    """A fresh meter on ``budget`` (the default when None), or ``budget`` if it is a meter."""
    if isinstance(budget, GrammarMeter):
        return budget
    return GrammarMeter(budget)


def check_text(text: str, meter: GrammarMeter, what: str, quotes: dict[str, str] | None = None,
               comment: str = "") -> None:
    """Check ``text``'s length, then its group nesting ``( [ {`` by one linear scan. Inside
    ``quotes`` (opener -> closer: string literals, character classes, regexes) brackets mean
    nothing and a backslash escapes the next character; ``comment`` starts a comment to the end
    of the line. A bracket the scan cannot place only overestimates the depth."""
    meter.check("max_grammar_chars", len(text), f"{what} characters")
    quotes = {'"': '"'} if quotes is None else quotes
    limit = meter.budget.max_nesting_depth
    depth = 0
    closer = ""
    escaped = in_comment = False
    for ch in text:
        if in_comment:
            in_comment = ch != "\n"
        elif closer:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == closer:
                closer = ""
        elif ch in quotes:
            closer = quotes[ch]
        elif comment and ch == comment:
            in_comment = True
        elif ch in "([{":
            depth += 1
            if depth > limit:
                raise GrammarBudgetError("max_nesting_depth", limit, f"{what} groups nested more than {limit} deep")
        elif ch in ")]}":
            depth = max(0, depth - 1)
