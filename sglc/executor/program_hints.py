"""Program hints (issue 28): each model call's ``next_use``, read off the compiled graph once.

For every call node (GEN, SELECT, CACHE_PREFIX) of a graph, :func:`next_uses` finds the calls
that extend the call's final text (its prompt plus its output) and counts how many of the
program's other calls must complete before the earliest of them is ready. The graph executor
sends that count with the call (``Prompt.hint = ProgramHint(program_id, next_use)``,
sglc.wire.program_hint) and ends the program run with ``Backend.end_program`` (at most once per
run, see :func:`end_program`).

Which calls extend a call ``c`` on stream ``s`` (its *users*):

- the next call on ``s`` after ``c`` in graph order (stream order is text order);
- the calls of streams forked from ``s`` after ``c`` (FORK/GET_FORK_ITEM copy the parent's
  text), transitively. A called program's fork (``attrs["program"]``) starts empty: not a user;
- loops (a body is a region of one stream, run once per item): at the body's LOOP_END the walk
  goes on both into the next iteration (the body again from its start, valid only while that
  loop has another item, so the last iteration sees only what follows the loop) and past the
  loop; a loop met from outside may run zero times, so its calls never end the walk;
- branches: a call under a guard that ``c``'s guards do not imply may be skipped, so the walk
  goes on past it (conservative: a possible reuse is a reuse); a call that cannot run when ``c``
  ran (the same BRANCH, another case) is no user;
- the first child of a ``concate_and_append`` join: the parent's text after the join starts with
  that child's final text when the parent appended nothing since the fork (conservative: counted);
- graph breaks (graph_breaks.py): a segment that Python continues (``continues=True``) hands
  stream 0's state to the next segment, so a walk that runs off the end of stream 0 finds a
  virtual user: the next segment, which starts once every call of this segment is done.

The walk on a path stops at the first user that surely runs when ``c`` ran (its guards implied
by ``c``'s, not inside a loop the walk entered from outside). A call without users is
``NEVER``.

Distance: with ``anc(x)`` the calls ``x`` transitively waits on (inputs, stream order, guards;
the executor's dependencies), ``next_use(c) = min over users u of |anc(u) - anc(c) - {c}|``,
leaving out calls that cannot run with ``c`` or with ``u`` (other cases of their branches).
So a chain gen -> text -> gen gives 0, fork children right after a gen give 0, the gen after a
join of N child gens gives N (when it is the first user). For a user ``u`` in the next iteration
of loop ``b``: the calls of ``b``'s body still to run after ``c`` plus those ``u`` waits on in
the body (0 for ``for x in items: s += ... + gen()``). The next segment of a graph break: the
calls of this segment ``c`` does not wait on, usually 0 (``c`` is the segment's last call; a
break needs every fork joined). A loop body counts once, whatever the number of items.

Cost: one pass over the nodes and their dependencies (call sets as Python int bitsets), then per
call a walk that stops at its first sure user on each path (at most ``MAX_USERS`` users).
Eager execution (eager.py) sends no hints: it cannot see the program's future.
"""
from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from typing import Callable, Mapping, Optional, Sequence

from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.wire.backend import Backend
from sglc.wire.program_hint import MAX_NEXT_USE, NEVER

log = logging.getLogger("sglc.executor")

#: Users collected per call at most (the walk stops there; the nearest are found first).
MAX_USERS = 64
_VIRTUAL = -1  # the next segment of a program with graph breaks
_ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


@dataclasses.dataclass(frozen=True)
class NextUse:
    """A call's next_use: ``base``, or ``distance`` for each ``(distance, loops)`` in ``wraps``
    while every loop in ``loops`` (loop_begin node indices) has another iteration to run."""

    base: int
    wraps: tuple[tuple[int, frozenset[int]], ...] = ()

    def value(self, has_next_iteration: Callable[[int], bool]) -> int:
        best = self.base
        for distance, loops in self.wraps:
            if (best == NEVER or distance < best) and all(has_next_iteration(b) for b in loops):
                best = distance
        return best


