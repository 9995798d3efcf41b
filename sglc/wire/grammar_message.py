"""A grammar (sglc.grammar.Grammar, the IR every grammar syntax parses into) <-> the typed
``sglc.grammar.Grammar`` message of proto/grammar.proto, for graph.pb (a gen's lowered ``grammar``).

The message is a table of expressions, children before parents (proto/grammar.proto says why), so
both directions are loops, never recursion, and equal sub-expressions are written once.

Decoding is where untrusted sizes arrive. Before a single expression is built, the table is
checked whole: every index points to an earlier entry, every repeat bound and the table's sizes
are within the :class:`~sglc.grammar.budget.GrammarBudget`, and so are the node count and the depth
of the expression trees the table expands to (a table of 60 entries can describe 2**60 tree nodes
by sharing, and ``Grammar.size()``, ``verify()`` and the engine walk trees). Then the grammar is
built and ``Grammar.verify()`` runs. A malformed message is a :class:`GrammarFormatError` naming
the entry; a budget overrun a :class:`~sglc.grammar.errors.GrammarBudgetError` naming the limit.
"""
from __future__ import annotations

from typing import Optional

from sglc.fsm.charset import MAX_CODE_POINT, CharSet
from sglc.grammar.budget import DEFAULT_GRAMMAR_BUDGET, GrammarBudget
from sglc.grammar.errors import GrammarBudgetError, GrammarError
from sglc.grammar.ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq
from sglc.wire.proto import grammar_pb2

#: Deepest expression tree a message may expand to: printing (``Grammar.to_ebnf``), comparing
#: and compiling a grammar recurse once per level, and Python counts a comparison's C recursion
#: against its limit of 1000 too (about four counts a level for ``==``). Grammars people write
#: nest a few levels deep.
MAX_EXPR_DEPTH = 128

__all__ = ["GrammarFormatError", "MAX_EXPR_DEPTH", "grammar_from_pb", "grammar_to_pb", "is_grammar"]


class GrammarFormatError(GrammarError):
    """A grammar message that is not a well-formed grammar (an index out of order, a class that
    is not a normal-form set, a rule defined twice, ...); the message names the entry."""

    def __init__(self, message: str) -> None:
        self._args = (message,)  # NOTE: FSMError's subclasses pickle with their arguments
        super().__init__(f"malformed grammar message: {message}")


def is_grammar(value: object) -> bool:
    """Whether ``value`` is a grammar IR object (what a gen's lowered ``grammar`` attribute holds)."""
    return isinstance(value, Grammar)


# ----- Grammar -> message -----
def grammar_to_pb(grammar: Grammar) -> grammar_pb2.Grammar:
    """The message of ``grammar``. GrammarFormatError for a non-IR object in a rule, GrammarError
    for a tree deeper than MAX_EXPR_DEPTH."""
    if not isinstance(grammar, Grammar):
        raise GrammarFormatError(f"expected a sglc.grammar.Grammar, got {type(grammar).__name__}")
    msg = grammar_pb2.Grammar(root=grammar.root)
    table = _Table(msg)
    for name, expr in grammar.rules.items():
        if not isinstance(name, str):
            raise GrammarFormatError(f"rule name {name!r} is not a str")
        msg.rules.add(name=name, expr=table.add(expr, name))
    return msg


