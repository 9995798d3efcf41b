"""Constrained decoding automata: regex / JSON schema / dtypes / choices -> compressed FSM,
FSM x vocabulary -> token index, and a per-request cursor. Pure Python + numpy; shared by the
compiler (constraint lowering) and the runtime (logit masks, jump-forward).

Layers (outlines-core style):
  1. ``compile_regex(pattern) -> FSM``: immutable minimal DFA over code points with its
     compressed view (``forced_string``, ``edges``); ``fsm_to_dict`` / ``fsm_from_dict``.
  2. ``build_token_index(fsm, Vocabulary) -> TokenIndex``: per state, allowed token ids and
     next states, over UTF-8 bytes; cached by (FSM fingerprint, vocabulary fingerprint).
  3. ``Cursor(index)``: allowed tokens / mask, ``advance``, ``advance_bytes``, ``forced_bytes``,
     ``can_finish``, ``is_finished``, ``rollback``.
Every stage runs under a ``CompileBudget`` (budget.py): what one constraint may cost to compile.
See docs/fsm.md.
"""
from __future__ import annotations

import importlib
from typing import Any

from .budget import DEFAULT_BUDGET, CompileBudget, CompileMeter
from .errors import (
    CompileBudgetError,
    ConstraintViolationError,
    EmptyLanguageError,
    FSMError,
    FSMFormatError,
    IncompatibleVocabularyError,
    InvalidRegexError,
    InvalidSchemaError,
    RecursiveSchemaError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)

#: The compilers' names, imported on first use (PEP 562): the budget and the errors above are what
#: configuring a server needs, and the compilers (lark, numpy) are ~0.15 s of `sglc serve`'s start.
_LAZY = {
    **dict.fromkeys(("FSM", "Edge", "compile_regex", "compile_regex_metered"), "compressed"),
    "Cursor": "cursor",
    **dict.fromkeys(("DTYPE_REGEX", "compile_choices", "compile_dtype", "regex_for_choices", "regex_for_dtype"),
                    "dtypes"),
    "regex_from_json_schema": "json_schema",
    **dict.fromkeys(("fsm_from_dict", "fsm_from_json", "fsm_to_dict", "fsm_to_json"), "serialize"),
    **dict.fromkeys(("TokenIndex", "build_token_index", "clear_token_index_cache"), "token_index"),
    "Vocabulary": "vocabulary",
    "sample": "walk",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sglc.fsm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # NOTE: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def compile_json_schema(
    schema: Any, *, separators: tuple[str, str] = (", ", ": "), max_nesting: int = 2,
    meter: CompileMeter | None = None,
) -> "FSM":
    """``compile_regex(regex_from_json_schema(schema, ...))`` (uncached under ``meter``)."""
    from .compressed import compile_regex, compile_regex_metered
    from .json_schema import regex_from_json_schema

    regex = regex_from_json_schema(schema, separators=separators, max_nesting=max_nesting, meter=meter)
    return compile_regex(regex) if meter is None else compile_regex_metered(regex, meter)


__all__ = [
    "FSM", "Edge", "compile_regex", "compile_regex_metered", "compile_json_schema", "regex_from_json_schema",
    "CompileBudget", "CompileMeter", "DEFAULT_BUDGET", "CompileBudgetError",
    "DTYPE_REGEX", "regex_for_dtype", "regex_for_choices", "compile_dtype", "compile_choices",
    "Vocabulary", "TokenIndex", "build_token_index", "clear_token_index_cache", "Cursor",
    "fsm_to_dict", "fsm_from_dict", "fsm_to_json", "fsm_from_json", "sample",
    "FSMError", "InvalidRegexError", "UnsupportedRegexError", "UnsupportedSchemaError", "RecursiveSchemaError",
    "InvalidSchemaError", "EmptyLanguageError", "IncompatibleVocabularyError",
    "FSMFormatError", "ConstraintViolationError",
]
