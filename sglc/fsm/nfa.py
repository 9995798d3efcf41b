"""Thompson construction: regex syntax tree -> NFA with epsilon moves.

Each edge carries a :class:`CharSet` (a set of code-point ranges), so ``[^"]`` is one edge.
The NFA has one start and one accepting state. Bounded repetition ``x{m,n}`` expands into
``m`` copies of ``x`` followed by ``n-m`` nested optional copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .charset import CharSet
from .regex_ast import Alt, Anchor, Chars, Concat, Node, Repeat


@dataclass
class NFA:
    """States are ``0..num_states-1``; ``eps[s]`` lists epsilon targets, ``edges[s]`` lists
    ``(charset, target)`` pairs."""

    start: int = 0
    accept: int = 0
    eps: list[list[int]] = field(default_factory=list)
    edges: list[list[tuple[CharSet, int]]] = field(default_factory=list)

    @property
    def num_states(self) -> int:
        return len(self.eps)

    def new_state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def charsets(self) -> list[CharSet]:
        """Every distinct edge label (used to partition the alphabet)."""
        return list({cs for out in self.edges for cs, _ in out})

    def epsilon_closure(self, states: set[int] | frozenset[int]) -> frozenset[int]:
        stack = list(states)
        seen = set(states)
        while stack:
            s = stack.pop()
            for t in self.eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    def accepts(self, text: str) -> bool:
        """Direct NFA simulation (a reference for tests; the DFA is what production uses)."""
        current = self.epsilon_closure({self.start})
        for ch in text:
            nxt = {t for s in current for cs, t in self.edges[s] if ch in cs}
            if not nxt:
                return False
            current = self.epsilon_closure(nxt)
        return self.accept in current


def nfa_num_states(node: Node) -> int:
    """How many states :func:`build_nfa` would create for ``node``, computed on the tree
    without expanding any repetition (so ``(a{1000}){1000}`` costs nothing to measure).
    NOTE: mirrors ``_fragment`` and ``_repeat`` exactly; a test holds them in step."""
    if isinstance(node, Chars):
        return 2
    if isinstance(node, Concat):
        return 1 + sum(nfa_num_states(item) for item in node.items)
    if isinstance(node, Alt):
        return 2 + sum(nfa_num_states(option) for option in node.options)
    if isinstance(node, Repeat):
        inner = nfa_num_states(node.item)
        copies = node.min + 1 if node.max is None else node.max
        return 2 + copies * inner
    return 0  # an Anchor: the parser rejects leftover anchors before this matters


def build_nfa(node: Node) -> NFA:
    """The Thompson NFA of a (validated, anchor-free) syntax tree."""
    nfa = NFA()
    start, accept = _fragment(nfa, node)
    nfa.start, nfa.accept = start, accept
    return nfa


def _fragment(nfa: NFA, node: Node) -> tuple[int, int]:
    """Add states for ``node``; return its (entry, exit) pair."""
    if isinstance(node, Chars):
        s, e = nfa.new_state(), nfa.new_state()
        if node.chars:
            nfa.edges[s].append((node.chars, e))
        return s, e
    if isinstance(node, Concat):
        s = e = nfa.new_state()
        for item in node.items:
            a, b = _fragment(nfa, item)
            nfa.eps[e].append(a)
            e = b
        return s, e
    if isinstance(node, Alt):
        s, e = nfa.new_state(), nfa.new_state()
        for option in node.options:
            a, b = _fragment(nfa, option)
            nfa.eps[s].append(a)
            nfa.eps[b].append(e)
        return s, e
    if isinstance(node, Repeat):
        return _repeat(nfa, node)
    if isinstance(node, Anchor):  # pragma: no cover - the parser rejects leftover anchors
        raise ValueError(f"anchor left in syntax tree at position {node.position}")
    raise TypeError(f"not a regex node: {node!r}")


def _repeat(nfa: NFA, node: Repeat) -> tuple[int, int]:
    s = e = nfa.new_state()
    for _ in range(node.min):
        a, b = _fragment(nfa, node.item)
        nfa.eps[e].append(a)
        e = b
    if node.max is None:
        # NOTE: star with its own loop state so an item that can match "" cannot create
        # an epsilon cycle through the surrounding fragments.
        loop = nfa.new_state()
        nfa.eps[e].append(loop)
        a, b = _fragment(nfa, node.item)
        nfa.eps[loop].append(a)
        nfa.eps[b].append(loop)
        return s, loop
    end = nfa.new_state()
    for _ in range(node.max - node.min):
        a, b = _fragment(nfa, node.item)
        nfa.eps[e].append(a)
        nfa.eps[e].append(end)
        e = b
    nfa.eps[e].append(end)
    return s, end
