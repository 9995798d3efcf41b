"""Expressions: what `s += ...` accepts besides plain strings and symbolic values.

An expression is inert data (a primitive such as a gen, or a concatenation of parts); the program
state hands each part to its stream sink, which records it (tracing) or runs it (eager).
"""
from __future__ import annotations

from typing import Any

from sglc.frontend.errors import user_source


class Expr:
    """Base of the DSL's appendable primitives; `+` builds a :class:`Concat`."""

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
    """Raise TypeError unless `item` can be appended to a program state."""
    from sglc.frontend.symbolic import SymbolicValue

    if isinstance(item, (str, Expr, SymbolicValue)):
        return
    if item is None:
        raise TypeError(f"{user_source()}: cannot append None to a program state")
    raise TypeError(
        f"{user_source()}: cannot append a value of type {type(item).__name__} to a program state; append a str, "
        "an sgl primitive (gen, select, image, ...) or a value read from the state "
        "(convert other values with str() first)"
    )
