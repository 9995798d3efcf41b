"""A grammar whose language is regular, written as a regex: the runtime then runs it on the
compressed FSM path (token index precomputed per state, compressed jump-forward) instead of the
pushdown engine. "One engine decides": GBNF such as llama.cpp's list.gbnf or a fixed form with
choices and bounded repeats is regular; anything that refers back into itself is left to the
grammar engine.

Decided conservatively: a grammar is taken as regular when no rule reachable from the root is on a
reference cycle (every rule can then be inlined). Right-linear recursion (``a ::= "x" a | ""``) is
regular too but is not detected; it stays on the grammar engine, which handles it correctly.
Inlining can grow the text exponentially (a rule used twice by a rule used twice ...), so the regex
is built under ``max_chars`` and abandoned (None) past it.
"""
from __future__ import annotations

from sglc.fsm.charset import CharSet
from sglc.fsm.regex_ast import Alt, Chars, Concat, Node, Repeat as RegexRepeat, to_regex

from .ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq


class _TooLarge(Exception):
    pass


def regex_of(grammar: Grammar, max_chars: int = 100_000) -> str | None:
    """``grammar`` as an equivalent regex when no rule reachable from its root is recursive and
    the regex stays under ``max_chars`` characters (and as many tree nodes); else None."""
    if _has_cycle(grammar):
        return None
    budget = [max_chars]
    try:
        tree = _inline(grammar, grammar.rules[grammar.root], {}, budget)
        text = to_regex(tree)
    except _TooLarge:
        return None
    return text if len(text) <= max_chars else None


def _refs(expr: Expr) -> list[str]:
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, RuleRef):
            out.append(node.name)
        elif isinstance(node, Seq):
            stack.extend(node.items)
        elif isinstance(node, Choice):
            stack.extend(node.options)
        elif isinstance(node, Repeat):
            stack.append(node.item)
    return out


def _has_cycle(grammar: Grammar) -> bool:
    """Whether a rule reachable from the root reaches itself (iterative three-colour DFS)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    stack: list[tuple[str, list[str]]] = [(grammar.root, _refs(grammar.rules[grammar.root]))]
    state[grammar.root] = 1
    while stack:
        name, pending = stack[-1]
        if not pending:
            state[name] = 2
            stack.pop()
            continue
        nxt = pending.pop()
        seen = state.get(nxt)
        if seen == 1:
            return True
        if seen is None:
            state[nxt] = 1
            stack.append((nxt, _refs(grammar.rules[nxt])))
    return False


def _inline(grammar: Grammar, expr: Expr, done: dict[str, Node], budget: list[int]) -> Node:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if isinstance(expr, Literal):
        budget[0] -= len(expr.text)
        if budget[0] < 0:
            raise _TooLarge
        return Concat(tuple(Chars(CharSet.of_chars(c)) for c in expr.text))
    if isinstance(expr, CharClass):
        return Chars(expr.chars)
    if isinstance(expr, Seq):
        return Concat(tuple(_inline(grammar, item, done, budget) for item in expr.items))
    if isinstance(expr, Choice):
        return Alt(tuple(_inline(grammar, option, done, budget) for option in expr.options))
    if isinstance(expr, Repeat):
        return RegexRepeat(_inline(grammar, expr.item, done, budget), expr.min, expr.max)
    if isinstance(expr, RuleRef):
        got = done.get(expr.name)
        if got is None:
            got = done[expr.name] = _inline(grammar, grammar.rules[expr.name], done, budget)
        else:  # NOTE: every use is printed again: charge it as if built again
            budget[0] -= _size(got)
            if budget[0] < 0:
                raise _TooLarge
        return got
    raise TypeError(f"not a grammar expression: {expr!r}")


def _size(node: Node) -> int:
    if isinstance(node, Chars):
        return 1
    if isinstance(node, Concat):
        return 1 + sum(_size(i) for i in node.items)
    if isinstance(node, Alt):
        return 1 + sum(_size(o) for o in node.options)
    if isinstance(node, RegexRepeat):
        return 1 + _size(node.item)
    return 1