def new_program_id(name: str) -> str:
    """A fresh program id for one run of `name` (``name:uuid4hex``, characters a ProgramHint takes)."""
    return f"{_ID_CHARS.sub('_', name)[:80] or 'program'}:{uuid.uuid4().hex}"


def end_program(backend: Backend, program_id: str) -> None:
    """Tell the backend a program run ended. Advice: a failure is logged at debug, never raised."""
    try:
        backend.end_program(program_id)
    except Exception as err:  # NOTE: Backend.end_program must not raise; a hint never fails a program
        log.debug("end_program(%s) on %r failed: %r", program_id, backend, err)


def next_uses(nodes: Sequence[Node], deps: Sequence[set[int]], calls: Sequence[int],
              loop_end: Mapping[int, int], loop_body: Mapping[int, list[int]],
              continues: bool = False) -> dict[int, NextUse]:
    """The :class:`NextUse` of every call in `calls` (node indices into `nodes`, graph order).

    `deps`: each node's dependencies (indices), as the executor schedules them; `loop_end` /
    `loop_body`: loop_begin index -> its loop_end index / body node indices; `continues`: the
    graph is a segment that another segment continues (graph breaks)."""
    return _Analysis(nodes, deps, calls, loop_end, loop_body, continues).run()


class _Analysis:
    def __init__(self, nodes: Sequence[Node], deps: Sequence[set[int]], calls: Sequence[int],
                 loop_end: Mapping[int, int], loop_body: Mapping[int, list[int]], continues: bool) -> None:
        self.nodes = nodes
        self.calls = list(calls)
        self.continues = continues
        index = {node: i for i, node in enumerate(nodes)}
        self.bit = {c: 1 << n for n, c in enumerate(self.calls)}
        self.all_calls = (1 << len(self.calls)) - 1
        # anc[i]: the calls node i transitively waits on (graph order is a topological order)
        self.anc: list[int] = []
        for i in range(len(nodes)):
            mask = 0
            for d in deps[i]:
                mask |= self.anc[d] | self.bit.get(d, 0)
            self.anc.append(mask)
        # guards: branch index -> case, for every call; excl: the calls that cannot run with it
        self.guards = {c: {index[g.branch]: g.case for g in nodes[c].guard_chain()} for c in self.calls}
        case_mask: dict[tuple[int, int], int] = {}
        branch_mask: dict[int, int] = {}
        for c, chain in self.guards.items():
            for b, k in chain.items():
                case_mask[b, k] = case_mask.get((b, k), 0) | self.bit[c]
                branch_mask[b] = branch_mask.get(b, 0) | self.bit[c]
        self.excl = {c: _or(branch_mask[b] & ~case_mask[b, k] for b, k in chain.items())
                     for c, chain in self.guards.items()}
        # streams in text order; forks' children; the first child of each concatenating join
        self.order: dict[int, list[int]] = {}
        self.pos: dict[int, int] = {}
        self.items: dict[int, list[int]] = {}
        self.concat_parent: dict[int, int] = {}
        for i, node in enumerate(nodes):
            if node.op is Op.ARGUMENT:
                continue
            stream = self.order.setdefault(node.stream, [])
            self.pos[i] = len(stream)
            stream.append(i)
            if node.op is Op.GET_FORK_ITEM:
                self.items.setdefault(index[node.inputs[0]], []).append(i)
            elif node.op is Op.JOIN and node.attrs.get("mode") == "concate_and_append" and len(node.inputs) > 1:
                self.concat_parent.setdefault(node.inputs[1].stream, i)
        self.loop_end = dict(loop_end)
        self.loop_of_end = {e: b for b, e in loop_end.items()}
        self.body_mask = {b: _or(self.bit.get(j, 0) for j in body) for b, body in loop_body.items()}

    def run(self) -> dict[int, NextUse]:
        return {c: self._next_use(c) for c in self.calls}

    # ----- one call -----
    def _next_use(self, c: int) -> NextUse:
        users: list[tuple[int, frozenset[int]]] = []
        seen: set[tuple[int, int, Optional[int]]] = set()
        self._walk(c, self.nodes[c].stream, self.pos[c] + 1, None, frozenset(), True, users, seen)
        base = NEVER
        wraps: dict[frozenset[int], int] = {}
        for u, loops in users:
            d = self._distance(c, u, loops)
            if not loops:
                base = d if base == NEVER else min(base, d)
            else:
                wraps[loops] = min(wraps.get(loops, d), d)
        kept = sorted((d, loops) for loops, d in wraps.items() if base == NEVER or d < base)
        return NextUse(_capped(base), tuple((_capped(d), loops) for d, loops in kept))

    def _walk(self, c: int, s: int, k: int, end: Optional[int], loops: frozenset[int], may_stop: bool,
              users: list[tuple[int, frozenset[int]]], seen: set[tuple[int, int, Optional[int]]]) -> None:
        """Collect the users of `c` on stream `s` from position `k` (to `end`, else the stream's end)."""
        if (s, k, end) in seen or len(users) >= MAX_USERS:
            return
        seen.add((s, k, end))
        order = self.order.get(s, [])
        stop = len(order) if end is None else end
        while k < stop and len(users) < MAX_USERS:
            i = order[k]
            node = self.nodes[i]
            if i in self.bit:
                if not self._exclusive(c, i):
                    users.append((i, loops))
                    if may_stop and self._implied(c, i):
                        return
            elif node.op is Op.FORK and node.attrs.get("program") is None:  # a called program starts empty
                for g in self.items.get(i, []):
                    self._walk(c, self.nodes[g].stream, self.pos[g] + 1, None, loops, True, users, seen)
            elif node.op is Op.LOOP_BEGIN:  # entered from outside: it may run no iteration
                e = self.pos[self.loop_end[i]]
                self._walk(c, s, k + 1, e, loops, False, users, seen)
                k = e  # NOTE: past its loop_end too (that one is no wrap for this walk)
            elif node.op is Op.LOOP_END:  # left from inside: the next iteration, then past the loop
                b = self.loop_of_end[i]
                self._walk(c, s, self.pos[b] + 1, k, loops | {b}, may_stop, users, seen)
            k += 1
        if end is not None or k < stop:
            return
        if s == 0 and self.continues:
            users.append((_VIRTUAL, loops))
        parent_join = self.concat_parent.get(s)
        if parent_join is not None:
            join = self.nodes[parent_join]
            self._walk(c, join.stream, self.pos[parent_join] + 1, None, loops, may_stop, users, seen)

    def _exclusive(self, c: int, u: int) -> bool:
        """No run has both: they sit in different cases of one branch."""
        mine = self.guards[c]
        return any(mine.get(b, k) != k for b, k in self.guards[u].items())

    def _implied(self, c: int, u: int) -> bool:
        """`u`'s guards all hold whenever `c` ran."""
        mine = self.guards[c]
        return all(mine.get(b) == k for b, k in self.guards[u].items())

    def _distance(self, c: int, u: int, loops: frozenset[int]) -> int:
        """How many other calls complete after `c` and before `u` is ready (module doc)."""
        after_c = ~self.anc[c] & ~self.bit[c] & ~self.excl[c]
        if u == _VIRTUAL:
            return (self.all_calls & after_c).bit_count()
        if not loops:
            return (self.anc[u] & after_c & ~self.excl[u]).bit_count()
        body = _or(self.body_mask.get(b, 0) for b in loops)
        return (body & after_c).bit_count() + (self.anc[u] & body & ~self.excl[u]).bit_count()


def _or(masks: object) -> int:
    out = 0
    for m in masks:  # type: ignore[attr-defined]
        out |= m
    return out


def _capped(value: int) -> int:
    return min(value, MAX_NEXT_USE)
