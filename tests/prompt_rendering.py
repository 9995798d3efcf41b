"""A reference renderer for prefix-hoisting tests: each stream's text with placeholders for values
(``<arg:x>``, ``<gen:node>``, ``[user]``...) following fork semantics: a child starts with its
parent's text at the fork; a concatenate-and-append join appends each child's text after that point.
"""
from __future__ import annotations

import itertools
import os
import runpy
from typing import NamedTuple, Optional

from sglc.frontend.function import SglFunction
from sglc.ir import Graph, Node, Op

SAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")
SAMPLES = {
    "essay_judge": "essay_judge", "few_shot_qa": "few_shot_qa", "tree_of_thought": "tree_of_thought",
    "multi_turn_chat": "multi_turn_chat", "json_extraction": "json_extraction", "react_agent": "react_agent",
    "call_other_program": "research_brief",
}


class Rendering(NamedTuple):
    observed: dict  # ("prompt", gen) / ("value", node) / ("final", stream) -> text or value
    fork_text: dict  # fork name -> the text its children start with


def render_path(g: Graph, cases: dict[str, int]) -> Rendering:
    """Run `g` symbolically for one outcome of every branch (`cases`: branch name -> case)."""
    text: dict[int, str] = {0: ""}
    values: dict[Node, object] = {}
    variables: dict[int, dict[str, object]] = {0: {}}
    scopes: dict[int, list[int]] = {}
    observed: dict = {}
    fork_text: dict[str, str] = {}
    for node in g.nodes:
        if any(cases[gd.branch.name] != gd.case for gd in node.guard_chain()):
            continue
        s, op = node.stream, node.op
        if op is Op.ARGUMENT:
            values[node] = f"<arg:{node.attrs['name']}>"
        elif op is Op.CONSTANT_TEXT:
            text[s] += node.attrs["text"]
        elif op is Op.APPEND:
            text[s] += str(values[node.inputs[0]])
        elif op in (Op.ROLE_BEGIN, Op.ROLE_END):
            text[s] += f"[{'/' if op is Op.ROLE_END else ''}{node.attrs['role']}]"
        elif op in (Op.IMAGE, Op.VIDEO):
            text[s] += f"<{op.value}:{values[node.inputs[0]] if node.inputs else node.attrs['path']}>"
        elif op in (Op.GEN, Op.SELECT):
            observed[("prompt", node.name)] = text[s]
            values[node] = f"<{op.value}:{node.name}>"
            variables[s][node.attrs["name"]] = values[node]
            text[s] += values[node]
        elif op is Op.VARIABLE:
            source = values[node.inputs[0]]
            values[node] = source[node.attrs["name"]] if isinstance(source, dict) else source
            observed[("value", node.name)] = values[node]
        elif op is Op.STREAM_TEXT:
            values[node] = observed[("value", node.name)] = text[s]
        elif op is Op.VAR_SCOPE_BEGIN:
            scopes.setdefault(s, []).append(len(text[s]))
        elif op is Op.VAR_SCOPE_END:
            values[node] = observed[("value", node.name)] = text[s][scopes[s].pop():]
            variables[s][node.attrs["name"]] = values[node]
        elif op is Op.FORK:
            fork_text[node.name] = text[s]
        elif op is Op.GET_FORK_ITEM:
            text[s], variables[s] = fork_text[node.inputs[0].name], {}
        elif op is Op.JOIN:
            children = [i.stream for i in node.inputs[1:]]
            start = len(fork_text[node.inputs[0].name])
            if node.attrs["mode"] == "concate_and_append":
                text[s] += "".join(text[c][start:] for c in children)
            values[node] = {v: tuple(variables[c].get(v) for c in children) for v in node.attrs.get("variables") or []}
    for s, t in text.items():
        observed[("final", s)] = t
    return Rendering(observed, fork_text)


def branch_paths(g: Graph, limit: int = 64) -> list[dict[str, int]]:
    branches = [n for n in g.nodes if n.op is Op.BRANCH]
    combos = itertools.product(*(range(len(b.attrs["cases"])) for b in branches))
    return [{b.name: c for b, c in zip(branches, combo)} for combo in itertools.islice(combos, limit)]


def assert_same_prompts(before: Graph, after: Graph) -> None:
    """Every prompt, value and original stream's final text is the same on every branch path."""
    for cases in branch_paths(before):
        old, new = render_path(before, cases).observed, render_path(after, cases).observed
        for key, value in old.items():
            assert new.get(key) == value, f"{key} changed on path {cases}"
        extra = {k for k in new if k not in old}
        assert all(k[0] == "final" and k[1] >= before.num_streams for k in extra), extra


def fork_prefix(g: Graph, fork: str, cases: Optional[dict[str, int]] = None) -> str:
    return render_path(g, cases or {b: 0 for b in branch_paths(g)[0]}).fork_text[fork]


def load_sample(name: str) -> Graph:
    namespace = runpy.run_path(os.path.join(SAMPLES_DIR, f"{name}.py"), run_name=f"sample_{name}")
    program = namespace[SAMPLES[name]]
    assert isinstance(program, SglFunction)
    return program.trace()


