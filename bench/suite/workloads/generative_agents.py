"""Generative agents trace replay: an agent's description + memory stream, then reaction/plan/dialogue.

Each agent (description + a timestamped memory stream) is shared by several programs; each
program replays one moment of the simulation: for every call (should the agent react? what is
the plan? what does the agent say?) a replayed observation is appended, then the model answers,
so later calls see the earlier answers, like SGLang's generative-agents trace replay.
"""
from __future__ import annotations

import random
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import (
    ACTIVITIES, FIRST_NAMES, HOBBIES, LAST_NAMES, OCCUPATIONS, PLACES, TOPICS, rng_for, sentence,
)

NAME = "generative_agents"

SYSTEM = (
    "You simulate one resident of a small town. Stay in character, use only what the description and the "
    "memories say about the agent, and answer each question briefly and concretely."
)
TRAITS = ["friendly", "curious", "patient", "stubborn", "cheerful", "shy", "generous", "ambitious", "careful",
          "talkative", "kind", "restless"]
CALLS = [  # (variable, question after the observation; NAME is the agent's first name)
    ("reaction", "Should NAME react to the observation, and if so, what would be an appropriate reaction?"),
    ("plan", "Given the memories and the observation, what is NAME's plan for the next hour?"),
    ("dialogue", "What would NAME say next in this conversation?"),
]

# agents (the warm-up uses one more), programs per agent, memories per agent, tokens per call
SIZE = {"tiny": (1, 2, 4, 2), "quick": (3, 4, 10, 6), "full": (4, 6, 30, 24)}


def make_agent(rng: random.Random, num_memories: int) -> tuple[str, str]:
    """(first name, the agent block: description + memory stream)."""
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    traits = ", ".join(rng.sample(TRAITS, 3))
    description = (
        f"Name: {first} {last} (age {rng.randint(20, 70)})\n"
        f"Innate traits: {traits}\n"
        f"Occupation: {rng.choice(OCCUPATIONS)}; enjoys {rng.choice(HOBBIES)}.\n"
        f"Currently: {first} is thinking about {rng.choice(TOPICS)} and wants to spend more time at "
        f"{rng.choice(PLACES)}.\n"
    )
    hour = 7
    memories = []
    for _ in range(num_memories):
        hour, minute = hour + rng.randint(0, 1), rng.choice([0, 10, 15, 20, 30, 40, 45, 50])
        memories.append(f"[{min(hour, 23):02d}:{minute:02d}] {sentence(rng)}")
    return first, description + "Memories:\n" + "\n".join(memories) + "\n"


def observations(rng: random.Random, first: str) -> list[str]:
    """One replayed observation per call of CALLS."""
    other = rng.choice([n for n in FIRST_NAMES if n != first])
    place = rng.choice(PLACES)
    return [
        f"It is {rng.randint(1, 6)}:{rng.choice(['00', '15', '30', '45'])} pm. {other} walks into {place} while "
        f"{first} is there, {rng.choice(ACTIVITIES)}.",
        f"{other} mentions that there will be a meeting about {rng.choice(TOPICS)} tomorrow at {place}.",
        f"{other} asks {first}: \"Do you have a minute to talk about {rng.choice(HOBBIES)}?\"",
    ]


def make_program(tokens: int) -> Any:
    @sgl.function
    def generative_agents(s, name, agent, observation_1, observation_2, observation_3):
        s += sgl.system(SYSTEM)
        with s.user():
            s += agent
            for (variable, question), observation in zip(CALLS, (observation_1, observation_2, observation_3)):
                head, tail = question.split("NAME")
                s += "\nObservation: " + observation + "\nQuestion: " + head + name + tail + "\nAnswer:"
                s += sgl.gen(variable, max_tokens=tokens)
    return generative_agents


def agent_inputs(rng: random.Random, num_programs: int, num_memories: int) -> list[dict[str, Any]]:
    first, agent = make_agent(rng, num_memories)
    out = []
    for _ in range(num_programs):
        obs = observations(rng, first)
        out.append({"name": first, "agent": agent, "observation_1": obs[0], "observation_2": obs[1],
                    "observation_3": obs[2]})
    return out


def build(size: str, seed: int) -> WorkloadInstance:
    agents, per_agent, memories, tokens = by_size(size, SIZE)
    inputs: list[dict[str, Any]] = []
    for a in range(agents):
        inputs += agent_inputs(rng_for(NAME, seed, f"agent{a}"), per_agent, memories)
    warmup = agent_inputs(rng_for(NAME, seed, "warmup"), 1, memories)[0]
    return make_instance(make_program(tokens), size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="Generative agents",
    shape="3 gens per program (reaction, plan, dialogue), each after a replayed observation; "
          "agent description + memory stream shared by the programs of one agent",
    prefix_heavy=True, has_forks=False, has_constraints=False, build=build,
)
