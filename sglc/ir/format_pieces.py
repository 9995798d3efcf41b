"""The pieces of a FORMAT node (f-strings, str.format, % and str.join over run-time values).

    "constant text"
    {"input": i}                          format(value_i, "")
    {"input": i, "conversion": "r"}       format(repr(value_i), "")       (also "s" str, "a" ascii)
    {"input": i, "spec": ">10"}           format(value_i, ">10")
    {"input": i, "printf": "%5.2f"}       "%5.2f" % (value_i,)            (conversion applies first)
    {"input": i, "join": ", "}            ", ".join(value_i)

`check` returns a problem or None (op_rules); `render` is the run-time meaning (the executor): the
text eager Python builds from the same values.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Sequence

CONVERSIONS = {"s": str, "r": repr, "a": ascii}
_PRINTF = re.compile(r"%[#0\- +]*\d*(?:\.\d+)?[hlL]?[diouxXeEfFgGcrsa]")
_KEYS = frozenset({"input", "conversion", "spec", "printf", "join"})


def check(pieces: Any, num_inputs: int) -> Optional[str]:
    """What is wrong with `pieces` for a node with `num_inputs` inputs (None: nothing)."""
    if not isinstance(pieces, list):
        return "must be a list of strings and {'input': i, ...} references"
    used: set[int] = set()
    for piece in pieces:
        if isinstance(piece, str):
            continue
        if not isinstance(piece, dict) or not set(piece) <= _KEYS or "input" not in piece:
            return f"has a piece {_short(piece)} that is neither a string nor an {{'input': i, ...}} reference"
        index = piece["input"]
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < num_inputs:
            return f"refers to input {index!r}, but the node has {num_inputs}"
        used.add(index)
        if piece.get("conversion", "s") not in CONVERSIONS:
            return f"has conversion {piece['conversion']!r}, not one of s, r, a"
        for key in ("spec", "join"):
            if key in piece and not isinstance(piece[key], str):
                return f"has a {key} that is not a string: {_short(piece[key])}"
        if "printf" in piece and (not isinstance(piece["printf"], str) or not _PRINTF.fullmatch(piece["printf"])):
            return f"has printf {_short(piece['printf'])}, not one %-conversion such as '%5.2f'"
        if sum(key in piece for key in ("spec", "printf", "join")) > 1:
            return f"has a piece with more than one of spec, printf, join: {_short(piece)}"
    if used != set(range(num_inputs)):
        return f"does not use every input (uses {sorted(used)} of {num_inputs})"
    return None


def render(pieces: Sequence[Any], values: Sequence[Any]) -> str:
    """The text of (checked) `pieces` over the inputs' run-time `values`."""
    out: list[str] = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append(piece)
            continue
        value = values[piece["input"]]
        if "join" in piece:
            out.append(piece["join"].join(value))
            continue
        if "conversion" in piece:
            value = CONVERSIONS[piece["conversion"]](value)
        out.append(piece["printf"] % (value,) if "printf" in piece else format(value, piece.get("spec", "")))
    return "".join(out)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
