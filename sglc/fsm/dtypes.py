r"""``gen(dtype=...)`` and ``select(choices)`` as regexes, lowered like any other pattern.

- ``int``: SGLang's ``REGEX_INT``, ``[-+]?[0-9]+[ \n]*`` (``int()`` parses it: a sign, digits,
  trailing spaces or newlines)
- ``float``: SGLang's ``REGEX_FLOAT``, ``[-+]?[0-9]*\.?[0-9]+[ \n]*`` (``float()`` parses it; no
  exponent, so never ``inf``)
- ``bool``: ``True|False`` (Python spelling, as SGLang's ``dtype=bool``)
- ``str``: a double-quoted JSON string (``json.loads`` parses it)
- choices: the alternation of the escaped choices (exactly one of them, nothing else)
"""
from __future__ import annotations

from typing import Any, Sequence

from .budget import CompileMeter
from .compressed import FSM, compile_regex, compile_regex_metered
from .json_schema import STRING
from .regex_ast import escape

#: SGLang's ``sglang.lang.ir`` patterns for a typed gen (character for character; its
#: RuntimeEndpoint constrains ``dtype=int`` / ``float`` gens with them).
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"

DTYPE_REGEX: dict[str, str] = {
    "int": REGEX_INT,
    "float": REGEX_FLOAT,
    "bool": "True|False",
    "str": STRING,
}


def _dtype_name(dtype: Any) -> str:
    name = dtype.__name__ if isinstance(dtype, type) else dtype
    if name not in DTYPE_REGEX:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of int, float, bool, str")
    return name


def regex_for_dtype(dtype: Any) -> str:
    """The regex for ``dtype`` (``int``/``float``/``bool``/``str`` or their names)."""
    return DTYPE_REGEX[_dtype_name(dtype)]


def regex_for_choices(choices: Sequence[str]) -> str:
    """The regex matching exactly one of ``choices`` (escaped; order does not matter)."""
    if isinstance(choices, str) or not choices:
        raise ValueError("choices must be a non-empty list of strings")
    for c in choices:
        if not isinstance(c, str):
            raise TypeError(f"every choice must be a str, got {type(c).__name__}")
    return "|".join(f"(?:{escape(c)})" for c in dict.fromkeys(choices))


def compile_dtype(dtype: Any) -> FSM:
    """The compiled FSM for ``dtype``."""
    return compile_regex(regex_for_dtype(dtype))


def compile_choices(choices: Sequence[str], meter: CompileMeter | None = None) -> FSM:
    """The compiled FSM matching exactly one of ``choices`` (cached unless ``meter`` is given)."""
    regex = regex_for_choices(choices)
    return compile_regex(regex) if meter is None else compile_regex_metered(regex, meter)
