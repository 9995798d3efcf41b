"""Validation and normalization of gen's parameters (sampling ones by sglc.wire.sampling_table).

Each check takes (name, value) and returns the attribute value to store, or raises a ValueError
that starts with the user's file:line.
"""
from __future__ import annotations

import re
from typing import Any, Union

from sglc.frontend.errors import user_source
from sglc.ir.gen_constraint import constraint_grammar
from sglc.ir.grammar_root import rooted
from sglc.ir.types import is_grammar_value
from sglc.wire import sampling_table
from sglc.wire.json_schema_text import schema_text

#: dtype spellings accepted by gen(dtype=...). The dtype only constrains what is generated: the
#: variable holds the generated string, as in SGLang (so `"So " + s["n"]` works).
DTYPES = ("str", "int", "float", "bool")


def dtype_name(dtype: Union[type, str]) -> str:
    """'int' / 'float' / 'bool' / 'str' for a Python type or its name."""
    name = dtype.__name__ if isinstance(dtype, type) else dtype
    if not isinstance(name, str) or name not in DTYPES:
        raise ValueError(f"{user_source()}: gen dtype must be int, float, bool or str, got {dtype!r}")
    return name


def canonical_json_schema(schema: Any) -> str:
    """gen(json_schema=...) as compact JSON text (sglc.wire's one normalisation), errors at the
    user's line."""
    try:
        return schema_text(schema)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{user_source()}: gen {err}") from None


def check_regex(regex: Any) -> str:
    if not isinstance(regex, str):
        raise TypeError(f"{user_source()}: gen regex must be a str, got {type(regex).__name__}")
    try:
        re.compile(regex)
    except re.error as err:
        raise ValueError(f"{user_source()}: gen regex {regex!r} is not a valid regular expression: {err}") from None
    return regex


def check_grammar(key: str, value: Any) -> dict[str, str]:
    """gen(ebnf= / grammar= / lark=...) as the gen's constraint attribute: ``{"ebnf": text}`` (a
    ``sglc.grammar.Grammar`` given as ``grammar=`` is stored as its GBNF text) or ``{"lark": text}``.
    The text is parsed now (and the parse cached for lowering), so errors name `key` at the call."""
    if key == "grammar" and is_grammar_value(value):
        try:
            text = rooted(value.verify()).to_ebnf()  # NOTE: GBNF text starts at the rule named root
            constraint_grammar("ebnf", text)  # NOTE: what the compiler and the runtime will read back
        except (TypeError, ValueError) as err:
            raise ValueError(f"{user_source()}: gen grammar: this Grammar does not print as a grammar that "
                             f"parses back: {err}") from None
        return {"ebnf": text}
    if not isinstance(value, str):
        also = " or a sglc.grammar.Grammar" if key == "grammar" else ""
        raise TypeError(f"{user_source()}: gen {key} must be grammar text (a str){also}, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{user_source()}: gen {key} is empty; it needs at least a root rule")
    attr = "lark" if key == "lark" else "ebnf"
    try:
        constraint_grammar(attr, value)
    except ValueError as err:  # NOTE: sglc.grammar's errors (syntax with line/column, budget) are ValueErrors
        raise ValueError(f"{user_source()}: gen {key} is not a valid {_SYNTAX[attr]} grammar: {err}") from None
    return {attr: value}


_SYNTAX = {"ebnf": "GBNF/EBNF", "lark": "lark"}


def _table_check(key: str, value: Any) -> Any:
    """A gen parameter checked by its row of sglc.wire.sampling_table, at the user's line."""
    try:
        return sampling_table.BY_DSL[key].check_gen(value, f"gen {key}")
    except (TypeError, ValueError) as err:
        raise type(err)(f"{user_source()}: {err}") from None


#: gen's sampling parameters (keyword -> check returning the normalized attribute value): the
#: rows of sglc.wire.sampling_table that the DSL spells.
SAMPLING_CHECKS = {key: _table_check for key in sampling_table.BY_DSL}
