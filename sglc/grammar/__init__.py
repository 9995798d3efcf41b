"""Context-free grammar constraints (issue 27): grammar front ends (GBNF, EBNF, lark, JSON Schema)
into one grammar IR (``ir.py``), and the token-level engine that turns a grammar and a vocabulary
into per-step token masks. Pure Python + numpy over ``sglc.fsm`` (character sets, UTF-8,
vocabulary); shared by the compiler and the runtime, as ``sglc.fsm`` is.

Front ends (each under a :class:`GrammarBudget`, see budget.py; docs/grammars.md):
``parse_gbnf`` / ``parse_ebnf`` (gbnf.py), ``parse_lark`` (lark_grammar.py),
``grammar_from_json_schema`` (json_schema_grammar.py), ``grammar_from_regex`` (regex_grammar.py).
"""
from __future__ import annotations

from .budget import DEFAULT_GRAMMAR_BUDGET, GrammarBudget
from .errors import GrammarBudgetError, GrammarError, GrammarSyntaxError, UnsupportedGrammarError
from .gbnf import parse_ebnf, parse_gbnf
from .left_recursion import LeftRecursionError
from .automaton_budget import EngineBudget
from .matcher import GrammarMatcher
from .token_masks_compile import CompiledGrammar, compile_grammar
from .ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq
from .regex_grammar import grammar_from_regex
from .lark_grammar import parse_lark
from .json_schema_grammar import grammar_from_json_schema

__all__ = [
    "Grammar", "GrammarError", "Expr", "Literal", "CharClass", "Seq", "Choice", "Repeat", "RuleRef",
    "GrammarBudget", "DEFAULT_GRAMMAR_BUDGET", "GrammarBudgetError", "GrammarSyntaxError",
    "UnsupportedGrammarError", "parse_gbnf", "parse_ebnf", "grammar_from_regex", "parse_lark", "grammar_from_json_schema",
]
__all__ += ["compile_grammar", "CompiledGrammar", "GrammarMatcher", "EngineBudget", "LeftRecursionError"]
