"""Validation and normalization of gen's parameters (one check per parameter, one table).

Each check takes (name, value) and returns the attribute value to store, or raises a ValueError
that starts with the user's file:line.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Union

from sglc.frontend.errors import user_source
from sglc.ir.types import ValueType
from sglc.wire.json_schema_text import schema_text

#: dtype spellings accepted by gen(dtype=...) and the output type each gives.
DTYPES = {"str": ValueType.STR, "int": ValueType.INT, "float": ValueType.FLOAT, "bool": ValueType.BOOL}


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


def _int(key: str, value: Any, minimum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{user_source()}: gen {key} must be an int{bound}, got {value!r}")
    return value


def _float_in(key: str, value: Any, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{user_source()}: {key} must be a number, got {value!r}")
    if not (low < value if low_open else low <= value) or not value <= high:
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{user_source()}: {key} must be in {interval}, got {value!r}")
    return float(value)


def nonneg_float(key: str, value: Any) -> float:
    return _float_in(key, value, 0.0, float("inf"))


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{user_source()}: gen {key} must be a bool, got {value!r}")
    return value


def _stop(key: str, value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
        raise ValueError(f"{user_source()}: gen stop must be a non-empty str or a list of them, got {value!r}")
    return list(items)


def _token_ids(key: str, value: Any) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        raise ValueError(f"{user_source()}: gen stop_token_ids must be a list of token ids (ints >= 0), got {value!r}")
    return list(value)


def _top_k(key: str, value: Any) -> int:
    value = _int(key, value)
    if value != -1 and value < 1:
        raise ValueError(f"{user_source()}: gen top_k must be -1 (off) or >= 1, got {value!r}")
    return value


#: gen's sampling parameters and their checks (each returns the normalized attribute value).
SAMPLING_CHECKS = {
    "max_tokens": lambda k, v: _int(k, v, 1),
    "stop": _stop,
    "stop_token_ids": _token_ids,
    "temperature": nonneg_float,
    "top_p": lambda k, v: _float_in(k, v, 0.0, 1.0, low_open=True),
    "top_k": _top_k,
    "min_p": lambda k, v: _float_in(k, v, 0.0, 1.0),
    "frequency_penalty": lambda k, v: _float_in(k, v, -2.0, 2.0),
    "presence_penalty": lambda k, v: _float_in(k, v, -2.0, 2.0),
    "ignore_eos": _bool,
    "return_logprob": _bool,
    "logprob_start_len": lambda k, v: _int(k, v, -1),
    "top_logprobs_num": lambda k, v: _int(k, v, 0),
    "return_text_in_logprobs": _bool,
}