class _Table:
    """Writes expressions into ``msg.exprs`` in post-order, each distinct one once."""

    def __init__(self, msg: grammar_pb2.Grammar) -> None:
        self.msg = msg
        self.by_key: dict[tuple, int] = {}  # (kind, payload with child indices) -> index
        self.by_id: dict[int, int] = {}  # id(expr) -> index: a shared object is walked once
        self.depth: list[int] = []

    def add(self, root: Expr, rule: str) -> int:
        # NOTE: an explicit stack: a deep expression must not meet Python's recursion limit here
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            expr, children_done = stack.pop()
            if id(expr) in self.by_id:
                continue
            kids = _children(expr, rule)
            if not children_done and any(id(k) not in self.by_id for k in kids):
                stack.append((expr, True))
                stack.extend((k, False) for k in reversed(kids) if id(k) not in self.by_id)
                continue
            self.by_id[id(expr)] = self._write(expr, [self.by_id[id(k)] for k in kids], rule)
        return self.by_id[id(root)]

    def _write(self, expr: Expr, kids: list[int], rule: str) -> int:
        if isinstance(expr, Literal):
            key: tuple = ("literal", expr.text)
        elif isinstance(expr, CharClass):
            key = ("char_class", expr.chars.ranges)
        elif isinstance(expr, RuleRef):
            key = ("rule_ref", expr.name)
        elif isinstance(expr, Repeat):
            key = ("repeat", kids[0], expr.min, expr.max)
        else:
            key = (type(expr).__name__, tuple(kids))
        index = self.by_key.get(key)
        if index is not None:
            return index
        depth = 1 + max((self.depth[k] for k in kids), default=0)
        if depth > MAX_EXPR_DEPTH:
            raise GrammarError(f"grammar rule {rule!r} nests expressions more than {MAX_EXPR_DEPTH} deep, "
                               "deeper than a grammar message holds")
        out = self.msg.exprs.add()
        if isinstance(expr, Literal):
            out.literal = expr.text
        elif isinstance(expr, CharClass):
            out.char_class.SetInParent()
            out.char_class.ranges.extend(grammar_pb2.CharRange(first=lo, last=hi) for lo, hi in expr.chars.ranges)
        elif isinstance(expr, RuleRef):
            out.rule_ref = expr.name
        elif isinstance(expr, Repeat):
            out.repeat.item = kids[0]
            out.repeat.min = expr.min
            if expr.max is not None:
                out.repeat.max = expr.max
        elif isinstance(expr, Seq):
            out.seq.SetInParent()
            out.seq.items.extend(kids)
        else:
            out.choice.SetInParent()
            out.choice.items.extend(kids)
        index = len(self.msg.exprs) - 1
        self.by_key[key] = index
        self.depth.append(depth)
        return index


def _children(expr: Expr, rule: str) -> tuple[Expr, ...]:
    if isinstance(expr, (Literal, CharClass, RuleRef)):
        return ()
    if isinstance(expr, Seq):
        return expr.items
    if isinstance(expr, Choice):
        return expr.options
    if isinstance(expr, Repeat):
        return (expr.item,)
    raise GrammarFormatError(f"rule {rule!r} holds {type(expr).__name__}, which is not a grammar expression")


# ----- message -> Grammar -----
def grammar_from_pb(msg: grammar_pb2.Grammar, budget: Optional[GrammarBudget] = None) -> Grammar:
    """The verified Grammar of a message, its sizes held to ``budget`` (the default grammar budget
    when None) before anything is built. GrammarFormatError / GrammarBudgetError / GrammarError
    (all ValueErrors)."""
    budget = DEFAULT_GRAMMAR_BUDGET if budget is None else budget
    exprs, rules = msg.exprs, msg.rules
    _limit("max_expr_nodes", budget.max_expr_nodes, len(exprs), "expression table entries")
    _limit("max_rules", budget.max_rules, len(rules), "rules")
    sizes, chars = _check_table(exprs, budget)
    names: set[str] = set()
    total = 0
    for i, rule in enumerate(rules):
        if not rule.name:
            raise GrammarFormatError(f"rule {i} has no name")
        if rule.name in names:
            raise GrammarFormatError(f"rule {rule.name!r} is defined twice")
        names.add(rule.name)
        chars += len(rule.name)
        if rule.expr >= len(exprs):
            raise GrammarFormatError(f"rule {rule.name!r} names expression {rule.expr}, past the table's "
                                     f"{len(exprs)} entries")
        total += sizes[rule.expr]
    _limit("max_expr_nodes", budget.max_expr_nodes, total, "expression nodes (the rules' trees)")
    _limit("max_grammar_chars", budget.max_grammar_chars, chars, "characters of literals and names")
    if not msg.root:
        raise GrammarFormatError("the grammar names no root rule")
    built = _build(exprs)
    try:
        return Grammar({rule.name: built[rule.expr] for rule in rules}, msg.root).verify()
    except GrammarError as err:
        raise GrammarFormatError(str(err)) from None


