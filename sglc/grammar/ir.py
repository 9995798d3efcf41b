"""The grammar IR: every grammar syntax we accept (GBNF, EBNF, lark, JSON Schema) parses into it,
and the token-level engine compiles it. A context-free grammar over Unicode characters.

A :class:`Grammar` is named rules, each one :data:`Expr`; ``root`` names the start rule.
Expressions are immutable and hashable (frozen dataclasses), so equal sub-expressions share
compiled automata:

- :class:`Literal` ``text``: exactly these characters (``Literal("")`` is the empty string);
- :class:`CharClass` ``chars``: one character of a :class:`~sglc.fsm.charset.CharSet`
  (negated classes are stored as their complement: a set is always positive);
- :class:`Seq` ``items``: each in turn (``Seq(())`` is the empty string);
- :class:`Choice` ``options``: one of them (never empty: a choice of nothing matches nothing,
  which no front end produces);
- :class:`Repeat` ``item, min, max``: ``min`` to ``max`` copies (``max=None``: unbounded);
- :class:`RuleRef` ``name``: the rule of that name (recursion goes through rule references).

Text is characters, not bytes: the engine encodes to UTF-8 when it meets the vocabulary.
``verify`` checks a grammar is whole (every reference defined, the root present, bounds sane);
``size`` counts expression nodes so budgets are checked before compiling; ``to_ebnf`` prints a
grammar in the GBNF/EBNF syntax (``sglc inspect``; parse it back and you get the same grammar).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Union

from sglc.fsm.charset import CharSet

from .errors import GrammarError


@dataclass(frozen=True, slots=True)
class Literal:
    text: str


@dataclass(frozen=True, slots=True)
class CharClass:
    chars: CharSet


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class Choice:
    options: tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    item: "Expr"
    min: int = 0
    max: int | None = None


@dataclass(frozen=True, slots=True)
class RuleRef:
    name: str


Expr = Union[Literal, CharClass, Seq, Choice, Repeat, RuleRef]


@dataclass(frozen=True)
class Grammar:
    """Named rules and the start rule's name. Build with the front ends; check with ``verify``."""

    rules: Mapping[str, Expr]
    root: str = "root"

    def verify(self) -> "Grammar":
        """Raise :class:`GrammarError` naming the first problem; return self when whole."""
        if self.root not in self.rules:
            raise GrammarError(f"the grammar has no root rule {self.root!r}")
        for name, expr in self.rules.items():
            for node in walk(expr):
                if isinstance(node, RuleRef) and node.name not in self.rules:
                    raise GrammarError(f"rule {name!r} refers to undefined rule {node.name!r}")
                if isinstance(node, Repeat):
                    if node.min < 0 or (node.max is not None and node.max < node.min):
                        raise GrammarError(
                            f"rule {name!r}: repeat bounds {{{node.min},{node.max}}} are not 0 <= min <= max")
                if isinstance(node, Choice) and not node.options:
                    raise GrammarError(f"rule {name!r} has a choice with no options")
        return self

    def size(self) -> int:
        """Expression nodes over all rules (a bounded repeat counts once: the engine keeps a
        counter, it does not unroll)."""
        return sum(1 for expr in self.rules.values() for _ in walk(expr))

    def to_ebnf(self) -> str:
        """The grammar in GBNF/EBNF syntax, root first."""
        order = [self.root] + sorted(n for n in self.rules if n != self.root)
        return "\n".join(f"{name} ::= {show(self.rules[name])}" for name in order)


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, itself first (rule references are not followed)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Seq):
            stack.extend(reversed(node.items))
        elif isinstance(node, Choice):
            stack.extend(reversed(node.options))
        elif isinstance(node, Repeat):
            stack.append(node.item)


def show(expr: Expr) -> str:
    """One expression in GBNF/EBNF syntax."""
    if isinstance(expr, Literal):
        return _quote(expr.text)
    if isinstance(expr, CharClass):
        return show_class(expr.chars)
    if isinstance(expr, RuleRef):
        return expr.name
    if isinstance(expr, Seq):
        if not expr.items:
            return '""'
        return " ".join(_grouped(item) for item in expr.items)
    if isinstance(expr, Choice):
        return " | ".join(show(option) for option in expr.options)
    if isinstance(expr, Repeat):
        inner = _grouped(expr.item, tight=True)
        if (expr.min, expr.max) == (0, None):
            return inner + "*"
        if (expr.min, expr.max) == (1, None):
            return inner + "+"
        if (expr.min, expr.max) == (0, 1):
            return inner + "?"
        if expr.max == expr.min:
            return f"{inner}{{{expr.min}}}"
        return f"{inner}{{{expr.min},{'' if expr.max is None else expr.max}}}"
    raise TypeError(f"not a grammar expression: {expr!r}")


def _grouped(expr: Expr, tight: bool = False) -> str:
    # NOTE: show() once: called twice, nested repeats doubled the work per level (2^depth).
    text = show(expr)
    needs = isinstance(expr, Choice) or (tight and isinstance(expr, (Seq, Repeat)) and text != '""')
    return f"({text})" if needs else text


def show_class(chars: CharSet) -> str:
    """``chars`` as a bracketed class; the empty set as the negation of everything (GBNF and
    xgrammar have no empty class)."""
    if not chars.ranges:
        return "[^\\x00-\\U0010FFFF]"
    parts = []
    for lo, hi in chars.ranges:
        parts.append(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}")
    return "[" + "".join(parts) + "]"


def _class_char(cp: int) -> str:
    # NOTE: only ASCII is printed raw, so the text survives any terminal or log; what GBNF
    # gives meaning inside a class (] - ^ [ and the backslash) is escaped.
    ch = chr(cp)
    if ch in "]-^[\\":
        return "\\" + ch
    if 0x20 <= cp < 0x7F:
        return ch
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if cp <= 0xFF:
        return f"\\x{cp:02X}"
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
