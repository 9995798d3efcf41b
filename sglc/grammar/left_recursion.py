"""Left recursion: direct left recursion rewritten to repetition (preserving the language);
any other left recursion refused by name (:class:`LeftRecursionError`).

Lark compiles ``x*`` into a left-recursive helper rule (``__r_star_0: x | __r_star_0 x``) and
LALR-style grammars write ``expr: expr "+" term | term``; a top-down engine cannot run either.
The textbook rewrite ``R ::= R a1 | ... | R an | b1 | ... | bm`` ->
``R ::= (b1 | ... | bm) (a1 | ... | an)*`` removes it (an option that is ``R`` alone adds
nothing and is dropped; a rule with no ``b`` matches nothing). Only direct recursion is
rewritten: :func:`remove_direct_left_recursion` for one rule as the lark front end builds it,
:func:`rewrite_direct_left_recursion` for a whole grammar as the engine takes it. Left recursion
through other rules or a nullable prefix is found on the engine's automaton
(:func:`check_left_recursion`) and refused naming the cycle: the matcher's stacks would grow
without consuming input.
"""
from __future__ import annotations

from sglc.fsm.charset import CharSet

from .build import Builder
from .errors import UnsupportedGrammarError
from .ir import CharClass, Choice, Expr, Grammar, Repeat, RuleRef, Seq


class LeftRecursionError(UnsupportedGrammarError):
    """A rule reaches itself without consuming input (left recursion): the engine refuses it.
    ``cycle`` is the rule names along the cycle, first == last."""

    def __init__(self, cycle: list[str]) -> None:
        path = " -> ".join(cycle)
        super().__init__("left recursion", f"rule {cycle[0]!r}",
                         f"{path} calls itself before consuming input; rewrite it with repetition, "
                         f"e.g. a ::= b (\"+\" b)*")
        self._args = (list(cycle),)
        self.cycle = tuple(cycle)


def _split(name: str, option: Expr) -> Expr | None:
    """The rest of ``option`` after a leading ``name`` reference (through leading nested
    sequences), as one flat sequence; None if it does not begin with ``name``."""
    if isinstance(option, RuleRef):
        return Seq(()) if option.name == name else None
    if isinstance(option, Seq) and option.items:
        rest = _split(name, option.items[0])
        if rest is not None:
            return Seq(rest.items + option.items[1:])
    return None


def remove_direct_left_recursion(name: str, expr: Expr, build: Builder) -> Expr:
    """``expr`` (the body of rule ``name``) without options that begin with ``name`` itself."""
    options = expr.options if isinstance(expr, Choice) else (expr,)
    tails, bases = [], []
    for option in options:
        rest = _split(name, option)
        if rest is None:
            bases.append(option)
        elif rest != Seq(()):
            tails.append(build.seq(rest.items))
    if len(bases) == len(options):
        return expr
    if not bases:
        return build.chars(CharSet())  # every derivation needs one more R: no string at all
    base = build.choice(bases)
    if not tails:
        return base
    return build.seq([base, build.repeat(build.choice(tails))])


def rewrite_direct_left_recursion(grammar: Grammar) -> Grammar:
    """``a ::= a x | a y | b | c`` -> ``a ::= (b | c) (x | y)*`` for every such rule (the same
    language); other rules unchanged."""
    rules = dict(grammar.rules)
    for name, expr in grammar.rules.items():
        options = expr.options if isinstance(expr, Choice) else (expr,)
        tails = [_split(name, o) for o in options]
        if all(t is None for t in tails):
            continue
        heads = [o for o, t in zip(options, tails) if t is None]
        loops = [t for t in tails if t is not None]
        # NOTE: with no other option the rule matches nothing (an empty class, trimmed later).
        head: Expr = Choice(tuple(heads)) if heads else CharClass(CharSet())
        rules[name] = Seq((head, Repeat(Choice(tuple(loops)), 0, None)))
    return Grammar(rules, grammar.root)


def check_left_recursion(names, rule_start, ref_offsets, ref_callee, ref_return, nullable) -> None:
    """Raise LeftRecursionError if some rule can call itself before consuming a byte (the
    automaton's references: those of node n are ``ref_offsets[n]:ref_offsets[n + 1]``)."""
    offsets, callee, ret = ref_offsets.tolist(), ref_callee.tolist(), ref_return.tolist()
    corners: list[set[int]] = []
    for r, start in enumerate(rule_start.tolist()):
        seen = {start}
        stack = [start]
        callees: set[int] = set()
        while stack:
            n = stack.pop()
            for c, t in zip(callee[offsets[n]:offsets[n + 1]], ret[offsets[n]:offsets[n + 1]]):
                callees.add(c)
                if nullable[c] and t not in seen:
                    seen.add(t)
                    stack.append(t)
        corners.append(callees)
    # A cycle in the left-corner graph (depth-first, with the path for the message).
    state = [0] * len(names)  # 0 new, 1 on path, 2 done
    for root in range(len(names)):
        if state[root]:
            continue
        path = [root]
        iters = [iter(sorted(corners[root]))]
        state[root] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state[nxt] == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise LeftRecursionError([names[i] for i in cycle])
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(sorted(corners[nxt])))
