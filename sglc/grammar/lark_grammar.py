"""Lark grammars -> grammar IR, reading lark's own grammar format with lark.

``lark.Lark(text)`` parses the grammar and compiles it to BNF: EBNF operators (``* + ? [] ~``)
become helper rules, templates are expanded, ``%import common.X`` is resolved from lark's own
library, anonymous strings become terminals, and every terminal is one pattern (a string with
flags, or a regex in which the terminals it was built from are already inlined). We take that
result (``Lark.rules``, ``Lark.terminals``, ``Lark.ignore_tokens``) and map it one to one:
a rule's expansions -> a :class:`Choice` of :class:`Seq` of rule references; a terminal -> a
rule of its own (a string -> a :class:`Literal`, or per-character classes under the ``i``
flag; a regex -> the IR of ``regex_grammar``). ``?rule``, ``_rule``, aliases and filtered
tokens only shape lark's parse tree, not the language, so they change nothing here. Direct
left recursion (lark's own ``x*`` helpers, ``expr: expr "+" term | term``) is rewritten into
repetition (left_recursion.py), so top-down engines can run the result.

``%ignore`` is lowered as lark's lexers apply it: ignored terminals may appear any number of
times before the first terminal, between any two terminals and after the last one (never inside
a terminal). A rule ``lark-ignore ::= (I1 | I2 | ...)*`` follows every terminal reference and
precedes the start rule (``lark-root ::= lark-ignore start``). Lark's Earley parser with the
``dynamic_complete`` lexer decides the same language; tests/test_grammar_frontends.py checks it.

Terminals are read as regular languages: every tokenization the grammar allows is accepted
(as Earley with ``dynamic_complete`` does); lark's standard lexers pick one match per position
(longest, by priority), and lazy quantifiers match what greedy ones do. ``\\w \\d \\s`` have
their ASCII meanings (as in every sglc regex). The ``i`` flag folds case with Python's
single-character ``lower``/``upper``; ``s`` lets ``.`` match a newline; ``m`` and ``u`` change
nothing under full matching.

Refused by name (:class:`UnsupportedGrammarError`): ``%declare`` (a terminal with no pattern,
fed by a custom lexer), ``%import`` of anything but lark's ``common`` and ``unicode`` libraries
(a client's grammar must not read server files), the ``x`` and ``l`` regex flags, and regex
constructs no context-free grammar over characters holds (lookaround, backreferences): except
``common.ESCAPED_STRING``, whose lookbehind has a known equivalent without one.

Budgets: text length, group nesting and ``~`` repetition bounds are checked by a scan before
lark sees the text; rules and nodes as built.
"""
from __future__ import annotations

import re

import lark
from lark.exceptions import GrammarError as LarkGrammarError
from lark.exceptions import LarkError, UnexpectedInput

from sglc.fsm.charset import DOT, CharSet
from sglc.fsm.errors import InvalidRegexError, UnsupportedRegexError
from sglc.fsm.regex_ast import Alt, Chars, Concat, Node, Repeat

from .budget import GrammarBudget, GrammarMeter, as_meter, check_text
from .build import Builder
from .errors import GrammarBudgetError, GrammarError, GrammarSyntaxError, UnsupportedGrammarError, caret_excerpt
from .ir import Expr, Grammar
from .left_recursion import remove_direct_left_recursion
from .regex_grammar import expr_from_tree, parse_regex_tree

IGNORE_RULE = "lark-ignore"  # NOTE: '-' cannot occur in a lark name, so these never collide
ROOT_RULE = "lark-root"
ALLOWED_IMPORTS = ("common", "unicode")
# Lark's compiled common.ESCAPED_STRING (a lookbehind) -> the same language without one: a
# quote, then characters other than quote, backslash and newline or a backslash and any
# character but newline, then a quote.
_KNOWN_PATTERNS = {'".*?(?<!\\\\)(\\\\\\\\)*?"': r'"(?:[^"\\\n]|\\.)*"'}
_REPEAT_BOUND = re.compile(r"~\s*(\d+)(?:\s*\.\.\s*(\d+))?")
_DIRECTIVE = re.compile(r"^[ \t]*%(\w+)[ \t]*([\w.]*)", re.MULTILINE)


