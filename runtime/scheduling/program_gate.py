"""ProgramGate: the program rules of one admission pass (issue 28), for both engines' admission.

``program_table.py`` says what the rules are for; this is where an admission loop asks them, so
the torch scheduler and the torch-free engine admit by program alike:

1. before a pass (``refresh``): provisional programs are promoted where the committed programs'
   expected footprints leave them room, and the cache learns which programs are provisional and
   which have a call queued (their texts are evicted first / last);
2. ``order``: calls of in-flight programs first, committed before provisional, by program start;
   then the rest in the engine's own order;
3. ``start_verdict``: a call that would start a program is held while the in-flight programs'
   expected footprints and its own would pass the admit share of the pool, unless nothing runs:
   then it starts (provisional when other programs are in flight);
4. ``held_room``: the room a call may not count: the protected texts of programs older than its
   own (a provisional program's: every committed program's, unless nothing else could run);
5. ``admitted``: the program table learns the admission (and this pass's expected total grows).

A request here is anything with ``hint`` (a ProgramHint or None) and ``program_rank`` (set at
admission); the engines' own request types both have them.
"""
from __future__ import annotations

import bisect
import enum
from typing import Any, Callable, Sequence

from ..cache.retention import RetentionTable
from .program_table import ProgramTable


class Start(enum.Enum):
    """What a call that would start a program may do now."""

    HOLD = "hold"  # memory is tight: the programs in flight finish first
    COMMITTED = "committed"
    PROVISIONAL = "provisional"  # nothing else runs: it starts, on memory committed programs do not hold


def refresh(programs: ProgramTable, retention: RetentionTable, waiting: Sequence[Any], limit: float) -> None:
    """Before an admission pass: promote what fits ``limit`` tokens, mark provisional and waiting
    programs in the cache."""
    if programs.provisional_ids:
        programs.promote(limit)
    # NOTE: also while the cache holds no hint yet: a provisional program's first text must
    # find itself provisional when it arrives
    retention.set_provisional(programs.provisional_ids)
    if len(retention):
        retention.set_waiting(frozenset(r.hint.program_id for r in waiting if r.hint is not None))


class ProgramGate:
    """One admission pass's view of the program table and the cache's protected texts (each
    computed once, when first needed)."""

    def __init__(self, programs: ProgramTable, retention: RetentionTable, limit: float) -> None:
        """``limit``: the tokens in-flight programs' expected footprints may reach (the pool
        times the admit share)."""
        self.programs, self.retention, self.limit = programs, retention, limit
        self._in_flight: int | None = None  # expected tokens of the programs in flight
        self._pinned: tuple[list[int], list[int]] | None = None

    def order(self, waiting: Sequence[Any], engine_order: Callable[[Sequence[Any]], list[Any]]) -> list[Any]:
        return self.programs.order(waiting, engine_order)

    def starts_program(self, req: Any) -> bool:
        """Whether admitting ``req`` would start its program (a hinted call of none in flight)."""
        return req.hint is not None and not self.programs.in_flight(req)

    def start_verdict(self, req: Any, own_tokens: int, *, busy: bool) -> Start:
        """For a call that would start a program and needs ``own_tokens`` beyond its cached
        prefix; ``busy``: something runs or was admitted in this pass."""
        if self._in_flight is None:
            self._in_flight = self.programs.expected_in_flight()
        if self._in_flight + self.programs.expected_new(req, own_tokens) <= self.limit:
            return Start.COMMITTED
        if busy:
            return Start.HOLD
        return Start.PROVISIONAL if len(self.programs) > 0 else Start.COMMITTED

    def held_room(self, req: Any, *, provisional: bool, need: int, room: int, busy: bool) -> int:
        """Tokens of ``room`` (free + evictable) that ``req``, needing ``need``, may not take:
        protected texts of older programs; a provisional one's, every committed program's
        unless nothing else runs and it fits nowhere else (the engine never idles on a hint)."""
        if not len(self.retention) or not (provisional or busy):
            return 0
        if self._pinned is None:
            self._pinned = self.retention.pinned_by_rank()
        if not provisional:
            return _older_pinned(self._pinned, self.programs.rank(req))
        held = _older_pinned(self._pinned, None)
        return held if busy or need <= room - held else 0

    def admitted(self, req: Any, call_tokens: int, cached: int, *, start: Start = Start.COMMITTED) -> None:
        """``req`` was admitted, holding up to ``call_tokens`` tokens, ``cached`` of them served
        by the cache; ``start``: the verdict it started its program with."""
        if self._in_flight is not None and not self.programs.in_flight(req):  # NOTE: unhinted calls' memory too
            self._in_flight += self.programs.expected_new(req, call_tokens - cached)
        self.programs.on_admitted(req, call_tokens, cached, provisional=start is Start.PROVISIONAL)


def _older_pinned(pinned: tuple[list[int], list[int]], rank: int | None) -> int:
    """Unlocked tokens hints keep for programs older than ``rank`` (None: every program)."""
    ranks, tokens = pinned
    if not ranks:
        return 0
    i = len(ranks) if rank is None else bisect.bisect_left(ranks, rank)
    return tokens[i - 1] if i else 0
