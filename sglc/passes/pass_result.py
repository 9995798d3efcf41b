"""What a pass is: a pure function ``Graph -> PassResult(graph, modified)``.

NOTE: passes are pure — they never change the graph they are given. One that rewrites works on
``graph.copy()`` and returns the copy, or returns the input itself with ``modified=False`` when
there was nothing to do. Every pass module imports this one; none imports the manager.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from sglc.ir.graph import Graph


class PassResult(NamedTuple):
    graph: Graph
    modified: bool


Pass = Callable[[Graph], PassResult]


def pass_name(fn: Pass) -> str:
    """The name a pass is reported by (its function name)."""
    return getattr(fn, "__name__", type(fn).__name__)
