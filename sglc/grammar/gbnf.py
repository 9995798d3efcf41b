"""GBNF (llama.cpp) and the EBNF dialect SGLang/xgrammar take -> grammar IR.

One hand-written recursive-descent parser reads the union of the two dialects::

    root    ::= "{" ws pair ("," ws pair)* "}"    # a comment
    pair    ::= key ":" ws [0-9]+
    key     ::= "\\"" [a-z_\\-]{1,16} "\\""
    ws      ::= [ \\t\\n]*

- a rule is ``name ::= alternatives``; names are letters, digits, ``-`` and ``_``; the start
  rule is ``root`` unless ``root=`` says otherwise;
- a rule continues over any number of lines until the next ``name ::=`` (a superset of
  llama.cpp, whose rules span lines only inside parentheses or after ``::=``);
- ``"literal"`` and classes ``[a-z]``, ``[^...]`` with the escapes ``\\n \\t \\r \\\\ \\" \\'
  \\[ \\] \\- \\f \\v \\a \\b \\0 \\xHH \\uHHHH \\UHHHHHHHH``; ``.`` is any character
  (newline included, as llama.cpp's any-char); ``(...)`` groups; ``|``; ``* + ?``; ``{m}``,
  ``{m,}``, ``{m,n}``; ``#`` comments to the end of the line.

Refused by name (:class:`UnsupportedGrammarError`): llama.cpp token references ``<[123]>`` /
``<|tok|>`` / ``!<...>`` (they name token ids of one vocabulary) and xgrammar's lookahead
assertions ``rule (= ...) ::=``. Syntax errors raise :class:`GrammarSyntaxError` with line,
column and a caret excerpt; a rule used but never defined is one, at its first use.

Budgets (:class:`~sglc.grammar.budget.GrammarBudget`): text length, then group nesting by a
linear scan, before parsing; repetition bounds as they are read; rules and nodes as they are
built. The result is in the builder's normal form, so ``parse_gbnf(g.to_ebnf()) == g``.
"""
from __future__ import annotations

from sglc.fsm.charset import ANY, MAX_CODE_POINT, SURROGATES, CharSet

