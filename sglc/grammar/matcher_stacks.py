"""Hash-consed parse stacks and the byte steps over sets of them (the matcher's parser core).

A stack is ``(node, parent stack)``: its top is an automaton node, below it the return nodes of
the rules that called it. Stacks are interned in a :class:`StackPool`, so a stack is an int id,
equal stacks get the same id, and stacks share their tails (a graph-structured stack: what
Earley's chart shares). A parser *state* is :class:`Tops`: the ids of the stacks whose top
has byte edges (after every possible rule call and rule end has been followed) and whether the
whole text may end here.

Everything derived from a stack id is memoized in the pool: its closure (calls pushed, ends
popped) and the step of a state on a byte. Pools only grow; one pool serves a matcher and its
copies (one thread at a time).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from .errors import GrammarBudgetError
from .token_masks_compile import CompiledGrammar


class Tops(NamedTuple):
    """A parser state: live stack ids (sorted) and whether the text may end now."""

    stacks: tuple[int, ...]
    can_end: bool

    @property
    def alive(self) -> bool:
        return bool(self.stacks) or self.can_end


DEAD = Tops((), False)


class StackPool:
    """Interned stacks over one compiled grammar, with memoized closures and steps."""

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self.node: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self._ids: dict[tuple[int, int], int] = {}
        self._closure: dict[int, Tops] = {}
        self._steps: dict[tuple[tuple[int, ...], int], Tops] = {}
        self.checks: dict[tuple[int, int], bool] = {}  # (stack, group) -> suffix accepted
        self.masks: OrderedDict[Tops, object] = OrderedDict()  # the matcher's mask cache (LRU)
        self._next = compiled.next_rows
        self._refs = compiled.node_refs
        self._final = compiled.node_final
        self._has_bytes = compiled.node_has_bytes
        self._max_depth = compiled.budget.max_stack_depth
        self.max_stacks = compiled.budget.max_stacks

    def intern(self, node: int, parent: int) -> int:
        key = (node, parent)
        got = self._ids.get(key)
        if got is None:
            depth = 1 if parent < 0 else self.depth[parent] + 1
            if depth > self._max_depth:
                raise GrammarBudgetError("max_stack_depth", self._max_depth,
                                         f"grammar stack depth {depth:,} (rules nested that deep)", owner="EngineBudget")
            got = self._ids[key] = len(self.node)
            self.node.append(node)
            self.parent.append(parent)
            self.depth.append(depth)
        return got

    def closure(self, sid: int) -> Tops:
        """The state of the single stack ``sid``: follow rule calls at its top (push the
        callee's start) and rule ends (pop to the caller's return node), keep stacks whose top
        can take a byte."""
        got = self._closure.get(sid)
        if got is not None:
            return got
        seen = {sid}
        work = [sid]
        tops: list[int] = []
        can_end = False
        node, parent = self.node, self.parent
        while work:
            s = work.pop()
            n = node[s]
            if self._has_bytes[n]:
                tops.append(s)
            for start, ret in self._refs[n]:
                t = self.intern(start, self.intern(ret, parent[s]))
                if t not in seen:
                    seen.add(t)
                    work.append(t)
            if self._final[n]:
                p = parent[s]
                if p < 0:
                    can_end = True
                elif p not in seen:
                    seen.add(p)
                    work.append(p)
        got = self._closure[sid] = Tops(tuple(sorted(tops)), can_end)
        return got

    def start(self) -> Tops:
        return self.closure(self.intern(self.compiled.initial_node, -1))

    def step(self, state: Tops, byte: int) -> Tops:
        """The state after one more byte (DEAD when no stack takes it)."""
        key = (state.stacks, byte)
        got = self._steps.get(key)
        if got is not None:
            return got
        out: set[int] = set()
        can_end = False
        nxt, node, parent = self._next, self.node, self.parent
        for s in state.stacks:
            t = nxt[node[s]][byte]
            if t >= 0:
                c = self.closure(self.intern(t, parent[s]))
                out.update(c.stacks)
                can_end = can_end or c.can_end
        if len(out) > self.max_stacks:
            raise GrammarBudgetError("max_stacks", self.max_stacks,
                                     f"live grammar stacks {len(out):,} (an ambiguous grammar)", owner="EngineBudget")
        got = self._steps[key] = Tops(tuple(sorted(out)), can_end) if out or can_end else DEAD
        return got

    def walk(self, state: Tops, data: bytes) -> Tops:
        """The state after ``data`` (DEAD when some byte is refused)."""
        for b in data:
            if not state.stacks:
                return DEAD
            state = self.step(state, b)
        return state
