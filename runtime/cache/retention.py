"""Retention: the cached prefixes programs said they will extend, and when (issue 28).

A finished call that carried a ``ProgramHint`` leaves its final text in the radix tree; this
table remembers, for the node where that text ends, the program and the hint's ``next_use``
(how many of the program's calls run before one extends it). Eviction then orders leaves by
expected next use instead of recency alone (Belady from the hints, as KVFlow does with its
agent step graph):

    1. evict first: texts no call will extend (``next_use`` NEVER) and those of ended programs;
    2. then texts of provisional programs (``set_provisional``; scheduling/program_table.py):
       programs started past the memory rule while the engine had nothing else to run;
    3. then hinted texts over the capacity (below), in hint order;
    4. then unhinted texts and texts whose lease ran out, least recently used first;
    5. then hinted texts within the capacity, in hint order;
    6. last, texts of programs with a call waiting in the queue now (``set_waiting``): a
       runnable call's prefix goes only when nothing else is left.

Hint order: the farthest next use first; among equal next uses the least recently used first.
NOTE: MRU among equal next uses (texts waiting on the same kind of event come back in the
order they left) was measured and lost to LRU on bench/bench_program_hints.py's tool agents: a
compute-bound engine's queue, not the order texts left, decides when they come back.

Bounds (a client cannot pin the pool, DESIGN §9): every hint has a lease (the hint's, capped;
the default when it asks none) and after it the text is unhinted; the tokens on the paths of
protected hints (each token once, however many hints share it) never exceed ``capacity``: a new
hint that would pass it demotes protected hints in eviction order (possibly itself) to class 2,
which goes before every unhinted text, so hints never take memory from clients without them
beyond the capacity. Provisional programs' texts count towards no capacity: they protect nothing.

Nodes are the radix cache's ``TreeNode`` objects; a node split keeps its lower half as the same
object, so a hint stays with the end of its text. A text is evicted leaf by leaf from its end:
when its last node goes and the parent becomes a leaf, the parent inherits the node's class (a
dead program's text goes first all the way up, not only its last edge). Not thread-safe (the
scheduler's thread).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from sglc.wire.program_hint import NEVER, ProgramHint

#: Eviction classes, lowest evicted first.
EVICT_FIRST, PROVISIONAL, OVER_CAPACITY, UNHINTED, HINTED, WANTED_NOW = 0, 1, 2, 3, 4, 5
#: Lease of a hint that asks none, and the longest one granted (seconds).
DEFAULT_LEASE_S = 30.0
MAX_LEASE_S = 300.0


@dataclass(slots=True)
class Retained:
    """One live hint: ``program_id`` will extend the text ending at its node after
    ``next_use`` of its other calls, until ``deadline`` (clock seconds)."""

    program_id: str
    next_use: int
    deadline: float
    rank: int = 0  # the program's start order (larger = younger; scheduling/program_table.py)
    protected: bool = True  # within the capacity (False: demoted, evicted before unhinted texts)


class RetentionTable:
    """Live hints by node and by program, the evict-first set, and their counts."""

    def __init__(self, capacity: int, *, default_lease_s: float = DEFAULT_LEASE_S,
                 max_lease_s: float = MAX_LEASE_S, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 0:
            raise ValueError(f"retention capacity must be >= 0 tokens, got {capacity}")
        self.capacity = capacity
        self.default_lease_s = default_lease_s
        self.max_lease_s = max_lease_s
        self.clock = clock
        self._live: dict[Any, Retained] = {}
        self._by_program: dict[str, set[Any]] = {}
        self._evict_first: set[Any] = set()
        self._waiting: frozenset[str] = frozenset()
        self._provisional: frozenset[str] = frozenset()
        #: hints demoted by the capacity; hinted texts evicted while their lease was running.
        self.counts = dict(capped=0, evicted=0)

    # --- queries ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._live)

    def evict_key(self, node: Any, now: float) -> tuple:
        """Heap key of an evictable leaf: smaller goes first (see the module docstring)."""
        entry = self._live.get(node)
        if entry is not None and entry.deadline >= now:
            if entry.program_id in self._provisional:
                cls = PROVISIONAL
            elif entry.protected:
                cls = WANTED_NOW if entry.program_id in self._waiting else HINTED
            else:
                cls = OVER_CAPACITY
            return (cls, -entry.next_use, node.last_access, node.id)
        if node in self._evict_first:
            return (EVICT_FIRST, 0, node.last_access, node.id)
        return (UNHINTED, 0, node.last_access, node.id)

    def pinned_tokens(self) -> int:
        """Tokens on the paths root..node of protected hints, each counted once (expired hints
        are dropped first)."""
        self._expire()
        seen: set[int] = set()
        return sum(_new_path_tokens(node, seen, unlocked_only=False) for node in self._protected())

    def pinned_by_rank(self) -> tuple[list[int], list[int]]:
        """Unlocked pinned tokens by program age: ``(ranks, tokens)`` sorted by rank, where
        ``tokens[i]`` counts (each token once) the texts of hints whose rank is <= ``ranks[i]``.
        What a call of a younger program must leave alone (see Scheduler._admit_waiting)."""
        self._expire()
        seen: set[int] = set()
        ranks: list[int] = []
        tokens: list[int] = []
        total = 0
        for node, entry in sorted(((n, self._live[n]) for n in self._protected()), key=lambda item: item[1].rank):
            total += _new_path_tokens(node, seen, unlocked_only=True)
            if ranks and ranks[-1] == entry.rank:
                tokens[-1] = total
            else:
                ranks.append(entry.rank)
                tokens.append(total)
        return ranks, tokens

    # --- commands -----------------------------------------------------------------------------
    def set_waiting(self, program_ids: frozenset[str]) -> None:
        """The programs with a call in the waiting queue now (the scheduler, once per step)."""
        self._waiting = program_ids

    def set_provisional(self, program_ids: frozenset[str]) -> None:
        """The provisional programs now (the scheduler, once per step). A program that left the
        set was promoted: its texts count towards the capacity from now on."""
        if program_ids is self._provisional:
            return  # NOTE: the program table hands the same set until it changes
        promoted = self._provisional - program_ids
        self._provisional = program_ids
        if promoted:
            self._enforce_capacity()

    def hint(self, node: Any, hint: ProgramHint, rank: int = 0) -> None:
        """A hinted call's final text ends at ``node`` (the root for an empty text: ignored);
        ``rank``: its program's start order."""
        if node.parent is None:
            return
        if hint.next_use == NEVER:
            if node not in self._live:
                self._evict_first.add(node)
            return
        lease = min(hint.lease_ms / 1000 if hint.lease_ms else self.default_lease_s, self.max_lease_s)
        old = self._live.get(node)
        if old is not None and old.program_id != hint.program_id and old.deadline >= self.clock() \
                and old.next_use <= hint.next_use:
            return  # NOTE: another program needs it sooner; its hint already keeps it longer
        self._drop(node)
        self._evict_first.discard(node)
        self._live[node] = Retained(hint.program_id, hint.next_use, self.clock() + lease, rank)
        up = node.parent
        while up is not None and up.parent is not None:  # NOTE: its path covers the program's older texts
            if up in self._by_program.get(hint.program_id, ()):
                self._drop(up)
            up = up.parent
        # NOTE: looked up after the drops: dropping the program's last older text deletes its set
        self._by_program.setdefault(hint.program_id, set()).add(node)
        self._enforce_capacity()

    def end_program(self, program_id: str) -> int:
        """The program ended: its texts lose their hints and go first. Returns the tokens it
        alone pinned (its hints' paths that no other live hint covers)."""
        nodes = self._by_program.get(program_id)
        if not nodes:
            return 0
        before = self.pinned_tokens()
        for node in list(nodes):
            self._drop(node)
            self._evict_first.add(node)
        return before - self.pinned_tokens()

    def on_evicted(self, node: Any, now: float, heir: Any = None) -> None:
        """The cache freed ``node``; ``heir``: its parent when that became an evictable leaf,
        which inherits the node's hint or evict-first mark unless it has its own."""
        entry = self._live.get(node)
        if entry is not None and entry.deadline >= now:
            self.counts["evicted"] += 1
        first = node in self._evict_first
        self._drop(node)
        self._evict_first.discard(node)
        if heir is None or heir in self._live or heir in self._evict_first:
            return
        if entry is not None:
            self._live[heir] = entry
            self._by_program.setdefault(entry.program_id, set()).add(heir)
        elif first:
            self._evict_first.add(heir)

    def clear(self) -> None:
        """The tree was flushed: every node is gone."""
        self._live.clear()
        self._by_program.clear()
        self._evict_first.clear()

    # --- internals ------------------------------------------------------------------------------
    def _drop(self, node: Any) -> None:
        entry = self._live.pop(node, None)
        if entry is None:
            return
        nodes = self._by_program.get(entry.program_id)
        if nodes is not None:
            nodes.discard(node)
            if not nodes:
                del self._by_program[entry.program_id]

    def _protected(self) -> list[Any]:
        return [n for n, e in self._live.items() if e.protected and e.program_id not in self._provisional]

    def _expire(self) -> None:
        now = self.clock()
        for node in [n for n, e in self._live.items() if e.deadline < now]:
            self._drop(node)

    def _enforce_capacity(self) -> None:
        """Demote protected hints in eviction order (farthest next use, then least recently
        used) until the pinned tokens fit the capacity."""
        while self.pinned_tokens() > self.capacity:
            node = max(self._protected(), key=lambda n: (self._live[n].next_use, -n.last_access, -n.id))
            self._live[node].protected = False
            self.counts["capped"] += 1


def _new_path_tokens(node: Any, seen: set[int], *, unlocked_only: bool) -> int:
    """Tokens on the path root..node not in ``seen`` yet (which it extends); ``unlocked_only``:
    only nodes no running request locks (what eviction could take)."""
    total = 0
    while node.parent is not None and node.id not in seen:
        seen.add(node.id)
        if not unlocked_only or node.lock_ref == 0:
            total += len(node.key)
        node = node.parent
    return total
