"""Expressions: what `s += ...` accepts besides plain strings.

An expression is a primitive such as a gen (inert data, primitives.py), a symbolic value read
while tracing (symbolic.py), or a concatenation of those and strings. The program state hands
each part to its stream sink, which records it (tracing) or runs it (eager). This module is the
bottom of the DSL: it knows no primitive and no symbolic value, only the base they share.
"""
from __future__ import annotations

from typing import Any

from sglc.frontend.errors import user_source


class Expr:
    """Base of everything appendable but str (primitives, symbolic values); `+` builds a :class:`Concat`."""

    __slots__ = ()

    def __add__(self, other: Any) -> "Concat":
        return Concat.of(self, other)

    def __radd__(self, other: Any) -> "Concat":
        return Concat.of(other, self)


class Concat(Expr):
    """Parts appended in order: strings, primitives and symbolic values (never nested Concats)."""

    __slots__ = ("parts",)

    def __init__(self, parts: tuple[Any, ...]) -> None:
        self.parts = parts

    @staticmethod
    def of(*items: Any) -> "Concat":
        """Flatten `items` into one Concat, checking each part is appendable."""
        parts: list[Any] = []
        for item in items:
            if isinstance(item, Concat):
                parts.extend(item.parts)
            else:
                check_appendable(item)
                parts.append(item)
        return Concat(tuple(parts))

    def __repr__(self) -> str:
        return "Concat(" + ", ".join(repr(p) for p in self.parts) + ")"


def check_appendable(item: Any) -> None:
    """Raise TypeError unless `item` can be appended to a program state (a str or an Expr)."""
    if isinstance(item, (str, Expr)):
        return
    if item is None:
        raise TypeError(f"{user_source()}: cannot append None to a program state")
    raise TypeError(
        f"{user_source()}: cannot append a value of type {type(item).__name__} to a program state; append a str, "
        "an sgl primitive (gen, select, image, ...) or a value read from the state "
        "(convert other values with str() first)"
    )
