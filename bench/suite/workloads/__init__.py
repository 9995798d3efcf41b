"""The evaluation's workloads, in report order: ``WORKLOADS[name] -> Workload``.

Each module builds one workload (see bench/suite/workload.py); synthetic.py holds the shared
fixed-seed text generators and multi_turn.py the chat program both multi-turn workloads use.
"""
from __future__ import annotations

from bench.suite.workload import Workload
from bench.suite.workloads import (
    generative_agents,
    hellaswag_20shot,
    json_decode,
    llm_judge,
    mmlu_5shot,
    multi_turn_long,
    multi_turn_short,
    rag_shared_context,
    react_agent,
    skeleton_of_thought,
    tree_of_thought,
)

_ORDER = [
    mmlu_5shot, hellaswag_20shot, react_agent, generative_agents, tree_of_thought, skeleton_of_thought,
    llm_judge, json_decode, multi_turn_short, multi_turn_long, rag_shared_context,
]

WORKLOADS: dict[str, Workload] = {module.WORKLOAD.name: module.WORKLOAD for module in _ORDER}


def get_workload(name: str) -> Workload:
    """The workload called `name`; KeyError naming the known workloads otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None


__all__ = ["WORKLOADS", "get_workload"]
