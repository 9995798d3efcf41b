"""Multi-turn chat with short outputs: 4 user turns, each answered in 4-8 tokens (see multi_turn.py)."""
from __future__ import annotations

from bench.suite.workload import Workload, WorkloadInstance, by_size
from bench.suite.workloads.multi_turn import build_chat

NAME = "multi_turn_short"

# programs, (min, max) tokens per answer, sentences of context in the first turn
SIZE = {"tiny": (2, (2, 4), 1), "quick": (8, (4, 8), 3), "full": (32, (4, 8), 5)}


def build(size: str, seed: int) -> WorkloadInstance:
    programs, lengths, sentences = by_size(size, SIZE)
    return build_chat(NAME, size, seed, programs, lengths, sentences)


WORKLOAD = Workload(
    name=NAME, title="Multi-turn chat (short)",
    shape="4 user turns per program, each answered by a 4-8 token gen (tiny 2-4); system prompt shared by all",
    prefix_heavy=False, has_forks=False, has_constraints=False, build=build,
)
