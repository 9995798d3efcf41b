"""lower_constraints: each constrained GEN gets its compressed FSM, compiled once, as attr ``fsm``.

A GEN constrained by ``regex``, ``json_schema`` (compact JSON text or a dict), ``dtype``
(int / float / bool / str) or ``choices`` is lowered here, at compile time, to the character
FSM of :mod:`sglc.fsm`; the node keeps its original constraint attribute (for readability and
for backends that take a regex) and gains ``fsm``: the plain-data form from
:func:`sglc.fsm.fsm_to_dict`, so it serializes into graph.pb exactly and the runtime rebuilds it
with :func:`sglc.fsm.fsm_from_dict` without recompiling anything per request.

SELECT nodes are left alone: a select is scored (every choice's likelihood), not decoded.

NOTE: the pass is idempotent. A node whose ``fsm`` was compiled from the pattern its constraint
gives today is left unchanged; a stale one (the constraint was edited after lowering) is
recompiled. Every FSM's ``pattern`` field is the regex it was compiled from, which is the key.

Errors: a pattern the FSM library cannot compile (invalid or unsupported regex, an unsupported
JSON schema keyword, a language with no string at all) raises :class:`ConstraintLoweringError`,
a one-line :class:`~sglc.errors.SglcError` naming the node, its constraint and the user's line.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from sglc import fsm
from sglc.errors import SglcError
from sglc.ir.gen_constraint import CONSTRAINT_ATTRS, constraint_attrs
from sglc.ir.gen_constraint import constraint_pattern as pattern_of
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.passes.pass_result import PassResult

__all__ = ["CONSTRAINT_ATTRS", "ConstraintLoweringError", "compile_constraint", "constraint_attr",
           "constraint_pattern", "lower_constraints"]


class ConstraintLoweringError(SglcError):
    """A gen's constraint cannot be compiled to an FSM; the message names node and source line."""

    def __init__(self, node: Node, attr: str, detail: str) -> None:
        self.node_name = node.name
        self.source = node.source
        self.attr = attr
        where = f"{node.source}: " if node.source else ""
        value = node.attrs.get(attr)
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{where}gen %{node.name}: cannot lower {attr}={shown!r}: {detail}")


def constraint_attr(node: Node) -> Optional[str]:
    """The name of the constraint attribute set on a GEN node, or None when it has none.

    Raises ConstraintLoweringError when more than one is set (the frontend never does that).
    """
    present = constraint_attrs(node.attrs)
    if len(present) > 1:
        raise ConstraintLoweringError(node, present[0], f"gen takes one constraint, got {', '.join(present)}")
    return present[0] if present else None


def constraint_pattern(node: Node, attr: str) -> str:
    """The regex that the node's constraint ``attr`` stands for (what the FSM is compiled from)."""
    try:
        return pattern_of(attr, node.attrs[attr])
    except (fsm.FSMError, TypeError, ValueError) as err:
        raise ConstraintLoweringError(node, attr, _reason(err)) from None


def compile_constraint(node: Node) -> Optional[dict[str, Any]]:
    """The ``fsm`` attribute a GEN node should carry (None when it is unconstrained)."""
    attr = constraint_attr(node)
    if attr is None:
        return None
    pattern = constraint_pattern(node, attr)
    try:
        compiled = fsm.compile_regex(pattern)  # NOTE: lru-cached: equal patterns compile once
    except fsm.FSMError as err:
        raise ConstraintLoweringError(node, attr, _reason(err)) from None
    if compiled.is_empty():
        raise ConstraintLoweringError(node, attr, "it matches no string at all, so no output could satisfy it")
    return fsm.fsm_to_dict(compiled)


def _reason(err: Exception) -> str:
    if isinstance(err, fsm.UnsupportedRegexError):
        return f"{err} (finite automata cannot express it)"
    return str(err)


def _is_current(node: Node, attr: str) -> bool:
    """Whether the node's ``fsm`` was compiled from what its constraint says now."""
    lowered = node.attrs.get("fsm")
    return isinstance(lowered, dict) and lowered.get("pattern") == constraint_pattern(node, attr)


def _needs_lowering(node: Node) -> bool:
    if node.op is not Op.GEN:
        return False
    attr = constraint_attr(node)
    if attr is None:
        return False
    return not _is_current(node, attr)


def lower_constraints(graph: Graph) -> PassResult:
    """Attach a compiled FSM to every constrained GEN; returns the input itself when all are."""
    todo = [i for i, node in enumerate(graph.nodes) if _needs_lowering(node)]
    if not todo:
        return PassResult(graph, False)
    graph = graph.copy()  # NOTE: the copy keeps node order, so positions carry over
    for i in todo:
        node = graph.nodes[i]
        node.attrs["fsm"] = compile_constraint(node)
    return PassResult(graph, True)
