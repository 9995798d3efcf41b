"""Character-level DFA: subset construction from the NFA, then minimization.

The alphabet is the partition of all code points into equivalence classes induced by the
pattern's ranges: ``interval_starts[i]`` begins interval ``i`` (which runs to the next start)
and ``interval_classes[i]`` is its class. The transition table is ``num_states x num_classes``
with ``-1`` for "no move" (the implicit dead state).

:func:`minimize` returns the canonical minimal DFA: dead states trimmed, equivalent states merged
(Hopcroft's partition refinement), states numbered breadth-first from the initial state (so the
initial state is 0), and classes that every state treats alike merged. Two patterns with the
same language therefore compile to equal ``DFA`` objects.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .budget import CompileMeter, as_meter
from .charset import MAX_CODE_POINT, SURROGATES
from .nfa import NFA


@dataclass(frozen=True)
class DFA:
    """An immutable DFA over code points (see the module docstring for the layout)."""

    interval_starts: tuple[int, ...]
    interval_classes: tuple[int, ...]
    num_classes: int
    transitions: tuple[tuple[int, ...], ...]
    initial: int
    finals: frozenset[int]

    @property
    def num_states(self) -> int:
        return len(self.transitions)

    def class_of(self, cp: int) -> int:
        """The alphabet class of code point ``cp``."""
        return self.interval_classes[bisect.bisect_right(self.interval_starts, cp) - 1]

    def step(self, state: int, ch: str) -> int:
        """The state after reading ``ch`` from ``state``; -1 when the character is not allowed."""
        cp = ord(ch)
        if SURROGATES[0] <= cp <= SURROGATES[1]:
            return -1
        return self.transitions[state][self.class_of(cp)]

    def walk(self, text: str, state: int | None = None) -> int:
        """The state after reading ``text`` (from ``state``, default initial); -1 if rejected."""
        s = self.initial if state is None else state
        for ch in text:
            s = self.step(s, ch)
            if s < 0:
                return -1
        return s

    def accepts(self, text: str) -> bool:
        """Whether the whole of ``text`` is in the language."""
        s = self.walk(text)
        return s >= 0 and s in self.finals

    def class_ranges(self, cls: int) -> tuple[tuple[int, int], ...]:
        """The code-point ranges making up alphabet class ``cls``."""
        return self._class_ranges[cls]

    @cached_property
    def _class_ranges(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        out: list[list[tuple[int, int]]] = [[] for _ in range(self.num_classes)]
        ends = self.interval_starts[1:] + (MAX_CODE_POINT + 1,)
        for lo, nxt, cls in zip(self.interval_starts, ends, self.interval_classes):
            hi = nxt - 1
            # NOTE: surrogates are never matched; drop them from the class description.
            if lo <= SURROGATES[0] and hi >= SURROGATES[1]:
                pieces = [(lo, SURROGATES[0] - 1), (SURROGATES[1] + 1, hi)]
            elif SURROGATES[0] <= lo and hi <= SURROGATES[1]:
                pieces = []
            else:
                pieces = [(lo, hi)]
            out[cls].extend((a, b) for a, b in pieces if a <= b)
        return tuple(tuple(r) for r in out)

    def out_edges(self, state: int) -> list[tuple[int, int]]:
        """``(class, target)`` for every class with a move from ``state``, in class order."""
        return [(c, t) for c, t in enumerate(self.transitions[state]) if t >= 0]

    @cached_property
    def table(self) -> np.ndarray:
        """The transition table as a read-only int32 array (num_states x num_classes)."""
        arr = np.array(self.transitions, dtype=np.int32).reshape(self.num_states, self.num_classes)
        arr.setflags(write=False)
        return arr


def determinize(nfa: NFA, meter: CompileMeter | None = None) -> DFA:
    """Subset construction. The result is deterministic but neither trimmed nor minimal.

    Budget (``meter``): DFA states and states x classes are checked as each state is added, the
    NFA states held in subsets as each closure is made, and the clock once per state, so an
    exponential blow-up (``(a|b)*a(a|b){25}``) stops at the limit instead of running out of memory.
    """
    meter = as_meter(meter)
    cuts = {0}
    for charset in nfa.charsets():
        for lo, hi in charset.ranges:
            cuts.add(lo)
            if hi < MAX_CODE_POINT:
                cuts.add(hi + 1)
    starts = sorted(cuts)
    num_classes = len(starts)
    meter.check("max_dfa_cells", num_classes, "DFA alphabet classes")
    # NOTE: the tighter of the two state limits, so one comparison per new state suffices.
    max_states = min(meter.budget.max_dfa_states, meter.budget.max_dfa_cells // num_classes)
    # Each NFA state's edges as (elementary class indices, target).
    moves: list[list[tuple[range, int]]] = []
    for out in nfa.edges:
        row = []
        for charset, target in out:
            for lo, hi in charset.ranges:
                a = bisect.bisect_left(starts, lo)
                b = bisect.bisect_right(starts, hi)
                row.append((range(a, b), target))
        moves.append(row)
    first = nfa.epsilon_closure({nfa.start})
    index = {first: 0}
    order = [first]
    rows: list[tuple[int, ...]] = []
    closures: dict[frozenset[int], frozenset[int]] = {}
    held = len(first)  # NFA states held in subsets (closures and their keys)
    for subset in order:  # NOTE: `order` grows while we iterate (breadth-first)
        meter.check_time("building the DFA (subset construction)")
        targets: dict[int, set[int]] = {}
        for s in subset:
            for classes, t in moves[s]:
                for c in classes:
                    targets.setdefault(c, set()).add(t)
        row = [-1] * num_classes
        for c, tset in targets.items():
            key = frozenset(tset)
            closed = closures.get(key)
            if closed is None:
                closed = closures[key] = nfa.epsilon_closure(key)
                held += len(key) + len(closed)
                meter.check("max_subset_states", held, "NFA states held by subset construction")
            nxt = index.get(closed)
            if nxt is None:
                nxt = index[closed] = len(order)
                order.append(closed)
                if len(order) > max_states:  # one of the two checks raises
                    meter.check("max_dfa_states", len(order), "DFA states")
                    meter.check("max_dfa_cells", len(order) * num_classes, f"DFA cells (states x {num_classes} classes)")
            row[c] = nxt
        rows.append(tuple(row))
    finals = frozenset(i for i, sub in enumerate(order) if nfa.accept in sub)
    return DFA(tuple(starts), tuple(range(num_classes)), num_classes, tuple(rows), 0, finals)


def _coreachable(table: np.ndarray, finals: frozenset[int]) -> np.ndarray:
    """Boolean mask of states from which some final state can be reached."""
    n = table.shape[0]
    preds: list[list[int]] = [[] for _ in range(n)]
    src, _cls = np.nonzero(table >= 0)
    for s, t in zip(src.tolist(), table[table >= 0].tolist()):
        preds[t].append(s)
    alive = np.zeros(n, dtype=bool)
    stack = list(finals)
    for f in stack:
        alive[f] = True
    while stack:
        t = stack.pop()
        for s in preds[t]:
            if not alive[s]:
                alive[s] = True
                stack.append(s)
    return alive


def _hopcroft(ext: np.ndarray, is_final: np.ndarray, meter: CompileMeter) -> np.ndarray:
    """Hopcroft's partition refinement on a complete table; returns a block id per state."""
    n, k = ext.shape
    inverse = []  # per class: states sorted by target, and where each target's run starts
    for c in range(k):
        col = ext[:, c]
        order = np.argsort(col, kind="stable")
        starts = np.searchsorted(col[order], np.arange(n + 1))
        inverse.append((order.tolist(), starts.tolist()))
    block = is_final.astype(np.int64).tolist()
    members = [[s for s in range(n) if not is_final[s]], [s for s in range(n) if is_final[s]]]
    if not members[0] or not members[1]:
        return np.zeros(n, dtype=np.int64)
    work = {0 if len(members[0]) <= len(members[1]) else 1}
    while work:
        meter.check_time("minimizing the DFA")
        splitter = list(members[work.pop()])
        for order, starts in inverse:
            touched: dict[int, list[int]] = {}
            for t in splitter:
                for i in range(starts[t], starts[t + 1]):
                    s = order[i]
                    touched.setdefault(block[s], []).append(s)
            for b, inside in touched.items():
                if len(inside) == len(members[b]):
                    continue  # the whole block moves on this class: no split
                inside_set = set(inside)
                outside = [s for s in members[b] if s not in inside_set]
                new = len(members)
                members[b] = outside
                members.append(inside)
                for s in inside:
                    block[s] = new
                # NOTE: Hopcroft's rule: if b still waits, both halves must; otherwise the
                # smaller half suffices.
                if b in work:
                    work.add(new)
                else:
                    work.add(new if len(inside) <= len(outside) else b)
    return np.array(block, dtype=np.int64)


