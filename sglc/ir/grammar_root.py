"""A grammar whose start rule is named ``root``: the name every GBNF reader starts from
(llama.cpp, xgrammar, SGLang's ``ebnf``, the runtime's ConstraintSpec kind "ebnf"). A lowered
grammar is sent as its ``to_ebnf()`` text, so its start rule must carry that name for the text to
mean the same grammar; front ends may name theirs otherwise (lark's is ``lark-root``).

:func:`rooted` renames the start rule to ``root`` (and a non-start rule already called ``root``
to a fresh name), rewriting every reference; the language is unchanged.
"""
from __future__ import annotations

import itertools
from typing import Any

#: The start rule's name in GBNF text.
ROOT = "root"


def rooted(grammar: Any) -> Any:  # sglc.grammar.Grammar -> sglc.grammar.Grammar
    """``grammar`` itself when its start rule is ``root``, else the same grammar renamed so."""
    if grammar.root == ROOT:
        return grammar
    from sglc.grammar import Grammar

    mapping = {grammar.root: ROOT}
    if ROOT in grammar.rules:  # NOTE: a rule called root that does not start: give it a fresh name
        mapping[ROOT] = next(name for i in itertools.count(1) if (name := f"{ROOT}-{i}") not in grammar.rules)
    memo: dict[int, Any] = {}
    rules = {mapping.get(name, name): _renamed(expr, mapping, memo) for name, expr in grammar.rules.items()}
    return Grammar(rules, ROOT).verify()


def _renamed(expr: Any, mapping: dict[str, str], memo: dict[int, Any]) -> Any:
    """``expr`` with rule references renamed by ``mapping`` (a shared sub-expression is rebuilt once)."""
    from sglc.grammar import Choice, Repeat, RuleRef, Seq

    done = memo.get(id(expr))
    if done is not None:
        return done
    if isinstance(expr, RuleRef):
        out = RuleRef(mapping.get(expr.name, expr.name))
    elif isinstance(expr, Seq):
        out = Seq(tuple(_renamed(item, mapping, memo) for item in expr.items))
    elif isinstance(expr, Choice):
        out = Choice(tuple(_renamed(option, mapping, memo) for option in expr.options))
    elif isinstance(expr, Repeat):
        out = Repeat(_renamed(expr.item, mapping, memo), expr.min, expr.max)
    else:  # Literal, CharClass: no references
        out = expr
    memo[id(expr)] = out
    return out
