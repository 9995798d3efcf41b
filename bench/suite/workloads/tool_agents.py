"""Multi-agent workload with tool calls between steps (issue 28).

Each program is a planner and a critic working one task in one conversation, over the task's own
case file (a few hundred tokens of documents no other program shares): per round, the
planner proposes an action (a gen), a tool runs it (Python on the generated text: a graph break,
then a sleep standing for the tool's latency: a search, a code run, an API), its result is
appended, and the critic comments (a gen). While a program waits on its tool, its prefix sits in
the cache with nobody using it: the case where LRU evicts exactly the prefixes that are needed
next, and where the program hints say they are.

Deterministic per seed: tasks, tool results and delays depend only on (seed, program, round), so
every system runs the same model work (the tool's text does not depend on what was generated).
"""
from __future__ import annotations

import random
import time
from typing import Any

import sglc as sgl
from bench.suite.workloads.synthetic import CITIES, OCCUPATIONS, person, town_document

SYSTEM = (
    "You are a team of two agents solving research tasks with tools. The Planner proposes exactly one "
    "tool call per turn, written as tool_name[argument]. The tools are search[query], which returns an "
    "encyclopedia paragraph, and calc[expression], which returns a number. The Critic checks the tool "
    "result, says whether the plan is on track, and names what is still missing. Keep every turn to one "
    "short line. Finish with the Planner writing finish[answer]."
)


def task_text(rng: random.Random) -> str:
    who = person(rng)
    return (f"Find the river of the town where {who}, a {rng.choice(OCCUPATIONS)} from {rng.choice(CITIES)}, "
            f"grew up, and how many years ago the town was founded.")


#: Paragraphs a tool call returns (a search's top results: ~85 tokens each with SmolLM2's tokenizer).
RESULT_PARAGRAPHS = 1
#: Paragraphs of each program's case file.
CASE_PARAGRAPHS = 7


def tool_result(seed: int, program: int, round_no: int) -> str:
    rng = random.Random(f"tool:{seed}:{program}:{round_no}")
    return " ".join(town_document(rng)[0] for _ in range(RESULT_PARAGRAPHS))


def tool_delay(seed: int, program: int, round_no: int, mean_s: float) -> float:
    """Seconds the tool takes: uniform in [0.5, 1.5] x mean."""
    return mean_s * random.Random(f"delay:{seed}:{program}:{round_no}").uniform(0.5, 1.5)


def make_program(rounds: int, tokens: int, mean_delay_s: float) -> Any:
    def run_tool(action: str, seed: int, program: int, round_no: int) -> str:
        action.split()  # NOTE: the tool reads the generated action: the graph break is here
        time.sleep(tool_delay(seed, program, round_no, mean_delay_s))
        return tool_result(seed, program, round_no)

    # NOTE: no stop="\n": SmolLM2's first token after "Planner: " is a newline, so every step
    # generated nothing and the workload had no decode at all (384 tokens for 64 programs)
    @sgl.function
    def tool_agents(s, task, case_file, tool_seed, agent_id):
        s += sgl.system(SYSTEM)
        s += "Case file:\n" + case_file + "\nTask: " + task + "\n"
        for k in range(rounds):
            s += "Planner: " + sgl.gen("plan_" + str(k), max_tokens=tokens) + "\n"
            s += "Tool result: " + run_tool(s["plan_" + str(k)], tool_seed, agent_id, k) + "\n"
            s += "Critic: " + sgl.gen("critique_" + str(k), max_tokens=tokens) + "\n"
    return tool_agents


def inputs(seed: int, programs: int) -> list[dict[str, Any]]:
    rng = random.Random(f"tasks:{seed}")
    # NOTE: not "seed": run()'s sampling keyword of that name would take it
    return [{"task": task_text(rng), "case_file": "\n".join(town_document(rng)[0] for _ in range(CASE_PARAGRAPHS)),
             "tool_seed": seed, "agent_id": i} for i in range(programs)]
