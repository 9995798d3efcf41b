"""Regex source -> syntax tree (``regex_ast``), parsed with a lark LALR grammar.

Supported (Python ``re`` syntax and ``re.fullmatch`` semantics, with ``re.ASCII`` meanings of
``\\d \\w \\s``): literals; escapes (``\\n \\t \\r \\f \\v \\a \\0 \\ooo \\xhh \\uhhhh
\\Uhhhhhhhh \\N{NAME}`` and any escaped punctuation); classes with ranges and negation;
``\\d \\w \\s \\D \\W \\S``; ``.`` (anything but newline); groups ``(...)``, ``(?:...)``,
``(?P<name>...)``; comments ``(?#...)``; alternation; ``? * + {m} {m,} {,n} {m,n}`` and their
lazy forms (same language); ``^``/``\\A`` at the start and ``$``/``\\Z`` at the end (no-ops
under full matching).

Rejected with :class:`UnsupportedRegexError`: backreferences, lookaround, atomic groups,
possessive quantifiers, conditionals, inline flags, word boundaries, anchors elsewhere and
surrogate code points. Syntax errors raise :class:`InvalidRegexError` with the position.

Budgets (:class:`~sglc.fsm.budget.CompileBudget`, :class:`CompileBudgetError`): the pattern's
length and group nesting are checked by a linear scan BEFORE lark parses it (the parse tree
transformer recurses once per group level, so 5,000 nested groups would end in RecursionError),
and the NFA's state count is computed on the tree before anything is expanded (``a{1000}``
is one node until the NFA is built).
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from lark import Lark, Token, v_args
from lark.visitors import Transformer_NonRecursive
from lark.exceptions import UnexpectedInput, VisitError

from . import charset as cs
from .charset import CharSet
from .budget import CompileMeter, as_meter
from .errors import CompileBudgetError, InvalidRegexError, UnsupportedRegexError
from .nfa import nfa_num_states
from .regex_ast import EMPTY, Alt, Anchor, Chars, Concat, Node, Repeat
from .regex_syntax_errors import BRACE_QUANTIFIER, follows_quantifier, syntax_error

# One escape body, shared by the terminals below (class escapes read digits as octal).
_ESC = r"u[0-9a-fA-F]{0,4}|U[0-9a-fA-F]{0,8}|x[0-9a-fA-F]{0,2}|N\{[^}]*\}|N"
_ESC_OUT = rf"\\(?:{_ESC}|[0-7]{{3}}|0[0-7]{{0,2}}|[1-9][0-9]?|.)"
_ESC_IN = rf"\\(?:{_ESC}|[0-7]{{1,3}}|.)"

GRAMMAR = rf"""
start: alt
alt: concat ("|" concat)*
concat: piece*
piece: atom QUANT?
     | COMMENT -> comment
atom: LITERAL                 -> literal
    | LBRACE                  -> lbrace
    | ESCAPE                  -> escape
    | DOT                     -> dot
    | CARET                   -> caret
    | DOLLAR                  -> dollar
    | LPAR alt ")"            -> group
    | NONCAP alt ")"          -> group
    | NAMED alt ")"           -> named_group
    | GROUP_EXT               -> group_ext
    | CLASS_OPEN class_first class_item* "]" -> char_class
class_first: FIRST_RANGE | FIRST_ATOM
class_item: CLASS_RANGE | CLASS_ATOM