def _check_directives(text: str) -> None:
    for match in _DIRECTIVE.finditer(text):
        directive, arg = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if directive == "declare":
            raise UnsupportedGrammarError("%declare", f"line {line}", "a declared terminal has no pattern to constrain text with")
        if directive == "import" and arg.split(".")[0] not in ALLOWED_IMPORTS:
            raise UnsupportedGrammarError(f"%import {arg}", f"line {line}",
                                          f"only lark's own {' and '.join(ALLOWED_IMPORTS)} libraries are importable")


def _check_repeats(text: str, meter: GrammarMeter) -> None:
    for match in _REPEAT_BOUND.finditer(text):
        for digits in match.groups():
            if digits is not None:
                limit = meter.budget.max_repeat_bound
                if len(digits) > len(str(limit)) or int(digits) > limit:
                    meter.check("max_repeat_bound", limit + 1, "a '~' repetition bound over")


def _compile(text: str, start: str, meter: GrammarMeter) -> lark.Lark:
    try:
        return lark.Lark(text, parser="earley", lexer="dynamic", start=start)
    except UnexpectedInput as err:
        line, column = err.line, err.column
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GrammarSyntaxError(reason, line, column, caret_excerpt(text, line, column)) from None
    except RecursionError:
        limit = meter.budget.max_nesting_depth
        raise GrammarBudgetError("max_nesting_depth", limit, "lark grammar nested too deeply to compile") from None
    except (LarkGrammarError, LarkError) as err:
        raise GrammarError(f"lark grammar error: {err}") from None
    except Exception as err:  # NOTE: lark compiles terminal regexes: re/regex errors and the like
        raise GrammarError(f"lark grammar error: {type(err).__name__}: {err}") from None


def _fold_case(chars: CharSet) -> CharSet:
    """``chars`` with every character's single-character upper and lower case added; a big
    (negated) set folds its complement instead, as Python's ``[^a]`` under ``re.I`` excludes
    ``A`` too."""
    if chars.size() > 0x8000:
        return _fold_case(chars.negate()).negate()
    extra = []
    for lo, hi in chars.ranges:
        for cp in range(lo, hi + 1):
            for other in (chr(cp).lower(), chr(cp).upper()):
                if len(other) == 1 and other != chr(cp):
                    extra.append((ord(other), ord(other)))
    return chars.union(CharSet.of_ranges(extra)) if extra else chars


def _map_chars(node: Node, fn) -> Node:
    if isinstance(node, Chars):
        return Chars(fn(node.chars))
    if isinstance(node, Concat):
        return Concat(tuple(_map_chars(i, fn) for i in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_map_chars(o, fn) for o in node.options))
    if isinstance(node, Repeat):
        return Repeat(_map_chars(node.item, fn), node.min, node.max)
    return node


