"""Random members of an FSM's language (for tests, examples and benchmarks).

``sample(fsm, rng)`` walks the DFA from the initial state, picking a random move and a random
character of it, stops at a final state with probability ``stop_prob``, and after
``max_steps`` steers along a shortest path to a final state, so it always returns a string the
FSM accepts.
"""
from __future__ import annotations

import random
from collections import deque

from .compressed import FSM
from .errors import EmptyLanguageError


def _distance_to_final(fsm: FSM) -> list[int]:
    n = fsm.num_states
    preds: list[list[int]] = [[] for _ in range(n)]
    for s in range(n):
        for _ranges, t in fsm.transitions(s):
            preds[t].append(s)
    dist = [-1] * n
    queue = deque(sorted(fsm.finals))
    for f in queue:
        dist[f] = 0
    while queue:
        t = queue.popleft()
        for s in preds[t]:
            if dist[s] < 0:
                dist[s] = dist[t] + 1
                queue.append(s)
    return dist


def _pick_char(ranges: tuple[tuple[int, int], ...], rng: random.Random) -> str:
    # Favour small ranges a little so ASCII punctuation shows up next to astral characters.
    lo, hi = rng.choice(ranges)
    if hi - lo > 200 and rng.random() < 0.5:
        hi = lo + 200
    return chr(rng.randint(lo, hi))


def sample(fsm: FSM, rng: random.Random, *, stop_prob: float = 0.3, max_steps: int = 60) -> str:
    """A random string accepted by ``fsm``."""
    if fsm.is_empty():
        raise EmptyLanguageError(f"pattern {fsm.pattern!r} matches no string")
    dist = _distance_to_final(fsm)
    state, out = fsm.initial, []
    steps = 0
    while True:
        moves = fsm.transitions(state)
        if fsm.is_final(state) and (not moves or steps >= max_steps or rng.random() < stop_prob):
            return "".join(out)
        if steps >= max_steps:
            moves = [m for m in moves if dist[m[1]] < dist[state]]
        ranges, state = rng.choice(moves)
        out.append(_pick_char(ranges, rng))
        steps += 1
