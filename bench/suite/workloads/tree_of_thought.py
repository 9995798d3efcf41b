"""Tree of thought on GSM8K-like word problems: plans, attempts per plan, self-checks, an answer.

The question forks into P plans; each plan forks into A attempts; each attempt is judged by a
`select` (yes/no/unsure); concatenate-and-append joins bring the whole tree back to the parent,
which generates the final answer. A long constant tutor prompt is shared by every program and
the question by every branch of a program.
"""
from __future__ import annotations

from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import rng_for, word_problem

NAME = "tree_of_thought"

SYSTEM = (
    "You are a patient mathematics tutor. For every word problem you first outline a short plan, then carry "
    "out the plan step by step, checking each arithmetic operation, and finally state the numeric answer on "
    "its own line. Use only the quantities given in the problem. Keep each step to one sentence. When a plan "
    "turns out to be wrong, say so and try another approach. Units matter: keep track of them in every step. "
    "Prefer simple operations over clever tricks, and write every intermediate result explicitly so that "
    "another student could follow and check the reasoning."
)

# programs, plans, attempts per plan, plan tokens, attempt tokens, answer tokens
SIZE = {"tiny": (2, 2, 2, 2, 3, 2), "quick": (3, 3, 2, 6, 8, 4), "full": (16, 3, 2, 24, 48, 8)}


def make_program(plans: int, attempts: int, plan_tokens: int, attempt_tokens: int, answer_tokens: int) -> Any:
    @sgl.function
    def tree_of_thought(s, question):
        s += sgl.system(SYSTEM)
        s += sgl.user_begin() + "Question: " + question + "\n"
        forks = s.fork(plans)
        for i, plan in enumerate(forks):
            plan += "\nPlan " + str(i + 1) + ": " + sgl.gen("plan", max_tokens=plan_tokens)
            tries = plan.fork(attempts)
            for j, attempt in enumerate(tries):
                attempt += "\nAttempt " + str(j + 1) + ": " + sgl.gen("solution", max_tokens=attempt_tokens)
                attempt += "\nIs this attempt correct? " + sgl.select("correct", choices=["yes", "no", "unsure"])
            tries.join(mode="concate_and_append")
        forks.join(mode="concate_and_append")
        s += "\nConsidering all plans and attempts above, give the final numeric answer." + sgl.user_end()
        s += sgl.assistant("The answer is " + sgl.gen("answer", max_tokens=answer_tokens))
    return tree_of_thought


def build(size: str, seed: int) -> WorkloadInstance:
    programs, *shape = by_size(size, SIZE)
    rng = rng_for(NAME, seed, "inputs")
    inputs = [{"question": word_problem(rng)[0]} for _ in range(programs)]
    warmup = {"question": word_problem(rng_for(NAME, seed, "warmup"))[0]}
    return make_instance(make_program(*shape), size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="Tree of thought",
    shape="3 plans x 2 attempts (tiny 2x2): 3 plan gens, 6 attempt gens + 6 selects, 1 answer gen; "
          "tutor prompt shared by all programs, question by all branches",
    prefix_heavy=True, has_forks=True, has_constraints=False, build=build,
)
