"""ProgramTable: programs, not calls, as the unit of admission (issue 28).

Requests that carry a ``ProgramHint`` belong to a program run. Once a program has had a call
admitted it is *in flight*; its later calls are admitted before any call of a program not yet
started (and before unhinted requests), in the order the programs started: programs that are
three steps from done are finished before a flood of new ones takes their memory (Autellix's
observation; here by program arrival, which also keeps the working set of live programs small).

The waiting queue's own policy (lpm, fcfs, ...) still orders everything that is not an in-flight
program's call, so clients that send no hints see exactly the old behaviour.

Bounded: at most ``max_programs`` live entries (the oldest is forgotten first) and an entry
idle for ``idle_s`` is forgotten (a client that never ends its programs costs nothing lasting).
The last ``max_programs`` ended ids are remembered too: a call of an ended program (one still in
flight when its run timed out) runs as an unhinted call, so it cannot start the program again.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Sequence

from .request import Req

MAX_PROGRAMS = 4096
IDLE_S = 300.0


class ProgramTable:
    """In-flight programs by id: their start order and last activity."""

    def __init__(self, *, max_programs: int = MAX_PROGRAMS, idle_s: float = IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_programs = max_programs
        self.idle_s = idle_s
        self.clock = clock
        self._started: OrderedDict[str, tuple[int, float]] = OrderedDict()  # id -> (start rank, last seen)
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._next_rank = 0

    def __len__(self) -> int:
        return len(self._started)

    def __contains__(self, program_id: str) -> bool:
        return program_id in self._started

    def rank(self, req: Req) -> int | None:
        """The start order of ``req``'s program if it is in flight, else None."""
        entry = self._started.get(req.hint.program_id) if req.hint is not None else None
        return None if entry is None else entry[0]

    def in_flight(self, req: Req) -> bool:
        """Whether ``req`` is a call of a program that has already started."""
        return req.hint is not None and req.hint.program_id in self._started

    def on_admitted(self, req: Req) -> None:
        """``req`` was admitted: its program is in flight (from now, if it was not). A call of an
        ended program loses its hint."""
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
                self._started.popitem(last=False)
            entry = (self._next_rank, now)
            self._next_rank += 1
        self._started[pid] = (entry[0], now)
        self._started.move_to_end(pid)
        req.program_rank = entry[0]

    def end(self, program_id: str) -> bool:
        """The program ended; False if it was not in flight."""
        self._ended[program_id] = None
        self._ended.move_to_end(program_id)
        while len(self._ended) > self.max_programs:
            self._ended.popitem(last=False)
        return self._started.pop(program_id, None) is not None

    def order(self, waiting: Sequence[Req], policy_order: Callable[[Sequence[Req]], list[Req]]) -> list[Req]:
        """In-flight programs' calls first, by program start (stable within a program), then
        the rest in ``policy_order``."""
        first = [r for r in waiting if self.in_flight(r)]
        if not first:
            return policy_order(waiting)
        rest = [r for r in waiting if not self.in_flight(r)]
        first.sort(key=lambda r: self._started[r.hint.program_id][0])
        return first + policy_order(rest)

    def _expire(self, now: float) -> None:
        while self._started:
            pid, (_, seen) = next(iter(self._started.items()))
            if now - seen <= self.idle_s:
                return
            del self._started[pid]
