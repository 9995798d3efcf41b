"""A GEN's constraint: which attribute holds it, and the regex it stands for.

The lower_constraints pass compiles that regex to the ``fsm`` attribute, and the FSM records it
as ``fsm["pattern"]``; at run time the ``fsm`` wins over the readable attribute. `verify` uses
:func:`constraint_pattern` to check that both say the same thing, so what `sglc inspect` shows
is what runs. Imports :mod:`sglc.fsm` (a leaf library) only when a pattern is asked for.
"""
from __future__ import annotations

from typing import Any, Optional

#: The GEN attributes that constrain what may be generated, in the order they are reported.
CONSTRAINT_ATTRS = ("regex", "json_schema", "dtype", "choices")


def constraint_attrs(attrs: dict[str, Any]) -> list[str]:
    """The constraint attributes set (not None) on a GEN, in CONSTRAINT_ATTRS order."""
    return [key for key in CONSTRAINT_ATTRS if attrs.get(key) is not None]


def constraint_pattern(attr: str, value: Any) -> str:
    """The regex that constraint `attr` with `value` stands for (what an FSM is compiled from).

    Raises sglc.fsm.FSMError, TypeError or ValueError for a value that is no valid constraint.
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
    raise ValueError(f"{attr!r} is not a constraint attribute (one of {', '.join(CONSTRAINT_ATTRS)})")


def lowered_pattern(lowered: Any) -> Optional[str]:
    """The pattern a lowered ``fsm`` attribute was compiled from (None if it records none)."""
    if isinstance(lowered, dict) and isinstance(lowered.get("pattern"), str):
        return lowered["pattern"]
    return None
