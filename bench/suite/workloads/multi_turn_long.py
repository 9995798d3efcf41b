"""Multi-turn chat with long outputs: 4 user turns, each answered in 256-512 tokens (see multi_turn.py).

The "quick" size keeps the shape but caps the answers (decoding hundreds of tokens per turn is
far too slow for the quick report on a CPU); the cap is stated in the workload's shape.
"""
from __future__ import annotations

from bench.suite.workload import Workload, WorkloadInstance, by_size
from bench.suite.workloads.multi_turn import build_chat

NAME = "multi_turn_long"

# programs, (min, max) tokens per answer, sentences of context in the first turn
SIZE = {"tiny": (2, (3, 4), 1), "quick": (4, (12, 20), 3), "full": (16, (256, 512), 5)}


def build(size: str, seed: int) -> WorkloadInstance:
    programs, lengths, sentences = by_size(size, SIZE)
    return build_chat(NAME, size, seed, programs, lengths, sentences)


WORKLOAD = Workload(
    name=NAME, title="Multi-turn chat (long)",
    shape="4 user turns per program, each answered by a 256-512 token gen (full); quick caps at 12-20, tiny 3-4; "
          "system prompt shared by all",
    prefix_heavy=False, has_forks=False, has_constraints=False, build=build,
)