def minimize(dfa: DFA, meter: CompileMeter | None = None) -> DFA:
    """The canonical minimal DFA with the same language (see the module docstring).
    ``meter``'s clock is checked as the partition is refined."""
    meter = as_meter(meter)
    table = np.array(dfa.transitions, dtype=np.int64).reshape(dfa.num_states, dfa.num_classes)
    alive = _coreachable(table, dfa.finals)
    if not alive[dfa.initial]:
        return DFA((0,), (0,), 1, ((-1,),), 0, frozenset())  # the empty language
    n = table.shape[0]
    sink = n  # one explicit dead state absorbs every missing or dead move
    ext = np.where((table >= 0) & alive[np.maximum(table, 0)], table, sink)
    ext = np.vstack([ext, np.full((1, ext.shape[1]), sink)])
    is_final = np.zeros(n + 1, dtype=bool)
    is_final[list(dfa.finals)] = True
    block = _hopcroft(ext, is_final, meter)
    dead_block = block[sink]
    # Quotient automaton, renumbered breadth-first from the initial state.
    rep: dict[int, int] = {}
    for s in range(n):
        rep.setdefault(int(block[s]), s)
    # NOTE: discover successors in code-point order (classes by first interval), so the
    # numbering does not depend on how finely the input DFA split its alphabet.
    scan_order = list(dict.fromkeys(dfa.interval_classes))
    block_ext = block[ext]
    new_id = {int(block[dfa.initial]): 0}
    order = [int(block[dfa.initial])]
    for b in order:  # NOTE: `order` grows while we iterate (breadth-first)
        succ = block_ext[rep[b]]
        for c in scan_order:
            tb = int(succ[c])
            if tb != dead_block and tb not in new_id:
                new_id[tb] = len(order)
                order.append(tb)
    rows = [
        [-1 if int(tb) == dead_block else new_id[int(tb)] for tb in block_ext[rep[b]].tolist()]
        for b in order
    ]
    finals = frozenset(new_id[int(block[f])] for f in dfa.finals if alive[f])
    return _merge_classes(dfa, rows, finals)


def _merge_classes(dfa: DFA, rows: list[list[int]], finals: frozenset[int]) -> DFA:
    """Merge alphabet classes with identical columns; renumber classes by first occurrence."""
    columns = list(zip(*rows)) if rows else []
    col_id: dict[tuple[int, ...], int] = {}
    old_to_new: list[int] = [0] * dfa.num_classes
    # Visit old classes in the order of the intervals so numbering is canonical.
    for old in dfa.interval_classes:
        key = columns[old]
        if key not in col_id:
            col_id[key] = len(col_id)
        old_to_new[old] = col_id[key]
    starts: list[int] = []
    classes: list[int] = []
    for lo, old in zip(dfa.interval_starts, dfa.interval_classes):
        c = old_to_new[old]
        if classes and classes[-1] == c:
            continue  # adjacent intervals of one class form one interval
        starts.append(lo)
        classes.append(c)
    by_new = sorted(col_id.items(), key=lambda kv: kv[1])
    new_rows = tuple(zip(*(col for col, _ in by_new))) if rows else ()
    table = tuple(tuple(r) for r in new_rows)
    return DFA(tuple(starts), tuple(classes), len(by_new), table, 0, finals)
