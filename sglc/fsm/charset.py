"""Sets of Unicode code points stored as sorted, disjoint, non-adjacent inclusive ranges.

A negated class such as ``[^"]`` is two ranges, never an enumeration of a million code points.
The universe is every Unicode scalar value: 0..0x10FFFF minus the surrogates D800..DFFF, which
cannot occur in valid text (or be encoded as UTF-8), so no set ever contains them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


def _normalize(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort, merge overlapping/adjacent ranges and cut out the surrogate block."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    cut: list[tuple[int, int]] = []
    s_lo, s_hi = SURROGATES
    for lo, hi in out:
        if hi < s_lo or lo > s_hi:
            cut.append((lo, hi))
            continue
        if lo < s_lo:
            cut.append((lo, s_lo - 1))
        if hi > s_hi:
            cut.append((s_hi + 1, hi))
    return tuple(cut)


@dataclass(frozen=True)
class CharSet:
    """An immutable set of code points. ``ranges`` is normalized: sorted, disjoint, merged."""

    ranges: tuple[tuple[int, int], ...] = ()

    # NOTE: construct through the helpers below (or ``CharSet.of_ranges``) so ``ranges`` stays
    # normalized; equality and hashing rely on it.
    @staticmethod
    def of_ranges(ranges: Iterable[tuple[int, int]]) -> "CharSet":
        """A set from arbitrary (possibly overlapping, unsorted) inclusive ranges."""
        return CharSet(_normalize(ranges))

    @staticmethod
    def of_chars(chars: Iterable[str]) -> "CharSet":
        """A set holding exactly the given characters."""
        return CharSet.of_ranges((ord(c), ord(c)) for c in chars)

    def union(self, other: "CharSet") -> "CharSet":
        return CharSet.of_ranges(self.ranges + other.ranges)

    def negate(self) -> "CharSet":
        """The complement with respect to all Unicode scalar values."""
        out: list[tuple[int, int]] = []
        nxt = 0
        for lo, hi in self.ranges:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_CODE_POINT:
            out.append((nxt, MAX_CODE_POINT))
        return CharSet.of_ranges(out)

    def difference(self, other: "CharSet") -> "CharSet":
        return self.negate().union(other).negate()

    def intersection(self, other: "CharSet") -> "CharSet":
        return self.negate().union(other.negate()).negate()

    def __contains__(self, ch: str | int) -> bool:
        cp = ord(ch) if isinstance(ch, str) else ch
        return any(lo <= cp <= hi for lo, hi in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def size(self) -> int:
        """Number of code points in the set."""
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def single(self) -> str | None:
        """The character if the set holds exactly one, else None."""
        if len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1]:
            return chr(self.ranges[0][0])
        return None

    def __str__(self) -> str:
        return describe_ranges(self.ranges)


def describe_ranges(ranges: Iterable[tuple[int, int]]) -> str:
    """A regex-like rendering, e.g. ``'a'`` or ``[0-9a-f]`` (for printing and error messages)."""
    ranges = tuple(ranges)
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return repr(chr(ranges[0][0]))
    parts = []
    for lo, hi in ranges:
        a = _show(lo)
        parts.append(a if lo == hi else f"{a}-{_show(hi)}")
    return "[" + "".join(parts) + "]"


def _show(cp: int) -> str:
    ch = chr(cp)
    if ch in "\\]-^[":
        return "\\" + ch
    if ch.isprintable() and not ch.isspace():
        return ch
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


ANY = CharSet(((0, 0xD7FF), (0xE000, MAX_CODE_POINT)))
DOT = CharSet.of_chars("\n").negate()  # Python's `.` without DOTALL: anything but newline
# NOTE: \d \w \s follow Python's re.ASCII semantics (ASCII digits, word chars, whitespace);
# constrained generation wants [0-9] for \d, not every Unicode decimal digit.
DIGIT = CharSet(((ord("0"), ord("9")),))
WORD = CharSet.of_ranges([(48, 57), (65, 90), (97, 122), (95, 95)])
SPACE = CharSet.of_chars(" \t\n\r\f\v")
