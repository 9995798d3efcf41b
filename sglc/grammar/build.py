"""Building grammar IR under a budget, in the normal form every front end produces.

The normal form is what the GBNF parser reads back from ``Grammar.to_ebnf()``, so the printed
grammar of any front end parses back to an equal grammar: a :class:`Seq` has two or more
items, none is a Seq and no two neighbours are Literals (``"a" "b"`` is ``"ab"``); a
:class:`Choice` has two or more distinct options and none is a Choice; the empty string is
``Literal("")``. :class:`Builder` makes nodes in that form and counts each against the
meter's ``max_expr_nodes`` as it is made (so a schema or a grammar that would build a million
nodes stops at the limit, not after).
"""
from __future__ import annotations

from typing import Iterable

from sglc.fsm.charset import CharSet

from .budget import GrammarMeter
from .ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq

EMPTY = Literal("")


class Builder:
    """Smart constructors for IR nodes, counted on ``meter``; ``rules`` collects named rules."""

    def __init__(self, meter: GrammarMeter) -> None:
        self.meter = meter
        self.rules: dict[str, Expr] = {}
        self.literal_chars = 0

    def lit(self, text: str) -> Expr:
        self.meter.add_nodes()
        self.literal_chars += len(text)  # NOTE: a schema's enum or const holds text of its own
        if self.literal_chars > self.meter.budget.max_grammar_chars:
            self.meter.check("max_grammar_chars", self.literal_chars, "literal characters in the grammar")
        return Literal(text)

    def chars(self, chars: CharSet) -> Expr:
        self.meter.add_nodes()
        return CharClass(chars)

    def ref(self, name: str) -> Expr:
        self.meter.add_nodes()
        return RuleRef(name)

    def seq(self, items: Iterable[Expr]) -> Expr:
        flat: list[Expr] = []
        for item in items:
            for i in item.items if isinstance(item, Seq) else (item,):
                if i == EMPTY:
                    continue
                if isinstance(i, Literal) and flat and isinstance(flat[-1], Literal):
                    flat[-1] = Literal(flat[-1].text + i.text)  # NOTE: "a" "b" is "ab"
                else:
                    flat.append(i)
        if not flat:
            return self.lit("")
        if len(flat) == 1:
            return flat[0]
        self.meter.add_nodes()
        return Seq(tuple(flat))

    def choice(self, options: Iterable[Expr]) -> Expr:
        flat: list[Expr] = []
        for option in options:
            for o in option.options if isinstance(option, Choice) else (option,):
                if o not in flat:  # NOTE: a repeated option adds nothing to the language
                    flat.append(o)
        assert flat, "a choice needs at least one option"
        if len(flat) == 1:
            return flat[0]
        self.meter.add_nodes()
        return Choice(tuple(flat))

    def repeat(self, item: Expr, lo: int = 0, hi: int | None = None) -> Expr:
        for bound in (lo, hi):
            if bound is not None:
                self.meter.check("max_repeat_bound", bound, "a repetition bound of")
        if (lo, hi) == (1, 1):
            return item
        if hi == 0 or item == EMPTY:
            return self.lit("")
        self.meter.add_nodes()
        return Repeat(item, lo, hi)

    def optional(self, item: Expr) -> Expr:
        return self.repeat(item, 0, 1)

    def add_rule(self, name: str, expr: Expr) -> None:
        """Define (or redefine a placeholder of) rule ``name``."""
        if name not in self.rules:
            self.meter.add_rule()
        self.rules[name] = expr

    def grammar(self, root: str = "root") -> Grammar:
        return Grammar(dict(self.rules), root).verify()
