"""Multi-turn chat, shared by multi_turn_short and multi_turn_long: a system prompt and 4 turns.

Every program is one conversation: a constant system prompt (shared by all programs), then four
user turns, each answered by an assistant gen that sees every earlier turn (the history is the
prefix the cache reuses turn after turn). Generation lengths are drawn per turn from the seed.
"""
from __future__ import annotations

from typing import Any

import sglc as sgl
from bench.suite.workload import WorkloadInstance, make_instance
from bench.suite.workloads.synthetic import rng_for, chat_turns

NUM_TURNS = 4

SYSTEM = (
    "You are a friendly and knowledgeable assistant. You help people with everyday questions about work, "
    "health, money, cooking, travel and learning. Answer in plain language, start with the most important "
    "point, and give concrete steps or examples when they help. If a question is unclear, make a reasonable "
    "assumption and say what it is. Keep answers honest: when something depends on the person's situation, "
    "say so and name what it depends on. Remember what the user said earlier in the conversation and build "
    "on it instead of repeating yourself."
)


def make_program(name: str, lengths: list[int]) -> Any:
    """A conversation program named `name` whose turn i generates lengths[i] tokens."""
    assert len(lengths) == NUM_TURNS, lengths

    def conversation(s, turn_1, turn_2, turn_3, turn_4):
        s += sgl.system(SYSTEM)
        for i, (turn, length) in enumerate(zip((turn_1, turn_2, turn_3, turn_4), lengths)):
            s += sgl.user(turn)
            s += sgl.assistant(sgl.gen("answer_" + str(i + 1), max_tokens=length))

    conversation.__name__ = conversation.__qualname__ = name
    return sgl.function(conversation)


def conversation_input(rng: Any, opener_sentences: int) -> dict[str, Any]:
    turns = chat_turns(rng, NUM_TURNS, opener_sentences)
    return {f"turn_{i + 1}": t for i, t in enumerate(turns)}


def build_chat(name: str, size: str, seed: int, programs: int, lengths: tuple[int, int],
               opener_sentences: int) -> WorkloadInstance:
    """A chat instance: `programs` conversations, turn lengths drawn in [lengths[0], lengths[1]]."""
    low, high = lengths
    drawn = rng_for(name, seed, "lengths")
    program = make_program(name, [drawn.randint(low, high) for _ in range(NUM_TURNS)])
    rng = rng_for(name, seed, "inputs")
    inputs = [conversation_input(rng, opener_sentences) for _ in range(programs)]
    warmup = conversation_input(rng_for(name, seed, "warmup"), opener_sentences)
    return make_instance(program, size, warmup, inputs)
