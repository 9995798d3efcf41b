"""A GEN's constraint: which attribute holds it, and what it stands for once lowered.

Two lowered forms, each an attribute the lower_constraints pass adds beside the readable one:

- ``fsm``: the regex a regular constraint stands for (:func:`constraint_pattern`), compiled; the
  FSM records it as ``fsm["pattern"]``.
- ``grammar``: the ``sglc.grammar.Grammar`` a context-free constraint stands for
  (:func:`constraint_grammar`): ``ebnf`` (GBNF / xgrammar EBNF text), ``lark`` (a lark grammar),
  or a ``json_schema`` the FSM library refuses because it refers to itself (:func:`is_recursive_schema`).

At run time the lowered form wins over the readable attribute. `verify` uses both functions to
check that they say the same thing, so what `sglc inspect` shows is what runs. Imports
:mod:`sglc.fsm` and :mod:`sglc.grammar` (leaf libraries) only when a constraint is asked about.
"""
from __future__ import annotations

import functools
from typing import Any, Optional

from sglc.ir.grammar_root import rooted

#: The GEN attributes that constrain what may be generated, in the order they are reported.
CONSTRAINT_ATTRS = ("regex", "json_schema", "dtype", "choices", "ebnf", "lark")
#: Constraints written in a grammar syntax: they always lower to a ``grammar``, never an ``fsm``.
GRAMMAR_ATTRS = ("ebnf", "lark")
#: The attributes that hold a lowered constraint (at most one per gen).
LOWERED_ATTRS = ("fsm", "grammar")


def constraint_attrs(attrs: dict[str, Any]) -> list[str]:
    """The constraint attributes set (not None) on a GEN, in CONSTRAINT_ATTRS order."""
    return [key for key in CONSTRAINT_ATTRS if attrs.get(key) is not None]


def constraint_pattern(attr: str, value: Any) -> str:
    """The regex that constraint `attr` with `value` stands for (what an FSM is compiled from).

    Raises sglc.fsm.FSMError, TypeError or ValueError for a value that is no valid constraint
    (and for a grammar constraint, which has no regex).
    """
    from sglc import fsm

    if attr == "regex":
        if not isinstance(value, str):
            raise TypeError(f"regex must be a str, got {type(value).__name__}")
        return value
    if attr == "json_schema":
        try:
            return fsm.regex_from_json_schema(value)  # a JSON string or a dict
        except RecursionError:
            raise ValueError("the JSON schema is nested too deeply") from None
    if attr == "dtype":
        return fsm.regex_for_dtype(value)
    if attr == "choices":
        return fsm.regex_for_choices(value)
    if attr in GRAMMAR_ATTRS:
        raise ValueError(f"{attr} is a grammar constraint: it lowers to a grammar, not to an fsm")
    raise ValueError(f"{attr!r} is not a constraint attribute (one of {', '.join(CONSTRAINT_ATTRS)})")


def is_recursive_schema(err: BaseException) -> bool:
    """Whether ``err`` (from :func:`constraint_pattern` of a ``json_schema``) is the FSM library
    refusing a ``$ref`` that refers to itself: exactly the schemas that lower to a grammar."""
    from sglc.fsm.errors import RecursiveSchemaError

    return isinstance(err, RecursiveSchemaError)


def constraint_grammar(attr: str, value: Any) -> Any:  # -> sglc.grammar.Grammar
    """The grammar that constraint `attr` with `value` stands for (what a lowered ``grammar`` is).

    ``ebnf``: GBNF / xgrammar EBNF text; ``lark``: a lark grammar; ``json_schema`` (a JSON string
    or a dict): the schema's grammar. Raises a ``sglc.grammar`` error (an FSMError, so a
    ValueError: syntax with line and column, an unsupported construct, a budget), or TypeError.
    The start rule is named ``root`` (grammar_root.py), so ``to_ebnf()`` is text any GBNF reader
    starts where the grammar does. Equal constraints give the same (immutable) Grammar object:
    parsed once per process.
    """
    if attr in GRAMMAR_ATTRS:
        if not isinstance(value, str):
            raise TypeError(f"{attr} must be grammar text (a str), got {type(value).__name__}")
        return _parsed(attr, value)
    if attr == "json_schema":
        from sglc.wire.json_schema_text import schema_text

        return _parsed(attr, schema_text(value))
    raise ValueError(f"{attr!r} is not a grammar constraint (one of {', '.join(GRAMMAR_ATTRS)} or json_schema)")


@functools.lru_cache(maxsize=64)
def _parsed(attr: str, text: str) -> Any:
    from sglc import grammar

    if attr == "ebnf":
        return grammar.parse_gbnf(text)
    if attr == "lark":  # NOTE: lark's start rule is lark-root; GBNF text starts at root
        return rooted(grammar.parse_lark(text))
    return rooted(grammar.grammar_from_json_schema(text))  # NOTE: the FSM path's separators: the same JSON


def lowered_pattern(lowered: Any) -> Optional[str]:
    """The pattern a lowered ``fsm`` attribute was compiled from (None if it records none)."""
    if isinstance(lowered, dict) and isinstance(lowered.get("pattern"), str):
        return lowered["pattern"]
    return None