QUANT.3: /(?:[*+?]|\{{(?:[0-9]+(?:,[0-9]*)?|,[0-9]*)\}})\??/
LITERAL: /[^\\()\[|*+?.^${{]/
LBRACE: "{{"
ESCAPE.2: /{_ESC_OUT}/s
DOT: "."
CARET: "^"
DOLLAR: "$"
LPAR.1: "("
NONCAP.4: "(?:"
NAMED.4: /\(\?P<[^>)]*>/
COMMENT.4: /\(\?#[^)]*\)/
GROUP_EXT.3: /\(\?(?:<[=!]|P=|[=!>#(]|[-aiLmsux]+[:)]?)?/
CLASS_OPEN: /\[\^?/
FIRST_RANGE.3: /(?:{_ESC_IN}|[^\\])-(?:{_ESC_IN}|[^\\\]])/s
FIRST_ATOM.2: /{_ESC_IN}|[^\\]/s
CLASS_RANGE.3: /(?:{_ESC_IN}|[^\\\]])-(?:{_ESC_IN}|[^\\\]])/s
CLASS_ATOM.2: /{_ESC_IN}|[^\\\]]/s
"""

_CONTROL = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_CLASS_SHORTHAND = {
    "d": cs.DIGIT, "D": cs.DIGIT.negate(), "w": cs.WORD, "W": cs.WORD.negate(),
    "s": cs.SPACE, "S": cs.SPACE.negate(),
}

class _GroupExtension(Exception):
    """Raised from the lexer on ``(?`` extensions, before the parser can misreport them."""

    def __init__(self, token: Token) -> None:
        super().__init__(str(token))
        self.token = token


def _on_group_ext(token: Token) -> Token:
    raise _GroupExtension(token)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(
        GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=False,
        lexer_callbacks={"GROUP_EXT": _on_group_ext},
    )


class _ToTree(Transformer_NonRecursive):
    """Lark parse tree -> ``regex_ast`` nodes; semantic errors carry the token position.
    NOTE: the non-recursive transformer: the recursive one spends ~8 frames per group level."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self.pattern = pattern
        self.group_names: set[str] = set()

    # -- errors ------------------------------------------------------------------------
    def _invalid(self, msg: str, pos: int) -> InvalidRegexError:
        return InvalidRegexError(msg, self.pattern, pos)

    def _unsupported(self, what: str, pos: int) -> UnsupportedRegexError:
        return UnsupportedRegexError(what, self.pattern, pos)

    # -- structure ---------------------------------------------------------------------
    def start(self, children: list) -> Node:
        return children[0]

    def alt(self, children: list) -> Node:
        return children[0] if len(children) == 1 else Alt(tuple(children))

    def concat(self, children: list) -> Node:
        items = [c for c in children if c is not None]
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def comment(self, children: list) -> None:
        return None

    def piece(self, children: list) -> Node:
        atom = children[0]
        if len(children) == 1:
            return atom
        quant: Token = children[1]
        if isinstance(atom, Anchor):
            raise self._invalid("nothing to repeat", quant.start_pos)
        lo, hi = self._quant_bounds(quant)
        return Repeat(atom, lo, hi)

    def _quant_bounds(self, quant: Token) -> tuple[int, int | None]:
        text = str(quant)
        if len(text) > 1 and text.endswith("?"):
            text = text[:-1]  # lazy: same language as the greedy form
        if text == "*":
            return 0, None
        if text == "+":
            return 1, None
        if text == "?":
            return 0, 1
        body = text[1:-1]
        if "," not in body:
            lo = hi = int(body)
        else:
            a, b = body.split(",")
            lo = int(a) if a else 0
            hi = int(b) if b else None
        if hi is not None and lo > hi:
            raise self._invalid("min repeat greater than max repeat", quant.start_pos + 1)
        return lo, hi

    # -- atoms -------------------------------------------------------------------------
    def literal(self, children: list) -> Node:
        tok: Token = children[0]
        return Chars(self._char_set(str(tok), tok.start_pos))

    def lbrace(self, children: list) -> Node:
        tok: Token = children[0]
        if BRACE_QUANTIFIER.match(self.pattern, tok.start_pos):
            after = follows_quantifier(self.pattern, tok.start_pos)
            raise self._invalid("multiple repeat" if after else "nothing to repeat", tok.start_pos)
        return Chars(CharSet.of_chars("{"))

    def dot(self, children: list) -> Node:
        return Chars(cs.DOT)

    def caret(self, children: list) -> Node:
        return Anchor("start", children[0].start_pos)

    def dollar(self, children: list) -> Node:
        return Anchor("end", children[0].start_pos)

    def escape(self, children: list) -> Node:
        tok: Token = children[0]
        body = str(tok)[1:]
        pos = tok.start_pos
        head = body[0]
        if head in "AZ" and len(body) == 1:
            return Anchor("start" if head == "A" else "end", pos)
        if head in "bB" and len(body) == 1:
            raise self._unsupported(f"word boundary \\{head}", pos)
        if head.isdigit() and not (head == "0" or len(body) == 3):
            raise self._unsupported(f"backreference \\{body}", pos)
        return Chars(self._escape_set(body, pos, in_class=False))

    def group(self, children: list) -> Node:
        return children[1]

    def named_group(self, children: list) -> Node:
        tok: Token = children[0]
        name = str(tok)[4:-1]
        if not name.isidentifier():
            raise self._invalid(f"bad character in group name {name!r}", tok.start_pos + 4)
        if name in self.group_names:
            raise self._invalid(f"redefinition of group name {name!r}", tok.start_pos + 4)
        self.group_names.add(name)
        return children[1]

    def group_ext(self, children: list) -> Node:
        raise self._group_ext_error(children[0])

    def _group_ext_error(self, tok: Token) -> InvalidRegexError | UnsupportedRegexError:
        text = str(tok)
        kinds = {
            "(?=": "lookahead (?=...)", "(?!": "negative lookahead (?!...)",
            "(?<=": "lookbehind (?<=...)", "(?<!": "negative lookbehind (?<!...)",
            "(?P=": "named backreference (?P=name)", "(?>": "atomic group (?>...)",
            "(?(": "conditional group (?(id)...)",
        }
        if text in kinds:
            return self._unsupported(kinds[text], tok.start_pos)
        if len(text) > 2 and text[2] in "-aiLmsux":
            return self._unsupported(f"inline flags {text}", tok.start_pos)
        return self._invalid("unknown extension " + text, tok.start_pos)

    def char_class(self, children: list) -> Node:
        opener: Token = children[0]
        items = [c for c in children[1:] if isinstance(c, CharSet)]
        chars = CharSet()
        for item in items:
            chars = chars.union(item)
        if str(opener) == "[^":
            chars = chars.negate()
        return Chars(chars)

    def class_first(self, children: list) -> CharSet:
        return self._class_piece(children[0])

    def class_item(self, children: list) -> CharSet:
        return self._class_piece(children[0])

    # -- characters --------------------------------------------------------------------
    def _class_piece(self, tok: Token) -> CharSet:
        text, pos = str(tok), tok.start_pos
        if tok.type in ("FIRST_ATOM", "CLASS_ATOM"):
            return self._class_atom(text, pos)
        split = _split_range(text)
        lo_set = self._class_atom(text[:split], pos)
        hi_set = self._class_atom(text[split + 1 :], pos + split + 1)
        lo, hi = lo_set.single(), hi_set.single()
        if lo is None or hi is None or lo > hi:
            raise self._invalid(f"bad character range {text}", pos)
        return CharSet.of_ranges([(ord(lo), ord(hi))])

    def _class_atom(self, text: str, pos: int) -> CharSet:
        if text.startswith("\\"):
            return self._escape_set(text[1:], pos, in_class=True)
        return self._char_set(text, pos)

    def _char_set(self, ch: str, pos: int) -> CharSet:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise self._unsupported(f"surrogate code point U+{ord(ch):04X}", pos)
        return CharSet.of_chars(ch)

    def _escape_set(self, body: str, pos: int, in_class: bool) -> CharSet:
        """The set an escape ``\\<body>`` denotes (a single character or a shorthand class)."""
        head = body[0]
        if head in _CLASS_SHORTHAND and len(body) == 1:
            return _CLASS_SHORTHAND[head]
        if head in _CONTROL and len(body) == 1:
            return CharSet.of_chars(_CONTROL[head])
        if in_class and body == "b":
            return CharSet.of_chars("\b")
        if head in "uUx":
            want = {"u": 4, "U": 8, "x": 2}[head]
            if len(body) - 1 != want:
                raise self._invalid(f"incomplete escape \\{body}", pos)
            cp = int(body[1:], 16)
            if cp > cs.MAX_CODE_POINT:
                raise self._invalid(f"bad escape \\{body}", pos)
            return self._char_set(chr(cp), pos)
        if head == "N":
            if not (body.startswith("N{") and body.endswith("}")):
                raise self._invalid("missing { after \\N", pos)
            try:
                return self._char_set(unicodedata.lookup(body[2:-1]), pos)
            except KeyError:
                raise self._invalid(f"undefined character name {body[2:-1]!r}", pos) from None
        if head.isdigit():
            if not all(c in "01234567" for c in body):
                raise self._invalid(f"bad escape \\{body}", pos)
            value = int(body, 8)
            if value > 0o377:
                raise self._invalid(f"octal escape value \\{body} outside of range 0-0o377", pos)
            return CharSet.of_chars(chr(value))
        if head.isascii() and head.isalnum():
            raise self._invalid(f"bad escape \\{head}", pos)
        return self._char_set(head, pos)


def _split_range(text: str) -> int:
    """Index of the '-' separating the two endpoints of a class range token."""
    m = re.match(rf"(?:{_ESC_IN}|[^\\])", text, re.S)
    assert m is not None and text[m.end()] == "-", text
    return m.end()


def _strip(node: Node, start: bool, end: bool) -> Node:
    """Drop anchors that sit at the very start (``start``) / end (``end``) of the match."""
    if isinstance(node, Anchor):
        return EMPTY if (node.kind == "start" and start) or (node.kind == "end" and end) else node
    if isinstance(node, Alt):
        return Alt(tuple(_strip(o, start, end) for o in node.options))
    if not isinstance(node, Concat) or not node.items:
        return node
    items = list(node.items)
    while start and items and isinstance(items[0], Anchor) and items[0].kind == "start":
        items.pop(0)
    while end and items and isinstance(items[-1], Anchor) and items[-1].kind == "end":
        items.pop()
    if len(items) == 1:
        items[0] = _strip(items[0], start, end)
    elif items:
        if start:
            items[0] = _strip(items[0], True, False)
        if end:
            items[-1] = _strip(items[-1], False, True)
    return Concat(tuple(items))


def _check_anchors(node: Node, pattern: str) -> None:
    """Reject anchors left anywhere but at the ends."""
    if isinstance(node, Anchor):
        sym = "^" if node.kind == "start" else "$"
        where = "start" if node.kind == "start" else "end"
        what = f"anchor {sym!r} not at the {where} of the pattern"
        raise UnsupportedRegexError(what, pattern, node.position)
    if isinstance(node, Repeat):
        _check_anchors(node.item, pattern)
    elif isinstance(node, (Concat, Alt)):
        for item in node.items if isinstance(node, Concat) else node.options:
            _check_anchors(item, pattern)


def nesting_depth(pattern: str) -> int:
    """How deeply the pattern's groups nest (an upper bound: escapes and character classes are
    skipped, every other ``(`` opens a level). Linear, no recursion: safe on any input."""
    depth = deepest = 0
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1  # a leading ] is a literal
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(depth - 1, 0)
        i += 1
    return deepest


def check_pattern_size(pattern: str, meter: CompileMeter) -> None:
    """The checks that run before parsing: the pattern's length and its group nesting."""
    meter.check("max_pattern_chars", len(pattern), "pattern characters")
    depth = nesting_depth(pattern)
    meter.check("max_nesting_depth", depth, "nested groups")


def parse_regex(pattern: str, *, allow_anchors: bool = True, meter: CompileMeter | None = None) -> Node:
    """Parse ``pattern`` into a syntax tree (anchors at the ends removed).

    Raises :class:`InvalidRegexError` for syntax errors, :class:`UnsupportedRegexError` for
    constructs outside regular languages (see the module docstring) and
    :class:`CompileBudgetError` when the pattern, its nesting or its NFA is over ``meter``'s
    budget (the default budget when none is given).
    """
    if not isinstance(pattern, str):
        raise TypeError(f"regex pattern must be a str, not {type(pattern).__name__}")
    meter = as_meter(meter)
    check_pattern_size(pattern, meter)
    try:
        node = _parse(pattern)
        if allow_anchors:
            node = _strip(node, True, True)
        _check_anchors(node, pattern)
        num_states = nfa_num_states(node)
    except RecursionError:  # NOTE: not expected below max_nesting_depth; never a traceback
        raise too_deep(meter) from None
    meter.check("max_nfa_states", num_states, "NFA states")
    meter.check_time("parsing the pattern")
    return node


def too_deep(meter: CompileMeter) -> CompileBudgetError:
    """The error for a RecursionError on nesting that passed the depth check (possible only
    with a raised ``max_nesting_depth``): still a clean error naming the limit."""
    limit = meter.budget.max_nesting_depth
    return CompileBudgetError("max_nesting_depth", limit, "nesting too deep to process")


def _parse(pattern: str) -> Node:
    try:
        tree = _parser().parse(pattern)
        return _ToTree(pattern).transform(tree)
    except VisitError as err:  # an error raised inside the transformer
        if isinstance(err.orig_exc, (InvalidRegexError, UnsupportedRegexError)):
            raise err.orig_exc from None
        if isinstance(err.orig_exc, RecursionError):
            raise err.orig_exc
        raise
    except _GroupExtension as ext:
        raise _ToTree(pattern)._group_ext_error(ext.token) from None
    except UnexpectedInput as err:
        raise syntax_error(pattern, err) from None
