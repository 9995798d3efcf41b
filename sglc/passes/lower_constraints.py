"""lower_constraints: each constrained GEN gets its constraint compiled once, at compile time:
a regular one to its compressed FSM (attr ``fsm``), a context-free one to its grammar (attr
``grammar``).

A GEN constrained by ``regex``, ``json_schema`` (compact JSON text or a dict), ``dtype``
(int / float / bool / str) or ``choices`` is lowered here to the character FSM of
:mod:`sglc.fsm`; the node keeps its original constraint attribute (for readability and for
backends that take a regex) and gains ``fsm``: the plain-data form from
:func:`sglc.fsm.fsm_to_dict`, so it serializes into graph.pb exactly and the runtime rebuilds it
with :func:`sglc.fsm.fsm_from_dict` without recompiling anything per request.

A GEN constrained by ``ebnf`` (GBNF / xgrammar EBNF text) or ``lark`` (a lark grammar), or by a
``json_schema`` whose ``$ref`` refers to itself (the one case the FSM library refuses as not
regular: :func:`~sglc.ir.gen_constraint.is_recursive_schema`), gains ``grammar``: the parsed,
verified ``sglc.grammar.Grammar`` (graph.pb's typed grammar message). The executor sends it as
GBNF text (``Grammar.to_ebnf()``) and the runtime picks the engine. Grammars are not turned into
FSMs here even when their language is regular: telling takes an analysis the runtime's engine
choice already makes, and a wrong guess would change what is accepted.

SELECT nodes are left alone: a select is scored (every choice's likelihood), not decoded.

NOTE: the pass is idempotent. A node whose lowered attribute was compiled from what its
constraint gives today is left unchanged; a stale one (the constraint was edited after lowering)
is recompiled, and a lowered attribute of the other kind is dropped.

Errors: a constraint that cannot be compiled (invalid or unsupported regex, an unsupported JSON
schema keyword, a language with no string at all, grammar text that does not parse, a grammar
over its budget, left recursion the grammar engine refuses: the pass builds each new grammar's
vocabulary-free automaton once to find out) raises :class:`ConstraintLoweringError`, a one-line
:class:`~sglc.errors.SglcError` naming the node, its constraint and the user's line.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from sglc import fsm
from sglc.errors import SglcError
from sglc.ir.gen_constraint import (
    CONSTRAINT_ATTRS,
    GRAMMAR_ATTRS,
    constraint_attrs,
    constraint_grammar,
    is_recursive_schema,
)
from sglc.ir.gen_constraint import constraint_pattern as pattern_of
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.passes.pass_result import PassResult

__all__ = ["CONSTRAINT_ATTRS", "ConstraintLoweringError", "compile_constraint", "constraint_attr",
           "constraint_pattern", "lowering_of", "lower_constraints"]


class ConstraintLoweringError(SglcError):
    """A gen's constraint cannot be compiled (to an FSM or a grammar); the message names node and
    source line."""

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
    """The ``fsm`` attribute a GEN node should carry (None when it is unconstrained or lowers to
    a grammar)."""
    target = lowering_of(node)
    if target is None or target[0] != "fsm":
        return None
    return _compile_fsm(node, constraint_attr(node), target[1])  # type: ignore[arg-type]


def lowering_of(node: Node) -> Optional[tuple[str, Any]]:
    """What the node's constraint lowers to: ``("fsm", its regex)``, ``("grammar", its Grammar)``,
    or None when it is unconstrained. ConstraintLoweringError when it cannot be compiled."""
    attr = constraint_attr(node)
    if attr is None:
        return None
    if attr in GRAMMAR_ATTRS:
        return "grammar", _grammar(node, attr)
    try:
        return "fsm", pattern_of(attr, node.attrs[attr])
    except (fsm.FSMError, TypeError, ValueError) as err:
        if is_recursive_schema(err):  # NOTE: not regular, so a grammar; any other refusal stays one
            return "grammar", _grammar(node, attr)
        raise ConstraintLoweringError(node, attr, _reason(err)) from None


def _grammar(node: Node, attr: str) -> Any:
    try:
        grammar = constraint_grammar(attr, node.attrs[attr])  # NOTE: cached: equal texts parse once
        # NOTE: the executor sends grammar.to_ebnf(); it must mean this grammar to the runtime
        sent = constraint_grammar("ebnf", grammar.to_ebnf()) if attr != "ebnf" else grammar
    except (TypeError, ValueError) as err:  # sglc.grammar's errors are FSMErrors (ValueErrors)
        raise ConstraintLoweringError(node, attr, str(err).strip().splitlines()[0]) from None
    if sent != grammar:
        raise ConstraintLoweringError(node, attr, "its grammar's GBNF text (what a request carries) reads back as "
                                                  "a different grammar; please report this sglc.grammar bug")
    return grammar


def _compile_fsm(node: Node, attr: str, pattern: str) -> dict[str, Any]:
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


def _is_current(node: Node, target: tuple[str, Any]) -> bool:
    """Whether the node carries exactly the lowered attribute ``target`` says, compiled from what
    its constraint gives now."""
    kind, value = target
    other = "grammar" if kind == "fsm" else "fsm"
    if node.attrs.get(other) is not None:
        return False
    if kind == "grammar":
        return node.attrs.get("grammar") == value
    lowered = node.attrs.get("fsm")
    return isinstance(lowered, dict) and lowered.get("pattern") == value


def lower_constraints(graph: Graph) -> PassResult:
    """Attach a compiled FSM or a grammar to every constrained GEN; returns the input itself when
    all have theirs."""
    todo = []
    for i, node in enumerate(graph.nodes):
        target = lowering_of(node) if node.op is Op.GEN else None
        if target is not None and not _is_current(node, target):
            todo.append((i, target))
    if not todo:
        return PassResult(graph, False)
    graph = graph.copy()  # NOTE: the copy keeps node order, so positions carry over
    for i, (kind, value) in todo:
        node = graph.nodes[i]
        node.attrs.pop("grammar" if kind == "fsm" else "fsm", None)
        if kind == "grammar":
            _check_grammar_compiles(node, constraint_attr(node), value)  # type: ignore[arg-type]
        node.attrs[kind] = _compile_fsm(node, constraint_attr(node), value) if kind == "fsm" else value  # type: ignore[arg-type]
    return PassResult(graph, True)


def _check_grammar_compiles(node: Node, attr: str, grammar: Any) -> None:
    """Build the grammar's pushdown automaton once (vocabulary-free; the runtime builds its own with
    the tokenizer), so what no request could run is refused now, naming the gen: a language with no
    string at all, left recursion through another rule, a grammar over the engine's budget."""
    from sglc.grammar.automaton import build_automaton

    try:
        build_automaton(grammar)
    except fsm.FSMError as err:  # EmptyLanguageError, GrammarError (LeftRecursionError), budget errors
        raise ConstraintLoweringError(node, attr, str(err).strip().splitlines()[0]) from None
