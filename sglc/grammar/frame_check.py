"""The run-time context check, decided by the frames nearest the top when they can.

A context-dependent group (tokens that leave their rule at exit node ``m`` and then need the
rest of their bytes, ``suffix``, taken by the stacks below) is checked per stack at run time
(``GrammarMatcher._compute_mask``). Usually the nearest frames decide: from their return nodes
the callers' rules take the whole suffix (calling other rules as they like), or refuse it,
without returning below the last of them. :func:`check_in_frames` answers from ``(m, frames,
suffix)`` alone, so the answer holds for every stack with those frames on top, in every request
on the grammar (``CompiledGrammar.frame_check`` caches it); the matcher adds one frame at a time
while the answer is :data:`DEPENDS`, and walks the whole stack only past a few. Arithmetic's
``"1)"`` inside nested parentheses is decided by the two frames below the number, however deep
the nesting.

Why TAKEN is safe: a path that took the suffix's last byte stands on a node of a trimmed
automaton, from which every rule can still end, so the full walk's state after the suffix is
alive whatever lies below. When the frames reach the stack's bottom (``bottom=True``), returning
below them is the text's end, where no byte is taken: the answer is then never DEPENDS.
"""
from __future__ import annotations

REFUSED, TAKEN, DEPENDS = 0, 1, 2

Config = tuple[int, ...]  # automaton nodes, the caller's frame (r's rule) at the bottom, top last


def check_in_frames(next_rows: list[list[int]], refs: list[tuple[tuple[int, int], ...]], final: list[bool],
                    has_bytes: list[bool], m: int, frames: tuple[int, ...], bottom: bool, suffix: bytes) -> int:
    """TAKEN or REFUSED when ``frames`` (return nodes, nearest first) decide whether the stack
    ``[..., frames[-1], ..., frames[0], m]`` takes ``suffix``; DEPENDS when some path returns
    below them first (never when ``bottom``: nothing lies below)."""
    if not suffix:
        return TAKEN

    left = False  # some path returned below the frame

    def close(configs: set[Config]) -> set[Config]:
        nonlocal left
        out: set[Config] = set()
        seen = set(configs)
        work = list(configs)
        while work:
            st = work.pop()
            n = st[-1]
            if has_bytes[n]:
                out.add(st)
            nxt = [st[:-1] + (ret, start) for start, ret in refs[n]]
            if final[n]:
                if len(st) > 1:
                    nxt.append(st[:-1])
                elif not bottom:
                    left = True
            for new in nxt:
                if new not in seen:
                    seen.add(new)
                    work.append(new)
        return out

    configs = close({frames[::-1] + (m,)})
    last = len(suffix) - 1
    for i, b in enumerate(suffix):
        moved = {st[:-1] + (next_rows[st[-1]][b],) for st in configs if next_rows[st[-1]][b] >= 0}
        if moved and i == last:
            return TAKEN
        if not moved:
            return DEPENDS if left else REFUSED
        configs = close(moved)
    raise AssertionError("unreachable: the loop returns at the suffix's last byte")
