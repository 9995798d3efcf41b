"""ReAct agent trace replay: a long few-shot ReAct prefix shared by all programs, then K steps.

Each step generates a Thought + Action (stopping at "Observation" or the token limit); the
tool's answer is replayed from a generated trace (constant text per program) and appended, so
the next step sees the whole history, like SGLang's ReAct benchmark replaying HotpotQA traces.
Questions are three-hop ("which river flows through the hometown of the author of <novel>?")
over generated entities.
"""
from __future__ import annotations

import random
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import CITIES, OCCUPATIONS, person, rng_for, town_document

NAME = "react_agent"
MAX_STEPS = 4

INSTRUCTION = (
    "Solve a question answering task with interleaving Thought, Action, Observation steps. Thought can reason "
    "about the current situation, and Action can be three types:\n"
    "(1) Search[entity], which searches the exact entity on an encyclopedia and returns the first paragraph if "
    "it exists. If not, it will return some similar entities to search.\n"
    "(2) Lookup[keyword], which returns the next sentence containing keyword in the current passage.\n"
    "(3) Finish[answer], which returns the answer and finishes the task.\n"
    "Here are some examples.\n\n"
)
ADJECTIVES = ["Silent", "Golden", "Broken", "Hidden", "Last", "Distant", "Painted", "Winter", "Northern", "Quiet"]
NOUNS = ["Harbor", "Lantern", "Orchard", "Bridge", "Garden", "Voyage", "Letter", "Mountain", "Clock", "River"]

# programs, steps per program, thought+action tokens per step, few-shot example traces
SIZE = {"tiny": (2, 2, 3, 1), "quick": (5, 3, 10, 2), "full": (24, 4, 32, 4)}


def make_trace(rng: random.Random) -> tuple[str, list[tuple[str, str, str]]]:
    """(question, [(thought, action, observation)] x 4, the last step finishing with the answer)."""
    title = f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    author, year = person(rng), rng.randint(1920, 2015)
    town_text, town = town_document(rng)
    question = f"Which river flows through the hometown of the author of the novel '{title}'?"
    steps = [
        (f"I need to find the author of {title}, then the author's hometown, then the river there.",
         f"Search[{title}]",
         f"{title} is a {year} novel by {author}, written while the author worked as a "
         f"{rng.choice(OCCUPATIONS)} in {rng.choice(CITIES)}."),
        (f"{title} was written by {author}. I need to search {author} to find the hometown.",
         f"Search[{author}]",
         f"{author} (born {year - rng.randint(25, 60)}) is a novelist who grew up in {town['name']}, a town in "
         f"{town['region']}."),
        (f"{author} grew up in {town['name']}. I need to find which river flows through {town['name']}.",
         f"Search[{town['name']}]", town_text),
        (f"The river that flows through {town['name']} is the {town['river']}.",
         f"Finish[{town['river']}]", "Episode finished."),
    ]
    return question, steps


def example_text(question: str, steps: list[tuple[str, str, str]]) -> str:
    lines = [f"Question: {question}"]
    for k, (thought, action, observation) in enumerate(steps, start=1):
        lines += [f"Thought {k}: {thought}", f"Action {k}: {action}"]
        if not action.startswith("Finish"):
            lines.append(f"Observation {k}: {observation}")
    return "\n".join(lines) + "\n\n"


def make_program(prefix: str, steps: int, tokens: int) -> Any:
    """The program: the constant few-shot `prefix`, the question, then `steps` generated steps."""

    @sgl.function
    def react_agent(s, question, observation_1, observation_2, observation_3, observation_4):
        observations = (observation_1, observation_2, observation_3, observation_4)
        s += prefix + "Question: " + question + "\n"
        for k in range(1, steps + 1):
            s += "Thought " + str(k) + ":" + sgl.gen("step_" + str(k), max_tokens=tokens, stop="Observation")
            s += observations[k - 1]
    return react_agent


def trace_input(rng: random.Random) -> dict[str, Any]:
    question, steps = make_trace(rng)
    item: dict[str, Any] = {"question": question}
    for k, (_, _, observation) in enumerate(steps, start=1):
        item[f"observation_{k}"] = f"\nObservation {k}: {observation}\n"
    return item


def build(size: str, seed: int) -> WorkloadInstance:
    programs, steps, tokens, num_examples = by_size(size, SIZE)
    shots = rng_for(NAME, seed, "examples")
    prefix = INSTRUCTION + "".join(example_text(*make_trace(shots)) for _ in range(num_examples))
    rng = rng_for(NAME, seed, "inputs")
    items = [trace_input(rng) for _ in range(programs)]
    warmup = trace_input(rng_for(NAME, seed, "warmup"))
    return make_instance(make_program(prefix, steps, tokens), size, warmup, items)


WORKLOAD = Workload(
    name=NAME, title="ReAct agent",
    shape=f"K gens per program (tiny 2, quick 3, full {MAX_STEPS}) each followed by a replayed observation; "
          "a few-shot ReAct prefix shared by all programs",
    prefix_heavy=True, has_forks=False, has_constraints=False, build=build,
)