def _limit(name: str, allowed: int, measured: int, what: str) -> None:
    if measured > allowed:
        raise GrammarBudgetError(name, allowed, f"{what} {measured:,}")


def _check_table(exprs, budget: GrammarBudget) -> tuple[list[int], int]:
    """Per entry, the size of the tree it expands to (after checking indices, bounds, classes and
    depth); and the characters the table holds. Nothing is built."""
    sizes: list[int] = []
    depths: list[int] = []
    chars = 0
    cap = budget.max_expr_nodes + 1  # NOTE: sizes saturate here, so sharing cannot build huge ints
    for i, e in enumerate(exprs):
        kind = e.WhichOneof("kind")
        kids: list[int] = []
        if kind in ("literal", "rule_ref"):
            text = getattr(e, kind)
            if kind == "rule_ref" and not text:
                raise GrammarFormatError(f"expression {i} refers to a rule with no name")
            chars += len(text)
        elif kind == "char_class":
            chars += _check_class(e.char_class, i)
        elif kind in ("seq", "choice"):
            kids = list(getattr(e, kind).items)
            if kind == "choice" and not kids:
                raise GrammarFormatError(f"expression {i} is a choice of no options")
        elif kind == "repeat":
            r = e.repeat
            kids = [r.item]
            top = r.max if r.HasField("max") else r.min
            _limit("max_repeat_bound", budget.max_repeat_bound, top, f"expression {i}: a repetition bound of")
            if r.HasField("max") and r.max < r.min:
                raise GrammarFormatError(f"expression {i} repeats {{{r.min},{r.max}}}: max is below min")
        else:
            raise GrammarFormatError(f"expression {i} has no kind (written by a newer sglc?)")
        for k in kids:
            if k >= i:
                raise GrammarFormatError(f"expression {i} refers to entry {k}, which is not before it")
        chars += len(kids)  # NOTE: each child costs text too; bounds the children lists' total
        depth = 1 + max((depths[k] for k in kids), default=0)
        if depth > MAX_EXPR_DEPTH:
            raise GrammarFormatError(f"expression {i} nests more than {MAX_EXPR_DEPTH} deep")
        depths.append(depth)
        sizes.append(min(cap, 1 + sum(sizes[k] for k in kids)))
    _limit("max_grammar_chars", budget.max_grammar_chars, chars, "characters of literals and names")
    return sizes, chars


def _check_class(cls: grammar_pb2.CharClass, i: int) -> int:
    ranges = [(r.first, r.last) for r in cls.ranges]
    for lo, hi in ranges:
        if not lo <= hi <= MAX_CODE_POINT:
            raise GrammarFormatError(f"expression {i}: class range {lo}-{hi} is not 0 <= first <= last <= "
                                     f"{MAX_CODE_POINT}")
    if CharSet.of_ranges(ranges).ranges != tuple(ranges):
        raise GrammarFormatError(f"expression {i}: class ranges are not sorted, disjoint, non-adjacent and free "
                                 "of surrogates")
    return 2 * len(ranges)


def _build(exprs) -> list[Expr]:
    """The expressions of a checked table, each built once (shared where the table shares)."""
    built: list[Expr] = []
    for e in exprs:
        kind = e.WhichOneof("kind")
        if kind == "literal":
            built.append(Literal(e.literal))
        elif kind == "rule_ref":
            built.append(RuleRef(e.rule_ref))
        elif kind == "char_class":
            built.append(CharClass(CharSet(tuple((r.first, r.last) for r in e.char_class.ranges))))
        elif kind == "seq":
            built.append(Seq(tuple(built[k] for k in e.seq.items)))
        elif kind == "choice":
            built.append(Choice(tuple(built[k] for k in e.choice.items)))
        else:
            r = e.repeat
            built.append(Repeat(built[r.item], r.min, r.max if r.HasField("max") else None))
    return built