def _dotall(pattern: str) -> str:
    """``pattern`` with each ``.`` outside a class written as ``[\\s\\S]`` (the ``s`` flag)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]" or (out and out[-1] in ("[", "[^"))
        elif ch == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif ch == ".":
            ch = r"[\s\S]"
        out.append(ch)
        i += 1
    return "".join(out)


class _Lowering:
    def __init__(self, parser: lark.Lark, meter: GrammarMeter) -> None:
        self.parser = parser
        self.build = Builder(meter)
        self.meter = meter
        self.terminals = {t.name: t for t in parser.terminals}
        self.ignore = list(parser.ignore_tokens)
        self.names: dict[str, str] = {}

    def terminal(self, name: str) -> Expr:
        """The IR of terminal ``name``'s pattern."""
        b = self.build
        term = self.terminals.get(name)
        if term is None:
            raise UnsupportedGrammarError("%declare", f"terminal {name!r}", "a declared terminal has no pattern")
        pattern = term.pattern
        flags = set(pattern.flags)
        for flag in sorted(flags - {"i", "s", "m", "u"}):
            raise UnsupportedGrammarError(f"regex flag {flag!r}", f"terminal {name!r}")
        if pattern.type == "str":
            if "i" not in flags:
                return b.lit(pattern.value)
            return b.seq([self.fold_char(ch) for ch in pattern.value])
        source = _KNOWN_PATTERNS.get(pattern.value, pattern.value)
        if "s" in flags:
            source = _dotall(source)
        try:
            tree = parse_regex_tree(source, self.meter)
        except UnsupportedRegexError as err:
            raise UnsupportedGrammarError(f"regex {err.construct}", f"terminal {name!r}", f"pattern {pattern.value!r}") from None
        except InvalidRegexError as err:
            raise GrammarError(f"terminal {name!r}: {err}") from None
        if "i" in flags:
            tree = _map_chars(tree, _fold_case)
        return expr_from_tree(tree, b)

    def fold_char(self, ch: str) -> Expr:
        chars = _fold_case(CharSet.of_chars(ch))
        single = chars.single()
        return self.build.lit(single) if single is not None else self.build.chars(chars)

    def name(self, lark_name: str) -> str:
        """A rule name for a lark symbol: lark's own where GBNF and xgrammar can read it (anonymous
        terminals of non-ASCII strings are named after the string, e.g. ``É``), else a new one
        with a ``-``, which no lark name holds."""
        if lark_name not in self.names:
            ok = lark_name.isascii() and lark_name.replace("_", "a").isalnum()
            self.names[lark_name] = lark_name if ok else f"lark-symbol-{len(self.names)}"
        return self.names[lark_name]

    def grammar(self, start: str) -> Grammar:
        b = self.build
        expansions: dict[str, list[Expr]] = {}
        used_terminals: list[str] = []
        after = [b.ref(IGNORE_RULE)] if self.ignore else []
        for rule in self.parser.rules:
            items: list[Expr] = []
            for sym in rule.expansion:
                if sym.is_term:
                    if sym.name not in used_terminals:
                        used_terminals.append(sym.name)
                    items += [b.ref(self.name(sym.name)), *after]
                else:
                    items.append(b.ref(self.name(sym.name)))
            expansions.setdefault(self.name(rule.origin.name), []).append(b.seq(items))
            self.meter.check_time("lowering the lark grammar")
        for name, options in expansions.items():
            b.add_rule(name, remove_direct_left_recursion(name, b.choice(options), b))
        for name in used_terminals + [t for t in self.ignore if t not in used_terminals]:
            b.add_rule(self.name(name), self.terminal(name))
        if not self.ignore:
            return b.grammar(self.name(start))
        b.add_rule(IGNORE_RULE, b.repeat(b.choice(b.ref(self.name(t)) for t in self.ignore)))
        b.add_rule(ROOT_RULE, b.seq([b.ref(IGNORE_RULE), b.ref(self.name(start))]))
        return b.grammar(ROOT_RULE)


def parse_lark(text: str, budget: GrammarBudget | GrammarMeter | None = None, *, start: str = "start") -> Grammar:
    """The grammar of lark grammar ``text`` from its rule ``start`` (see the module docstring
    for the lowering and what is refused). Raises GrammarSyntaxError (line, column),
    UnsupportedGrammarError, GrammarError (lark's own complaint, e.g. an undefined rule) or
    GrammarBudgetError."""
    if not isinstance(text, str):
        raise TypeError(f"lark grammar must be a str, not {type(text).__name__}")
    meter = as_meter(budget)
    check_text(text, meter, "lark grammar", quotes={'"': '"', "/": "/"})
    _check_repeats(text, meter)
    _check_directives(text)
    parser = _compile(text, start, meter)
    meter.check_time("compiling the lark grammar")
    return _Lowering(parser, meter).grammar(start)
