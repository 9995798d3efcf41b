"""A regex (the Python syntax subset ``sglc.fsm`` takes) -> a grammar IR expression.

The FSM library's parser (``sglc.fsm.regex_parser``) reads the pattern, so the two paths agree
on syntax, escapes and refusals (lookaround, backreferences, ... raise the same
``UnsupportedRegexError``); its tree maps one to one onto the IR: ``Chars`` -> ``CharClass``
(a run of single characters -> one ``Literal``), ``Concat`` -> ``Seq``, ``Alt`` -> ``Choice``,
``Repeat`` -> ``Repeat``. Lark terminals and JSON Schema ``pattern``/``format`` use it.

The regex parser's own budget (pattern length, group nesting, NFA size) runs with limits taken
from the grammar budget; the NFA size limit is lifted to the IR node limit, since a bounded
repeat stays one IR node (the grammar engine keeps a counter, it does not unroll).
"""
from __future__ import annotations

from sglc.fsm.budget import CompileBudget, CompileMeter
from sglc.fsm.errors import CompileBudgetError
from sglc.fsm.regex_ast import Alt, Anchor, Chars, Concat, Node, Repeat
from sglc.fsm.regex_parser import parse_regex

from .budget import GrammarBudget, GrammarMeter, as_meter
from .build import Builder
from .errors import GrammarBudgetError
from .ir import Expr, Grammar


def regex_meter(meter: GrammarMeter) -> CompileMeter:
    """A regex-parser meter holding the grammar budget's text, nesting and time limits."""
    b = meter.budget
    budget = CompileBudget(max_pattern_chars=b.max_grammar_chars, max_nesting_depth=b.max_nesting_depth,
                           max_nfa_states=10**12, max_compile_seconds=b.max_compile_seconds)
    return budget.start()


def parse_regex_tree(pattern: str, meter: GrammarMeter) -> Node:
    """``pattern`` parsed by the FSM library's parser; its budget errors become grammar budget
    errors naming the GrammarBudget field."""
    meter.check("max_grammar_chars", len(pattern), "regex characters")
    try:
        return parse_regex(pattern, meter=regex_meter(meter))
    except GrammarBudgetError:
        raise
    except CompileBudgetError as err:
        field = {"max_pattern_chars": "max_grammar_chars"}.get(err.limit, err.limit)
        raise GrammarBudgetError(field, getattr(meter.budget, field, err.value), err.measured) from None


def expr_from_tree(node: Node, build: Builder) -> Expr:
    """The IR expression matching what the regex tree ``node`` matches."""
    if isinstance(node, Chars):
        single = node.chars.single()
        return build.lit(single) if single is not None else build.chars(node.chars)
    if isinstance(node, Concat):
        items: list[Expr] = []
        run: list[str] = []  # consecutive single characters become one literal
        for item in node.items:
            single = item.chars.single() if isinstance(item, Chars) else None
            if single is not None:
                run.append(single)
                continue
            if run:
                items.append(build.lit("".join(run)))
                run = []
            items.append(expr_from_tree(item, build))
        if run:
            items.append(build.lit("".join(run)))
        return build.seq(items)
    if isinstance(node, Alt):
        return build.choice(expr_from_tree(o, build) for o in node.options)
    if isinstance(node, Repeat):
        return build.repeat(expr_from_tree(node.item, build), node.min, node.max)
    assert not isinstance(node, Anchor), "anchors are stripped by the parser"
    raise TypeError(f"not a regex node: {node!r}")


def expr_from_regex(pattern: str, build: Builder) -> Expr:
    """``pattern`` (full-match semantics, anchors at its ends allowed) as an IR expression."""
    return expr_from_tree(parse_regex_tree(pattern, build.meter), build)


def grammar_from_regex(pattern: str, budget: GrammarBudget | GrammarMeter | None = None) -> Grammar:
    """A one-rule grammar (``root``) matching exactly the strings ``re.fullmatch(pattern, s)``
    matches (with ``re.ASCII`` meanings of ``\\d \\w \\s``, as the FSM path)."""
    build = Builder(as_meter(budget))
    build.add_rule("root", expr_from_regex(pattern, build))
    return build.grammar("root")
