"""The compile-time context check of the token classes (token_masks.py): after a token leaves
the rule of the position it was classified at, can *some* stack below take the rest of it? A
suffix no context takes (``")["`` after a number) is dropped at compile time instead of being
checked at every decoding step. :class:`SomeContext` is the Python walk (the reference and the
fallback); context_check_native.py runs the same walk in C++.
"""
from __future__ import annotations

from .automaton import Automaton
from .context_check_native import contexts_accept as native_contexts_accept
from .context_check_native import native_context_check


class SomeContext:
    """Whether *some* stack below could take a suffix after leaving a rule at node ``m``: the
    matcher's walk with an open bottom (a pop past it continues at the return node of every
    call site of the rule). Suffixes no context takes (``")["`` after a number) are dropped at
    compile time instead of being checked at every step."""

    def __init__(self, auto: Automaton) -> None:
        self.table = auto.table
        self._rows: dict[int, list[int]] = {}  # NOTE: per node as reached: most are never
        self.final = auto.final.tolist()
        self.has_bytes = auto.has_bytes.tolist()
        self.node_rule = auto.node_rule.tolist()
        starts = auto.rule_start.tolist()
        self.refs = [[(starts[c], t) for c, t in auto.refs(n)] for n in range(auto.num_nodes)]
        self.callers: dict[int, list[int]] = {}
        for n in range(auto.num_nodes):
            for c, t in auto.refs(n):
                self.callers.setdefault(c, []).append(t)
        self._memo: dict[tuple[int, bytes], tuple[bool, frozenset]] = {}

    def _close(self, configs: set[tuple[int, ...]]) -> set[tuple[int, ...]]:
        out: set[tuple[int, ...]] = set()
        seen = set(configs)
        work = list(configs)
        while work:
            st = work.pop()
            n = st[-1]
            if self.has_bytes[n]:
                out.add(st)
            nxt = [st[:-1] + (t, start) for start, t in self.refs[n]]
            if self.final[n]:
                nxt += [st[:-1]] if len(st) > 1 else [(t,) for t in self.callers.get(self.node_rule[n], ())]
            for new in nxt:
                if new not in seen:
                    seen.add(new)
                    work.append(new)
        return out

    def row(self, node: int) -> list[int]:
        got = self._rows.get(node)
        if got is None:
            got = self._rows[node] = self.table[node].tolist()
        return got

    def accepts(self, m: int, suffix: bytes) -> bool:
        return self._after(m, suffix)[0]

    def _after(self, m: int, prefix: bytes) -> tuple[bool, frozenset]:
        """(every byte of ``prefix`` was taken, the configurations after it), memoized per prefix:
        the suffixes of one exit node share most of their prefixes."""
        key = (m, prefix)
        got = self._memo.get(key)
        if got is None:
            if not prefix:
                got = (True, frozenset(self._close({(m,)})))
            else:
                configs = self._after(m, prefix[:-1])[1]  # NOTE: empty once a byte was refused
                b = prefix[-1]
                moved = {st[:-1] + (self.row(st[-1])[b],) for st in configs if self.row(st[-1])[b] >= 0}
                got = (bool(moved), frozenset(self._close(moved)) if moved else frozenset())
            self._memo[key] = got
        return got


def contexts_accept(auto: Automaton, queries: list[tuple[int, bytes]], native: bool = True) -> list[bool]:
    """Per (exit node, suffix): whether some context takes the suffix (in C++ unless ``native``
    is False or native code is unavailable)."""
    lib = native_context_check() if native else None
    if lib is not None:
        return native_contexts_accept(lib, auto, queries)
    possible = SomeContext(auto)
    return [possible.accepts(m, suffix) for m, suffix in queries]
