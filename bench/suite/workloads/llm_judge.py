"""LLM judge (branch-solve-merge): judge an answer on several dimensions in parallel, then merge.

A constant teacher prompt is shared by every program; the question and the student's answer by
every branch of a program. Three forks each judge one dimension; the join merges the judgments
into the parent, which writes a verdict and picks a score from 1 to 5 with a `select`.
"""
from __future__ import annotations

import random
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import rng_for, word_problem

NAME = "llm_judge"

SYSTEM = (
    "You are an experienced teacher who evaluates answers written by students. You judge one dimension at a "
    "time, quote the part of the answer you refer to, and never reward length for its own sake. A good answer "
    "is correct, complete, clearly organized and supported by evidence. Be specific and fair, and keep each "
    "judgment short. After the individual judgments you merge them into one verdict with a score from 1 to 5, "
    "where 1 means the answer is wrong or missing and 5 means it is correct, complete and easy to follow."
)
DIMENSIONS = ["correctness", "clarity", "evidence"]

# programs, judgment tokens, verdict tokens
SIZE = {"tiny": (2, 2, 2), "quick": (6, 10, 6), "full": (16, 48, 24)}


def student_answer(rng: random.Random) -> dict[str, Any]:
    """A word problem and a worked answer that is right or slightly wrong."""
    problem, right = word_problem(rng)
    guess = right + rng.choice([0, 0, -2, 1, 5])
    steps = rng.choice([
        "First I multiplied the packs by the items in each pack. Then I added what they had and took away the "
        "gift.",
        "I added everything together and then subtracted the items that were given away.",
        "The packs give the most items, so I computed them first, then the starting amount, then the gift.",
    ])
    return {"question": problem, "answer": f"{steps} So the answer is {guess}."}


def make_program(judgment_tokens: int, verdict_tokens: int) -> Any:
    @sgl.function
    def llm_judge(s, question, answer):
        s += sgl.system(SYSTEM)
        s += sgl.user("Question: " + question + "\nStudent answer: " + answer)
        s += sgl.assistant("I have read the question and the answer.")
        forks = s.fork(len(DIMENSIONS))
        for f, dimension in zip(forks, DIMENSIONS):
            f += sgl.user("Judge only the " + dimension + " of the answer.")
            f += sgl.assistant(sgl.gen("judgment", max_tokens=judgment_tokens))
        forks.join()
        with s.user():
            s += "Merge these judgments into one verdict.\n"
            for f, dimension in zip(forks, DIMENSIONS):
                s += dimension + ": " + f["judgment"] + "\n"
        s += sgl.assistant(sgl.gen("verdict", max_tokens=verdict_tokens))
        s += sgl.user("Score from 1 to 5?")
        s += sgl.assistant(sgl.select("score", choices=["1", "2", "3", "4", "5"]))
    return llm_judge


def build(size: str, seed: int) -> WorkloadInstance:
    programs, *shape = by_size(size, SIZE)
    rng = rng_for(NAME, seed, "inputs")
    inputs = [student_answer(rng) for _ in range(programs)]
    warmup = student_answer(rng_for(NAME, seed, "warmup"))
    return make_instance(make_program(*shape), size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="LLM judge",
    shape="3 dimension judgments in parallel forks, merged into 1 verdict gen + 1 select score; "
          "teacher prompt shared by all programs, question + answer by all branches",
    prefix_heavy=True, has_forks=True, has_constraints=False, build=build,
)
