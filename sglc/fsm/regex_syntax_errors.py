"""Lark parse errors -> the error Python ``re`` reports for the same mistake (with position).

Kept apart from the grammar: this module only reads the pattern text around the failure.
"""
from __future__ import annotations

import re

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .errors import InvalidRegexError, UnsupportedRegexError

# A brace quantifier as Python reads it: {m}, {m,}, {m,n}, {,n} and {,} (``{}`` is literal).
BRACE_QUANTIFIER = re.compile(r"\{(?:[0-9]+(?:,[0-9]*)?|,[0-9]*)\}")


def follows_quantifier(pattern: str, pos: int) -> bool:
    """Whether ``pattern[:pos]`` ends with a quantifier (not an escaped quantifier character)."""
    prev = pattern[:pos]
    m = re.search(r"(?:[*+?]|\{[0-9,]*\})\??$", prev)
    if m is None:
        return False
    backslashes = len(prev[: m.start()]) - len(prev[: m.start()].rstrip("\\"))
    return backslashes % 2 == 0


def _unclosed(pattern: str) -> tuple[int | None, int | None]:
    """Positions of the innermost unclosed group and of an unclosed class (or None)."""
    groups: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            start = i
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1  # a leading ']' is a literal
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            if i >= n:
                return (groups[-1] if groups else None), start
        elif ch == "(":
            groups.append(i)
        elif ch == ")" and groups:
            groups.pop()
        i += 1
    return (groups[-1] if groups else None), None


def _misplaced_quantifier(pattern: str, pos: int) -> InvalidRegexError | UnsupportedRegexError:
    """A quantifier where none may stand: possessive, repeated, or with nothing to repeat."""
    after_quant = follows_quantifier(pattern, pos)
    if after_quant and pattern[pos] == "+":
        return UnsupportedRegexError("possessive quantifier", pattern, pos)
    return InvalidRegexError("multiple repeat" if after_quant else "nothing to repeat", pattern, pos)


def syntax_error(pattern: str, err: UnexpectedInput) -> InvalidRegexError | UnsupportedRegexError:
    """Turn a lark error into the message Python ``re`` would give for the same mistake."""
    if isinstance(err, UnexpectedEOF) or (
        isinstance(err, UnexpectedToken) and err.token.type == "$END"
    ):
        group, klass = _unclosed(pattern)
        if klass is not None:
            return InvalidRegexError("unterminated character set", pattern, klass)
        pos = group if group is not None else len(pattern)
        return InvalidRegexError("missing ), unterminated subpattern", pattern, pos)
    if isinstance(err, UnexpectedToken):
        tok = err.token
        pos = tok.start_pos if tok.start_pos is not None else len(pattern)
        at = pattern[pos : pos + 1]
        brace = at == "{" and BRACE_QUANTIFIER.match(pattern, pos)
        if tok.type == "QUANT" or at in ("*", "+", "?") or brace:
            return _misplaced_quantifier(pattern, pos)
        if tok.type == "RPAR":
            return InvalidRegexError("unbalanced parenthesis", pattern, pos)
        return InvalidRegexError(f"unexpected {str(tok)!r}", pattern, pos)
    assert isinstance(err, UnexpectedCharacters)
    pos = err.pos_in_stream
    ch = pattern[pos]
    if ch == "\\":
        return InvalidRegexError("bad escape (end of pattern)", pattern, pos)
    if ch == ")":
        return InvalidRegexError("unbalanced parenthesis", pattern, pos)
    if ch in "*+?{":
        return _misplaced_quantifier(pattern, pos)
    if ch == "]" and _unclosed(pattern)[1] is not None:
        return InvalidRegexError("unterminated character set", pattern, _unclosed(pattern)[1])
    return InvalidRegexError(f"unexpected character {ch!r}", pattern, pos)
