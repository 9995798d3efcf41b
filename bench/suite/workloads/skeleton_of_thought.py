"""Skeleton of thought: write a skeleton of N points, expand every point in parallel, summarize.

One gen writes the skeleton; N forks each expand one point (they share the question and the
skeleton); the join brings the expansions back into the parent, which writes a short summary.
"""
from __future__ import annotations

import random
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import TOPICS, rng_for

NAME = "skeleton_of_thought"

SYSTEM = (
    "You are an organized assistant. You answer in two stages. First you write only a skeleton of the answer: "
    "a short numbered list of points, each three to five words, with no details. Then each point is expanded "
    "separately into one or two clear sentences that stand on their own. Do not repeat other points while "
    "expanding one, and keep the advice practical."
)
QUESTIONS = [
    "What are the most useful tips for {topic}?", "How should a beginner approach {topic}?",
    "What are common mistakes when {topic}, and how can they be avoided?",
    "What does a good weekly routine for {topic} look like?", "Why do people struggle with {topic}?",
]

# programs, points, skeleton tokens, tokens per point, summary tokens
SIZE = {"tiny": (2, 2, 3, 2, 2), "quick": (6, 3, 12, 10, 6), "full": (16, 5, 48, 64, 24)}


def question(rng: random.Random) -> str:
    return rng.choice(QUESTIONS).format(topic=rng.choice(TOPICS))


def make_program(points: int, skeleton_tokens: int, point_tokens: int, summary_tokens: int) -> Any:
    @sgl.function
    def skeleton_of_thought(s, question):
        s += sgl.system(SYSTEM)
        s += sgl.user("Question: " + question + "\nWrite the skeleton: exactly " + str(points) + " numbered points.")
        s += sgl.assistant("Skeleton:\n1." + sgl.gen("skeleton", max_tokens=skeleton_tokens))
        forks = s.fork(points)
        for i, f in enumerate(forks):
            f += sgl.user("Expand point " + str(i + 1) + " of the skeleton into one or two sentences.")
            f += sgl.assistant(sgl.gen("point", max_tokens=point_tokens))
        forks.join()
        with s.user():
            s += "The expanded points are:\n"
            for i, f in enumerate(forks):
                s += str(i + 1) + ". " + f["point"] + "\n"
            s += "Summarize the answer in one sentence."
        s += sgl.assistant(sgl.gen("summary", max_tokens=summary_tokens))
    return skeleton_of_thought


def build(size: str, seed: int) -> WorkloadInstance:
    programs, *shape = by_size(size, SIZE)
    rng = rng_for(NAME, seed, "inputs")
    texts: list[str] = []
    while len(texts) < programs + 1:  # distinct questions; the last one is the warm-up
        text = question(rng)
        if text not in texts:
            texts.append(text)
    inputs = [{"question": t} for t in texts]
    return make_instance(make_program(*shape), size, inputs[-1], inputs[:-1])


WORKLOAD = Workload(
    name=NAME, title="Skeleton of thought",
    shape="1 skeleton gen, N parallel point expansions (tiny 2, quick 3, full 5), 1 summary gen",
    prefix_heavy=False, has_forks=True, has_constraints=False, build=build,
)
