"""Direct left recursion -> repetition, preserving the language.

Lark compiles ``x*`` into a left-recursive helper rule (``__r_star_0: x | __r_star_0 x``) and
LALR-style grammars write ``expr: expr "+" term | term``; a top-down engine cannot run either.
The textbook rewrite ``R ::= R a1 | ... | R an | b1 | ... | bm`` ->
``R ::= (b1 | ... | bm) (a1 | ... | an)*`` removes it (an option that is ``R`` alone adds
nothing and is dropped; a rule with no ``b`` matches nothing). Only direct recursion is
rewritten; left recursion through other rules is left for the engine to refuse by name.
"""
from __future__ import annotations

from sglc.fsm.charset import CharSet

from .build import Builder
from .ir import Choice, Expr, RuleRef, Seq


def _split(name: str, option: Expr) -> Expr | None:
    """The rest of ``option`` after a leading ``name`` reference, or None if it has none."""
    if option == RuleRef(name):
        return Seq(())
    if isinstance(option, Seq) and option.items and option.items[0] == RuleRef(name):
        return Seq(option.items[1:])
    return None


def remove_direct_left_recursion(name: str, expr: Expr, build: Builder) -> Expr:
    """``expr`` (the body of rule ``name``) without options that begin with ``name`` itself."""
    options = expr.options if isinstance(expr, Choice) else (expr,)
    tails, bases = [], []
    for option in options:
        rest = _split(name, option)
        if rest is None:
            bases.append(option)
        elif rest != Seq(()):
            tails.append(build.seq(rest.items))
    if len(bases) == len(options):
        return expr
    if not bases:
        return build.chars(CharSet())  # every derivation needs one more R: no string at all
    base = build.choice(bases)
    if not tails:
        return base
    return build.seq([base, build.repeat(build.choice(tails))])
