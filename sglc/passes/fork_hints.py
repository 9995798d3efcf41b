"""fork_hints: CACHE_PREFIX hints before each FORK and after the constant prefix of a batch.

Two kinds of hint, told apart by ``attrs["scope"]``:

- ``"fork"``: right before every FORK, in the fork's stream, under the fork's guard, with the
  fork's source line. The runtime prefills the stream's text so far once, so the fork's children
  (which all start with that text) find it cached instead of each computing it. Skipped for a
  one-way ``hoisted`` fork made by prefix_hoisting: the hint before the fork inside its child
  stream caches a longer prefix of the same text.
- ``"batch"``: right after the constant prefix of stream 0 — the leading CONSTANT_TEXT /
  ROLE_BEGIN / ROLE_END nodes before the first node that reads an argument, calls the model or
  does anything else. Every input of a batch shares this text, so the executor sends the hint
  once before the batch starts (and may skip it per input). No hint when that prefix is empty.

What it never changes: the text of any stream (a hint appends nothing), and any existing node.
Idempotent: a FORK whose previous node in its stream is already a CACHE_PREFIX (any scope) under
the same guard gets no second hint, and a constant prefix already followed by a CACHE_PREFIX
gets no batch hint.
"""
from __future__ import annotations

from typing import Optional

from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.passes.pass_result import PassResult

#: Ops that may form the constant prefix of stream 0 (they read no argument and call no model).
CONSTANT_PREFIX_OPS = frozenset({Op.CONSTANT_TEXT, Op.ROLE_BEGIN, Op.ROLE_END})


def _forks_needing_hints(graph: Graph) -> list[Node]:
    """FORKs (but hoisted ones) whose previous node in their stream is not a CACHE_PREFIX under the same guard."""
    previous: dict[int, Node] = {}
    needing: list[Node] = []
    for node in graph.nodes:
        if node.op is Op.FORK and not node.attrs.get("hoisted") and not node.attrs.get("program"):
            before = previous.get(node.stream)
            if before is None or before.op is not Op.CACHE_PREFIX or before.guard != node.guard:
                needing.append(node)
        previous[node.stream] = node
    return needing


def _batch_hint_anchor(graph: Graph) -> Optional[Node]:
    """The last node of stream 0's constant prefix, or None if the prefix is empty or already hinted."""
    last: Optional[Node] = None
    has_text = False
    following: Optional[Node] = None
    for node in graph.nodes:
        if node.stream != 0 or node.op is Op.ARGUMENT:
            continue  # NOTE: arguments are values outside the text order; only reads of them count
        if node.op in CONSTANT_PREFIX_OPS and node.guard is None:
            last = node
            has_text = has_text or node.op is not Op.CONSTANT_TEXT or bool(node.attrs["text"])
            continue
        following = node
        break
    if last is None or not has_text:
        return None
    if following is not None and following.op is Op.CACHE_PREFIX:
        return None  # already hinted (by an earlier run or by hand)
    return last


def fork_hints(graph: Graph) -> PassResult:
    """Insert fork- and batch-scoped CACHE_PREFIX hints; returns the input itself when none is needed."""
    forks = _forks_needing_hints(graph)
    anchor = _batch_hint_anchor(graph)
    if not forks and anchor is None:
        return PassResult(graph, False)
    graph = graph.copy()
    # NOTE: the batch hint goes in first; a fork right after the constant prefix is then already
    # preceded by a CACHE_PREFIX and needs no hint of its own (the batch hint covers its prefix).
    if anchor is not None:
        anchor = graph.find(anchor.name)
        with graph.inserting_after(anchor):
            graph.create_node(Op.CACHE_PREFIX, attrs={"scope": "batch"}, stream=0, meta=_source(anchor))
    for fork in _forks_needing_hints(graph):
        with graph.inserting_before(fork):
            graph.create_node(
                Op.CACHE_PREFIX, attrs={"scope": "fork"}, stream=fork.stream, guard=fork.guard, meta=_source(fork)
            )
    return PassResult(graph, True)


def _source(node: Node) -> dict[str, str]:
    return {"source": node.source} if node.source else {}
