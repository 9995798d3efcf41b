"""An independent acceptance oracle for the grammar IR: the IR translated to a lark grammar and
parsed with lark's Earley parser.

Each ``Literal`` becomes a terminal matching exactly its text and each ``CharClass`` a
one-character regex terminal, so the dynamic lexer never has a choice of token lengths to make and lark decides
exactly the context-free language of the IR (tests compare the front ends' grammars with it).
Rule names are renamed ``r0, r1, ...`` (IR names may hold ``-`` or capitals lark reads as
terminals).
"""
from __future__ import annotations

from functools import lru_cache

import lark

from sglc.fsm.charset import CharSet
from sglc.grammar import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq
from sglc.grammar.ir import walk


def _regex_char(cp: int) -> str:
    ch = chr(cp)
    if ch in "\\]-^[/":
        return "\\" + ch if ch != "/" else "\\/"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _class_terminal(chars: CharSet) -> str:
    if not chars.ranges:
        return r"/[^\s\S]/"
    body = "".join(_regex_char(lo) if lo == hi else f"{_regex_char(lo)}-{_regex_char(hi)}" for lo, hi in chars.ranges)
    return f"/[{body}]/"


def _string_terminal(text: str) -> str:
    # NOTE: a regex terminal, not a "string": lark turns a string literal's "\\\\" into one
    # backslash after unescaping, so a literal holding two backslashes would change.
    out = []
    for ch in text:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        elif ch == "\\":
            out.append("\\\\")
        elif ch in ".^$*+?{}[]|()/-\"' ":
            out.append("\\" + ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "/" + "".join(out) + "/"


class _Printer:
    # NOTE: every choice and repeat gets a helper rule, so each lark rule is a flat list of
    # symbols: lark distributes groups inside an expansion into the cross product of their
    # options (exponential in a long sequence of choices) and expands `x ~ m..n` into every count.
    def __init__(self, grammar: Grammar) -> None:
        self.names = {name: f"r{i}" for i, name in enumerate(grammar.rules)}
        self.extra: list[str] = []

    def helper(self, body: str) -> str:
        name = f"_h{len(self.extra)}"
        self.extra.append(f"{name}: {body}")
        return name

    def expr(self, e: Expr) -> str:
        if isinstance(e, Literal):
            return _string_terminal(e.text) if e.text else ""
        if isinstance(e, CharClass):
            return _class_terminal(e.chars)
        if isinstance(e, RuleRef):
            return self.names[e.name]
        if isinstance(e, Seq):
            return " ".join(self.expr(i) for i in e.items)
        if isinstance(e, Choice):
            return self.helper(" | ".join(self.expr(o) for o in e.options))
        if isinstance(e, Repeat):
            inner = self.helper(self.expr(e.item))
            head = " ".join([inner] * e.min)
            if e.max is None:
                star = f"_h{len(self.extra)}"
                self.extra.append(f"{star}: | {star} {inner}")
                return f"{head} {star}"
            tail = ""
            for _ in range(e.max - e.min):  # k optional copies as x [x [x]]: linear in k
                tail = self.helper(f"| {inner} {tail}")
            return f"{head} {tail}"
        raise TypeError(e)

    def grammar(self, grammar: Grammar) -> str:
        lines = [f"start: {self.names[grammar.root]}"]
        lines += [f"{self.names[n]}: {self.expr(e)}" for n, e in grammar.rules.items()]
        return "\n".join(lines + self.extra) + "\n"


def lark_text_for(grammar: Grammar) -> str:
    """The lark grammar text deciding the same language as ``grammar``."""
    return _Printer(grammar).grammar(grammar)


class Oracle:
    """``accepts(text)``: does lark's Earley parser accept ``text`` under the grammar?"""

    def __init__(self, parser: lark.Lark) -> None:
        self.parser = parser

    def accepts(self, text: str) -> bool:
        try:
            self.parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True


def lark_parser_for(grammar: Grammar) -> Oracle:
    return _cached(lark_text_for(grammar))


@lru_cache(maxsize=64)
def _cached(text: str) -> Oracle:
    return Oracle(lark.Lark(text, parser="earley", lexer="dynamic", maybe_placeholders=False))


def sample(grammar: Grammar, rng, max_depth: int = 12) -> str | None:
    """A random string of the grammar's language (a random derivation; past ``max_depth`` rule
    expansions it takes the shortest-looking option), or None when the derivation runs away."""
    out: list[str] = []
    budget = [2000]

    def go(e: Expr, depth: int) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise RecursionError
        if isinstance(e, Literal):
            out.append(e.text)
        elif isinstance(e, CharClass):
            lo, hi = e.chars.ranges[rng.randrange(len(e.chars.ranges))]
            if hi - lo > 200 and rng.random() < 0.8:  # mostly ASCII-ish, some far code points
                hi = min(hi, lo + 95)
            out.append(chr(rng.randint(lo, hi)))
        elif isinstance(e, RuleRef):
            go(grammar.rules[e.name], depth + 1)
        elif isinstance(e, Seq):
            for item in e.items:
                go(item, depth)
        elif isinstance(e, Choice):
            options = e.options if depth < max_depth else sorted(e.options, key=_weight)[:1]
            go(options[rng.randrange(len(options))], depth)
        elif isinstance(e, Repeat):
            hi = e.max if e.max is not None else e.min + 3
            n = e.min if depth >= max_depth else rng.randint(e.min, min(hi, e.min + 3))
            for _ in range(n):
                go(e.item, depth)

    try:
        go(grammar.rules[grammar.root], 0)
    except RecursionError:
        return None
    return "".join(out)


def _weight(e: Expr) -> int:
    """Prefer options without rule references (they end a derivation sooner)."""
    return sum(1 for n in walk(e) if isinstance(n, RuleRef))


def mutate(text: str, rng, alphabet: str) -> str:
    """``text`` with one random deletion, insertion or substitution."""
    if not text:
        return rng.choice(alphabet)
    i = rng.randrange(len(text))
    op = rng.randrange(3)
    if op == 0:
        return text[:i] + text[i + 1:]
    if op == 1:
        return text[:i] + rng.choice(alphabet) + text[i:]
    return text[:i] + rng.choice(alphabet) + text[i + 1:]
