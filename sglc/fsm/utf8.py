"""Code-point ranges -> UTF-8 byte-range sequences.

``utf8_sequences(lo, hi)`` splits a range of scalar values into pieces whose UTF-8 encodings
are exactly the cartesian products of per-position byte ranges, e.g. U+0080..U+07FF becomes
``[C2-DF][80-BF]``. This is what lets a code-point automaton run on bytes (and so accept a
token that ends in the middle of a multi-byte character). Surrogates are skipped.
"""
from __future__ import annotations

from functools import lru_cache

from .charset import MAX_CODE_POINT, SURROGATES

ByteSeq = tuple[tuple[int, int], ...]

_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF)


def _encoded_length(cp: int) -> int:
    return 1 if cp <= 0x7F else 2 if cp <= 0x7FF else 3 if cp <= 0xFFFF else 4


@lru_cache(maxsize=4096)
def utf8_sequences(lo: int, hi: int) -> tuple[ByteSeq, ...]:
    """Byte-range sequences whose encodings together are exactly UTF-8 of ``lo..hi``. Cached: a
    grammar's few character classes come back in every rule that uses them, and in every compile."""
    if lo <= hi <= 0x7F and lo >= 0:
        return (((lo, hi),),)
    if not 0 <= lo <= hi <= MAX_CODE_POINT:
        raise ValueError(f"bad code point range {lo:#x}..{hi:#x}")
    out: list[ByteSeq] = []
    stack = [(lo, hi)]
    while stack:
        a, b = stack.pop()
        if a > b:
            continue
        if a <= SURROGATES[1] and b >= SURROGATES[0]:
            stack.append((a, SURROGATES[0] - 1))
            stack.append((SURROGATES[1] + 1, b))
            continue
        split = next((lim for lim in _LENGTH_LIMITS if a <= lim < b), None)
        if split is not None:
            stack.append((a, split))
            stack.append((split + 1, b))
            continue
        if b <= 0x7F:
            out.append(((a, b),))
            continue
        for i in range(1, _encoded_length(a)):
            m = (1 << (6 * i)) - 1
            if a & ~m == b & ~m:
                continue
            # NOTE: split until every position below the first differing one covers a full
            # continuation range, so the encodings form a product of byte ranges.
            if a & m:
                stack.append((a, a | m))
                stack.append(((a | m) + 1, b))
                break
            if b & m != m:
                stack.append((a, (b & ~m) - 1))
                stack.append((b & ~m, b))
                break
        else:
            ea, eb = chr(a).encode("utf-8"), chr(b).encode("utf-8")
            out.append(tuple(zip(ea, eb)))
    out.sort()
    return tuple(out)
