"""Context-free grammar constraints (issue 27): grammar front ends (GBNF, EBNF, lark, JSON Schema)
into one grammar IR (``ir.py``), and the token-level engine that turns a grammar and a vocabulary
into per-step token masks. Pure Python + numpy over ``sglc.fsm`` (character sets, UTF-8,
vocabulary); shared by the compiler and the runtime, as ``sglc.fsm`` is.
"""
from __future__ import annotations

from .ir import CharClass, Choice, Expr, Grammar, GrammarError, Literal, Repeat, RuleRef, Seq

__all__ = ["Grammar", "GrammarError", "Expr", "Literal", "CharClass", "Seq", "Choice", "Repeat", "RuleRef"]
