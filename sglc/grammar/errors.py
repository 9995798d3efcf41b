"""Exceptions raised by the grammar front ends and the grammar IR (``sglc.grammar``).

All are :class:`~sglc.fsm.errors.FSMError` subclasses (so ``ValueError``s): the runtime's
handlers for constraint errors turn them into a 400 naming the problem, as they do for regex
and JSON schema errors. They pickle with their constructor's arguments (``_args``, as
FSMError's subclasses do) because the runtime compiles constraints in worker processes.

- :class:`GrammarError`: a grammar that is not whole (undefined rule, missing root).
- :class:`GrammarSyntaxError`: grammar text that does not parse; names line, column and shows
  the line with a caret under the column.
- :class:`UnsupportedGrammarError`: valid input using a construct we cannot express (a token
  reference ``<[123]>``, lark's ``%declare``, a regex lookaround); names the construct.
- :class:`GrammarBudgetError`: over a :class:`~sglc.grammar.budget.GrammarBudget` limit; a
  :class:`~sglc.fsm.errors.CompileBudgetError`, so it names the limit, its value and how to
  raise it, and handlers of budget errors treat it as one.
"""
from __future__ import annotations

from sglc.fsm.errors import CompileBudgetError, FSMError


class GrammarError(FSMError):
    """A grammar that is not whole (undefined rule, missing root, bad repeat bounds)."""


def caret_excerpt(text: str, line: int, column: int, width: int = 80) -> str:
    """The 1-based ``line`` of ``text`` (cut to ``width`` characters around ``column``) and a
    caret line pointing at the 1-based ``column``."""
    lines = text.splitlines() or [""]
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    start = max(0, column - 1 - width // 2)
    shown = src[start:start + width].expandtabs(1) if "\t" in src else src[start:start + width]
    return f"{shown}\n{' ' * (column - 1 - start)}^"


class GrammarSyntaxError(GrammarError):
    """Grammar text that does not parse. ``line`` and ``column`` are 1-based; ``excerpt`` is the
    offending line with a caret under the column."""

    def __init__(self, message: str, line: int, column: int, excerpt: str = "") -> None:
        self._args = (message, line, column, excerpt)
        self.reason = message
        self.line = line
        self.column = column
        self.excerpt = excerpt
        shown = f"\n{excerpt}" if excerpt else ""
        super().__init__(f"grammar syntax error at line {line}, column {column}: {message}{shown}")


class UnsupportedGrammarError(GrammarError):
    """Valid grammar input using a construct that cannot be expressed in the grammar IR (or that
    we do not support); ``construct`` names it, ``where`` says where (a rule, a terminal, a
    line)."""

    def __init__(self, construct: str, where: str = "", detail: str = "") -> None:
        self._args = (construct, where, detail)
        self.construct = construct
        self.where = where
        at = f" in {where}" if where else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"unsupported grammar construct {construct}{at}{extra}")


class GrammarBudgetError(CompileBudgetError):
    """Over a :class:`~sglc.grammar.budget.GrammarBudget` limit: ``limit`` is the field's name,
    ``value`` its setting, ``measured`` what was counted."""

    def __init__(self, limit: str, value: float, measured: str, owner: str = "GrammarBudget") -> None:
        super().__init__(limit, value, measured, owner)
        self._args = (limit, value, measured, owner)