from .budget import GrammarBudget, GrammarMeter, as_meter, check_text
from .build import Builder
from .errors import GrammarError, GrammarSyntaxError, UnsupportedGrammarError, caret_excerpt
from .ir import Expr, Grammar

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_SIMPLE_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "b": "\b", "0": "\0",
    "\\": "\\", '"': '"', "'": "'", "[": "[", "]": "]", "-": "-", "^": "^", "/": "/",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class _Parser:
    def __init__(self, text: str, meter: GrammarMeter) -> None:
        self.text = text
        self.pos = 0
        self.build = Builder(meter)
        self.meter = meter
        self.first_use: dict[str, int] = {}  # rule name -> position of its first reference
        self.defined_at: dict[str, int] = {}

    # -- errors and low-level scanning -----------------------------------------------------
    def error(self, message: str, pos: int | None = None) -> GrammarSyntaxError:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return GrammarSyntaxError(message, line, column, caret_excerpt(self.text, line, column))

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def skip_space(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            ch = text[self.pos]
            if ch in " \t\r\n":
                self.pos += 1
            elif ch == "#":
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            else:
                return

    def name_end(self, start: int) -> int:
        end = start
        while end < len(self.text) and self.text[end] in _NAME_CHARS:
            end += 1
        return end

    def starts_rule(self) -> bool:
        """Is the parser at ``name ::=`` (which ends the rule being read)?"""
        end = self.name_end(self.pos)
        if end == self.pos:
            return False
        save = self.pos
        self.pos = end
        self.skip_space()
        found = self.text.startswith("::=", self.pos) or self.text.startswith("(=", self.pos)
        self.pos = save
        return found

    # -- grammar -----------------------------------------------------------------------------
    def grammar(self, root: str) -> Grammar:
        self.skip_space()
        if self.pos >= len(self.text):
            raise self.error("the grammar is empty: expected a rule 'name ::= ...'")
        while self.pos < len(self.text):
            self.rule()
            self.meter.check_time("parsing the grammar")
        for name, pos in self.first_use.items():
            if name not in self.build.rules:
                raise self.error(f"undefined rule {name!r}", pos)
        if root not in self.build.rules:
            raise GrammarError(f"the grammar has no root rule {root!r} (define '{root} ::= ...')")
        return self.build.grammar(root)

    def rule(self) -> None:
        start = self.pos
        end = self.name_end(start)
        if end == start:
            raise self.error("expected a rule name")
        name = self.text[start:end]
        self.pos = end
        self.skip_space()
        if self.text.startswith("(=", self.pos):
            raise UnsupportedGrammarError("lookahead assertion '(= ...)'", f"rule {name!r}")
        if not self.text.startswith("::=", self.pos):
            raise self.error(f"expected '::=' after rule name {name!r}")
        if name in self.defined_at:
            raise self.error(f"rule {name!r} is defined twice", start)
        self.defined_at[name] = start
        self.pos += 3
        self.skip_space()
        self.build.add_rule(name, self.alternatives(nested=False))
        if self.peek() == ")":
            raise self.error("unexpected ')' (no '(' is open)")

    def alternatives(self, nested: bool) -> Expr:
        options = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space()
            options.append(self.sequence(nested))
        return self.build.choice(options)

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while True:
            ch = self.peek()
            if ch == "" or ch in "|)":
                break
            if ch in _NAME_CHARS and self.starts_rule():
                if nested:
                    raise self.error("expected ')' before the next rule")
                break
            if ch in "*+?{":
                if not items:
                    raise self.error(f"{ch!r} repeats nothing")
                items[-1] = self.quantified(items[-1])
                continue
            items.append(self.element())
        return self.build.seq(items)

    def element(self) -> Expr:
        ch = self.peek()
        start = self.pos
        if ch == '"':
            expr = self.literal()
        elif ch == "[":
            expr = self.char_class()
        elif ch == ".":
            self.pos += 1
            expr = self.build.chars(ANY)
        elif ch == "(":
            self.pos += 1
            self.skip_space()
            expr = self.alternatives(nested=True)
            if self.peek() != ")":
                raise self.error("expected ')'" if self.peek() else "unclosed '(' at the end of the grammar")
            self.pos += 1
        elif ch in _NAME_CHARS:
            end = self.name_end(start)
            name = self.text[start:end]
            self.first_use.setdefault(name, start)
            self.pos = end
            expr = self.build.ref(name)
        elif ch in "<!":
            raise UnsupportedGrammarError("token reference (<...>)", f"line {self.error('', start).line}",
                                          "grammars over characters cannot name token ids")
        elif ch == "'":
            raise self.error("strings are written in double quotes")
        else:
            raise self.error(f"unexpected character {ch!r}")
        self.skip_space()
        return expr

    def quantified(self, item: Expr) -> Expr:
        ch = self.peek()
        self.pos += 1
        if ch == "*":
            lo, hi = 0, None
        elif ch == "+":
            lo, hi = 1, None
        elif ch == "?":
            lo, hi = 0, 1
        else:
            lo, hi = self.braces()
        self.skip_space()
        return self.build.repeat(item, lo, hi)

    def braces(self) -> tuple[int, int | None]:
        self.skip_space()
        lo = self.integer()
        self.skip_space()
        if self.peek() == "}":
            self.pos += 1
            return lo, lo
        if self.peek() != ",":
            raise self.error("expected ',' or '}' in a repetition")
        self.pos += 1
        self.skip_space()
        hi = None
        if self.peek().isdigit():
            at = self.pos
            hi = self.integer()
            if hi < lo:
                raise self.error(f"repetition {{{lo},{hi}}} has max < min", at)
            self.skip_space()
        if self.peek() != "}":
            raise self.error("expected '}' to close a repetition")
        self.pos += 1
        return lo, hi

    def integer(self) -> int:
        start = self.pos
        while self.peek() and self.peek() in "0123456789":
            self.pos += 1
        if start == self.pos:
            raise self.error("expected an integer")
        digits = self.text[start:self.pos]
        limit = self.meter.budget.max_repeat_bound
        if len(digits) > len(str(limit)) or int(digits) > limit:  # NOTE: no int() of 10^5 digits
            self.meter.check("max_repeat_bound", limit + 1, "a repetition bound over")
        return int(digits)

    # -- literals and classes ------------------------------------------------------------
    def literal(self) -> Expr:
        start = self.pos
        self.pos += 1  # the opening quote
        out = []
        while True:
            ch = self.peek()
            if ch == "":
                raise self.error("unterminated string literal", start)
            if ch == '"':
                self.pos += 1
                return self.build.lit("".join(out))
            if ch in "\r\n":
                raise self.error("newline inside a string literal (write \\n)")
            out.append(self.char())

    def char(self) -> str:
        """One (possibly escaped) character of a literal or class."""
        ch = self.peek()
        if ch != "\\":
            self.pos += 1
            return ch
        start = self.pos
        kind = self.peek(1)
        if kind in _SIMPLE_ESCAPES:
            self.pos += 2
            return _SIMPLE_ESCAPES[kind]
        if kind in _HEX_ESCAPES:
            width = _HEX_ESCAPES[kind]
            digits = self.text[self.pos + 2:self.pos + 2 + width]
            if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(f"expected {width} hex digits after \\{kind}", start)
            cp = int(digits, 16)
            if cp > MAX_CODE_POINT or SURROGATES[0] <= cp <= SURROGATES[1]:
                raise self.error(f"\\{kind}{digits} is not a Unicode scalar value", start)
            self.pos += 2 + width
            return chr(cp)
        raise self.error(f"unknown escape \\{kind}" if kind else "a backslash ends the grammar", start)

    def char_class(self) -> Expr:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if self.peek() == "":
                raise self.error("unterminated character class", start)
            lo = ord(self.char())
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                at = self.pos
                hi = ord(self.char())
                if hi < lo:
                    raise self.error(f"class range {chr(lo)!r}-{chr(hi)!r} is out of order", at)
            ranges.append((lo, hi))
        self.pos += 1
        chars = CharSet.of_ranges(ranges)
        return self.build.chars(chars.negate() if negated else chars)


def parse_gbnf(text: str, budget: GrammarBudget | GrammarMeter | None = None, *, root: str = "root") -> Grammar:
    """Parse GBNF / xgrammar EBNF ``text`` into a verified :class:`Grammar` whose start rule is
    ``root``. Raises GrammarSyntaxError (line, column), UnsupportedGrammarError, GrammarError
    (no root rule) or GrammarBudgetError (see the module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"grammar text must be a str, not {type(text).__name__}")
    meter = as_meter(budget)
    check_text(text, meter, "grammar text", quotes={'"': '"', "[": "]"}, comment="#")
    return _Parser(text, meter).grammar(root)


#: SGLang's ``ebnf`` sampling field and xgrammar's ``Grammar.from_ebnf`` take the same dialect.
parse_ebnf = parse_gbnf
