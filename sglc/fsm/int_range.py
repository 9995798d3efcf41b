"""Regexes for integer ranges.

``int_range_regex(7, 123)`` -> ``[7-9]|[1-9][0-9]|1(?:[0-1][0-9]|2[0-3])``.

Numbers are written canonically: no leading zeros, no ``+``, no ``-0``. Either bound may be
``None`` (unbounded).
"""
from __future__ import annotations


def _same_length(lo: str, hi: str) -> str:
    """Regex for the decimal strings of one length between ``lo`` and ``hi`` (inclusive)."""
    if lo == hi:
        return lo
    i = next(k for k in range(len(lo)) if lo[k] != hi[k])
    prefix, lo_rest, hi_rest = lo[:i], lo[i:], hi[i:]
    n = len(lo_rest) - 1
    if n == 0:
        return f"{prefix}[{lo_rest}-{hi_rest}]"
    alts = []
    full_lo, full_hi = int(lo_rest[0]), int(hi_rest[0])
    if lo_rest[1:] != "0" * n:
        alts.append(lo_rest[0] + _group(_same_length(lo_rest[1:], "9" * n)))
        full_lo += 1
    if hi_rest[1:] != "9" * n:
        full_hi -= 1
    if full_lo <= full_hi:
        digit = str(full_lo) if full_lo == full_hi else f"[{full_lo}-{full_hi}]"
        alts.append(digit + ("[0-9]" if n == 1 else f"[0-9]{{{n}}}"))
    if hi_rest[1:] != "9" * n:
        alts.append(hi_rest[0] + _group(_same_length("0" * n, hi_rest[1:])))
    return prefix + _group("|".join(alts))


def _group(regex: str) -> str:
    return f"(?:{regex})" if "|" in regex else regex


def _nonnegative(lo: int, hi: int | None) -> list[str]:
    """Alternatives covering ``lo..hi`` (``0 <= lo``; ``hi`` None = unbounded)."""
    alts = []
    length = len(str(lo))
    while hi is None or length <= len(str(hi)):
        first = 0 if length == 1 else 10 ** (length - 1)
        last = 10**length - 1
        a = max(lo, first)
        b = last if hi is None else min(hi, last)
        if hi is None and a == first:
            # every number of this length and longer
            alts.append(_open_from_length(length))
            break
        if a <= b:
            alts.append(_same_length(str(a), str(b)))
        length += 1
    return alts


def _open_from_length(length: int) -> str:
    """Every canonical number with at least ``length`` digits (``length == 1`` includes 0)."""
    if length == 1:
        return "0|[1-9][0-9]*"
    return f"[1-9][0-9]{{{length - 1},}}"


def int_range_regex(lo: int | None, hi: int | None) -> str:
    """A regex matching exactly the canonical decimal integers in ``[lo, hi]``."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty integer range [{lo}, {hi}]")
    alts: list[str] = []
    if lo is None or lo < 0:
        # negative part: -(magnitudes from max(1, -hi) to -lo)
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        mag_hi = None if lo is None else -lo
        neg = _nonnegative(mag_lo, mag_hi)
        alts.append("-" + _group("|".join(neg)))
    if hi is None or hi >= 0:
        alts.extend(_nonnegative(max(lo or 0, 0), hi))
    return "|".join(alts)
