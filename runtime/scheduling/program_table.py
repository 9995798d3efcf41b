"""ProgramTable: programs, not calls, as the unit of admission (issue 28).

Requests that carry a ``ProgramHint`` belong to a program run. Once a program has had a call
admitted it is *in flight*; its later calls are admitted before any call of a program not yet
started (and before unhinted requests), in the order the programs started: programs that are
three steps from done are finished before a flood of new ones takes their memory (Autellix's
observation; here by program arrival, which also keeps the working set of live programs small).

Memory: each in-flight program has a *footprint*, the longest text (prompt + max_new_tokens) any
of its calls asked for, less what it shared with the cache when it started (a few-shot prefix
every run shares is not any one run's memory), and each program *family* (the id's part before its last ``:``; the
executor names runs ``graph_name:uuid``) learns how much its runs' footprints *grow* after their
first call, from the runs that ended. A program is expected to need its first call's tokens (what
that call needed beyond the cache) plus its family's growth: the first call says what this run
starts from (a run whose agent's memory block another run already cached starts small, the first
run of that agent large), the growth what the program's graph appends to it (the same for every
run of it). A call that would start a program is held back while the expected footprints of
the programs in flight (each: the larger of its own so far and that expectation) plus its own
would pass ``admit_share`` of the KV pool: when memory is tight, in-flight programs finish before
new ones start, instead of every program thrashing everyone's prefixes.

Provisional programs: when nothing runs (every program in flight waits on a tool, say) the
scheduler still starts a new program, so the engine never idles because of a hint, but one the
memory rule would hold back starts *provisional*: it runs only on memory no committed program's
texts hold, its texts are evicted before theirs (cache/retention.py), and its calls come after
theirs. It is promoted (committed) in start order as soon as the committed programs' expected
footprints leave it room. Idle time so does work that either survives until the program is
promoted or cost only time the engine had spare; before, such a program took the waiting
programs' prefixes and every one of them recomputed its text when its tool returned.

The waiting queue's own policy (lpm, fcfs, ...) still orders everything that is not an in-flight
program's call, so clients that send no hints see exactly the old behaviour.

Bounded: at most ``max_programs`` live entries (the oldest is forgotten first), an entry idle for
``idle_s`` is forgotten (a client that never ends its programs costs nothing lasting), at most
``max_programs`` families, and the last ``max_programs`` ended ids (a call of an ended program,
one still in flight when its run timed out, runs as an unhinted call: it cannot start the
program again).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # NOTE: the torch-free engine admits by this table too; request.py imports torch
    from .request import Req

MAX_PROGRAMS = 4096
IDLE_S = 60.0
#: Weight of the newest ended run in its family's learned growth.
FAMILY_EWMA = 0.5


@dataclass(slots=True)
class _Program:
    rank: int  # start order (larger = younger)
    seen: float  # last activity (clock seconds)
    shared: int  # tokens of its first call already cached when it started
    first: int  # what its first call needed beyond ``shared``
    footprint: int  # longest prompt + max_new_tokens of its calls so far, less ``shared``


def family_of(program_id: str) -> str:
    """The family a run belongs to: its id up to the last ``:`` (the whole id without one)."""
    return program_id.rsplit(":", 1)[0]


class ProgramTable:
    """In-flight programs by id: start order, activity and footprint; families' learned growth."""

    def __init__(self, *, max_programs: int = MAX_PROGRAMS, idle_s: float = IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_programs = max_programs
        self.idle_s = idle_s
        self.clock = clock
        self._started: OrderedDict[str, _Program] = OrderedDict()  # by last activity
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._families: OrderedDict[str, float] = OrderedDict()  # family -> learned growth after the first call
        self._next_rank = 0
        self._provisional: frozenset[str] = frozenset()
        self.counts = dict(provisional=0, promoted=0)

    def __len__(self) -> int:
        return len(self._started)

    def __contains__(self, program_id: str) -> bool:
        return program_id in self._started

    def rank(self, req: Req) -> int | None:
        """The start order of ``req``'s program if it is in flight, else None."""
        entry = self._started.get(req.hint.program_id) if req.hint is not None else None
        return None if entry is None else entry.rank

    def in_flight(self, req: Req) -> bool:
        """Whether ``req`` is a call of a program that has already started."""
        return req.hint is not None and req.hint.program_id in self._started

    def is_provisional(self, req: Req) -> bool:
        """Whether ``req`` is a call of a provisional program (see the module docstring)."""
        return req.hint is not None and req.hint.program_id in self._provisional

    @property
    def provisional_ids(self) -> frozenset[str]:
        """The provisional programs' ids (what the cache evicts before committed programs' texts)."""
        return self._provisional

    # --- memory -----------------------------------------------------------------------------------
    def family_growth(self, program_id: str) -> int:
        """How much runs of ``program_id``'s family grew after their first call (0 before any ended)."""
        return round(self._families.get(family_of(program_id), 0.0))

    def _expected(self, program_id: str, entry: _Program) -> int:
        return max(entry.footprint, entry.first + self.family_growth(program_id))

    def expected_in_flight(self) -> int:
        """Tokens the in-flight programs are expected to need: each the larger of its footprint
        so far and its first call's plus its family's growth. Programs idle past ``idle_s`` are
        forgotten first."""
        self._expire(self.clock())
        return sum(self._expected(pid, p) for pid, p in self._started.items())

    def promote(self, limit: float) -> int:
        """Commit provisional programs in start order while the committed programs' expected
        footprints plus theirs fit ``limit`` tokens (the oldest also when nothing is committed).
        Returns how many were promoted."""
        if not self._provisional:
            return 0
        self._expire(self.clock())
        committed = sum(self._expected(pid, p) for pid, p in self._started.items() if pid not in self._provisional)
        promoted = []
        for pid in sorted(self._provisional, key=lambda pid: self._started[pid].rank):
            need = self._expected(pid, self._started[pid])
            if committed and committed + need > limit:
                break
            committed += need
            promoted.append(pid)
        if promoted:
            self._provisional = self._provisional.difference(promoted)
            self.counts["promoted"] += len(promoted)
        return len(promoted)

    def held_tokens(self) -> int:
        """Tokens the in-flight programs hold at most now: their footprints so far, plus the
        largest prefix they shared when they started (counted once)."""
        return sum(p.footprint for p in self._started.values()) + max((p.shared for p in self._started.values()), default=0)

    def expected_new(self, req: Req, call_tokens: int) -> int:
        """Tokens a program that ``req`` would start is expected to need (``call_tokens``: what
        its first call needs beyond the cached prefix)."""
        return call_tokens + self.family_growth(req.hint.program_id) if req.hint is not None else call_tokens

    # --- lifecycle ----------------------------------------------------------------------------------
    def on_admitted(self, req: Req, call_tokens: int, cached: int, *, provisional: bool = False) -> None:
        """``req`` (which will hold up to ``call_tokens`` tokens, ``cached`` of them found in the
        cache) was admitted: its program is in flight (from now, if it was not; ``provisional``:
        it starts provisional). A call of an ended program loses its hint."""
        if req.hint is None:
            return
        pid, now = req.hint.program_id, self.clock()
        if pid in self._ended:
            req.hint = None
            return
        entry = self._started.get(pid)
        if entry is None:
            self._expire(now)
            while len(self._started) >= self.max_programs:
                self._forget(next(iter(self._started)))
            entry = self._started[pid] = _Program(self._next_rank, now, cached, call_tokens - cached, 0)
            self._next_rank += 1
            if provisional:
                self._provisional = self._provisional | {pid}
                self.counts["provisional"] += 1
        entry.seen = now
        entry.footprint = max(entry.footprint, call_tokens - entry.shared)
        self._started.move_to_end(pid)
        req.program_rank = entry.rank

    def end(self, program_id: str) -> bool:
        """The program ended (its growth teaches its family); False if it was not in flight."""
        self._ended[program_id] = None
        self._ended.move_to_end(program_id)
        while len(self._ended) > self.max_programs:
            self._ended.popitem(last=False)
        entry = self._forget(program_id)
        if entry is None:
            return False
        family = family_of(program_id)
        old = self._families.pop(family, None)
        growth = entry.footprint - entry.first
        self._families[family] = growth if old is None else FAMILY_EWMA * growth + (1 - FAMILY_EWMA) * old
        while len(self._families) > self.max_programs:
            self._families.popitem(last=False)
        return True

    def order(self, waiting: Sequence[Req], policy_order: Callable[[Sequence[Req]], list[Req]]) -> list[Req]:
        """In-flight programs' calls first, committed before provisional, each by program start
        (stable within a program), then the rest in ``policy_order``."""
        first = [r for r in waiting if self.in_flight(r)]
        if not first:
            return policy_order(waiting)
        rest = [r for r in waiting if not self.in_flight(r)]
        first.sort(key=lambda r: (r.hint.program_id in self._provisional, self._started[r.hint.program_id].rank))
        return first + policy_order(rest)

    def _forget(self, program_id: str) -> _Program | None:
        entry = self._started.pop(program_id, None)
        if program_id in self._provisional:
            self._provisional = self._provisional - {program_id}
        return entry

    def _expire(self, now: float) -> None:
        while self._started:
            pid, entry = next(iter(self._started.items()))
            if now - entry.seen <= self.idle_s:
                return
            self._forget(pid)
