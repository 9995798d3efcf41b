"""Value types of IR nodes, the attribute value domain, and the per-op default output type."""
from __future__ import annotations

import enum
import math
import sys
from typing import Any, Union

from sglc.ir.ops import Op


class ValueType(enum.Enum):
    NONE = "none"  # produces no value (text appends, hints)
    ANY = "any"  # a program argument whose type is unknown until run time
    STR = "str"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    LIST = "list"  # a variable gathered from a fork's children by a join
    FORK = "fork"  # the handle of a fork (input of GET_FORK_ITEM and JOIN)
    STREAM = "stream"  # the handle of one child stream (GET_FORK_ITEM)


#: Types whose values can be appended to a prompt as text.
TEXT_LIKE = frozenset({ValueType.ANY, ValueType.STR, ValueType.INT, ValueType.FLOAT, ValueType.BOOL})

DEFAULT_TYPE = {
    Op.ARGUMENT: ValueType.ANY,
    Op.CONSTANT_TEXT: ValueType.NONE,
    Op.APPEND: ValueType.NONE,
    Op.ROLE_BEGIN: ValueType.NONE,
    Op.ROLE_END: ValueType.NONE,
    Op.IMAGE: ValueType.NONE,
    Op.VIDEO: ValueType.NONE,
    Op.GEN: ValueType.STR,
    Op.SELECT: ValueType.STR,
    Op.VARIABLE: ValueType.STR,
    Op.STREAM_TEXT: ValueType.STR,
    Op.VAR_SCOPE_BEGIN: ValueType.NONE,
    Op.VAR_SCOPE_END: ValueType.STR,
    Op.FORK: ValueType.FORK,
    Op.GET_FORK_ITEM: ValueType.STREAM,
    Op.JOIN: ValueType.NONE,
    Op.BRANCH: ValueType.NONE,
    Op.CACHE_PREFIX: ValueType.NONE,
    Op.OUTPUT: ValueType.NONE,
    Op.FORMAT: ValueType.STR,
    Op.GET_ITEM: ValueType.ANY,
    Op.LENGTH: ValueType.INT,
    Op.LOOP_BEGIN: ValueType.ANY,
    Op.LOOP_INDEX: ValueType.INT,
    Op.LOOP_END: ValueType.NONE,
}
assert set(DEFAULT_TYPE) == set(Op), "every op needs a default output type"

#: What an attribute may hold: JSON-like values plus bytes, and a grammar (a gen's lowered
#: ``grammar``: an immutable ``sglc.grammar.Grammar``, graph.pb's AttrValue.grammar_value).
AttrValue = Union[None, bool, int, float, str, bytes, list, dict]


def is_grammar_value(value: Any) -> bool:
    """Whether `value` is a ``sglc.grammar.Grammar`` (immutable: copies share it)."""
    # NOTE: no import of sglc.grammar here (it pulls in the parsers): a value can only be a
    # Grammar if the module defining the class is already loaded.
    module = sys.modules.get("sglc.grammar.ir")
    return module is not None and isinstance(value, module.Grammar)


def check_attr_value(value: Any, where: str = "attribute") -> None:
    """Raise TypeError unless `value` is in the attribute domain (so it serializes exactly)."""
    if value is None or isinstance(value, (bool, int, str, bytes)) or is_grammar_value(value):
        return
    if isinstance(value, float):
        if math.isnan(value):
            raise TypeError(f"{where}: NaN is not a valid attribute value")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_attr_value(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: dict keys must be str, got {type(key).__name__}")
            check_attr_value(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"{where}: {type(value).__name__} is not a valid attribute value")


def normalize_attr_value(value: Any) -> AttrValue:
    """Tuples become lists, recursively, so that equality after a round trip is exact."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        return [normalize_attr_value(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize_attr_value(v) for k, v in value.items()}
    return value
