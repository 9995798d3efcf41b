"""The regex syntax tree: what the parser produces and the NFA builder consumes.

Five node kinds, all immutable: ``Chars`` (one character out of a set), ``Concat``, ``Alt``,
``Repeat`` (``min``..``max`` copies, ``max=None`` for unbounded) and ``Anchor`` (``^``/``$``,
which survive parsing only so their placement can be checked; see ``strip_anchors``).
``to_regex`` prints a tree back as a pattern the parser (and Python ``re``) reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .charset import CharSet


@dataclass(frozen=True)
class Chars:
    """Exactly one character from ``chars``."""

    chars: CharSet


@dataclass(frozen=True)
class Concat:
    """The items in sequence; ``Concat(())`` is the empty string."""

    items: tuple["Node", ...]


@dataclass(frozen=True)
class Alt:
    """Any one of the options."""

    options: tuple["Node", ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max is None``: unbounded)."""

    item: "Node"
    min: int
    max: int | None


@dataclass(frozen=True)
class Anchor:
    """``^``/``\\A`` (kind "start") or ``$``/``\\Z`` (kind "end") at ``position`` in the source."""

    kind: str
    position: int


Node = Union[Chars, Concat, Alt, Repeat, Anchor]
EMPTY = Concat(())


def literal(text: str) -> Node:
    """The tree matching exactly ``text``."""
    return Concat(tuple(Chars(CharSet.of_chars(c)) for c in text))


def _escape_char(cp: int, in_class: bool) -> str:
    ch = chr(cp)
    special = "\\]^-[" if in_class else "\\.^$|?*+()[]{}"
    if ch in special:
        return "\\" + ch
    if ch.isprintable():
        return ch
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def to_regex(node: Node) -> str:
    """Print ``node`` as a regex string that parses back to an equivalent tree."""
    if isinstance(node, Chars):
        single = node.chars.single()
        if single is not None:
            return _escape_char(ord(single), in_class=False)
        if not node.chars.ranges:
            return "[^\\s\\S]"  # the empty set: matches nothing
        body = "".join(
            _escape_char(lo, True) if lo == hi else f"{_escape_char(lo, True)}-{_escape_char(hi, True)}"
            for lo, hi in node.chars.ranges
        )
        return f"[{body}]"
    if isinstance(node, Concat):
        return "".join(
            f"(?:{to_regex(item)})" if isinstance(item, Alt) else to_regex(item) for item in node.items
        )
    if isinstance(node, Alt):
        return "|".join(to_regex(o) for o in node.options)
    if isinstance(node, Repeat):
        inner = to_regex(node.item)
        if not (isinstance(node.item, Chars)):
            inner = f"(?:{inner})"
        if (node.min, node.max) == (0, None):
            return inner + "*"
        if (node.min, node.max) == (1, None):
            return inner + "+"
        if (node.min, node.max) == (0, 1):
            return inner + "?"
        if node.max is None:
            return f"{inner}{{{node.min},}}"
        if node.min == node.max:
            return f"{inner}{{{node.min}}}"
        return f"{inner}{{{node.min},{node.max}}}"
    if isinstance(node, Anchor):
        return "^" if node.kind == "start" else "$"
    raise TypeError(f"not a regex node: {node!r}")


def escape(text: str) -> str:
    """``text`` as a regex matching exactly it (only metacharacters and non-printables escaped)."""
    return "".join(_escape_char(ord(c), in_class=False) for c in text)
