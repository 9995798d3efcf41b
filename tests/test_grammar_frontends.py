"""Grammar front ends (GBNF/EBNF, regex, lark) -> IR: the IR decides the same language as an
independent parser (lark's Earley on the IR, xgrammar on the text, lark on the original lark
grammar), prints back to itself, and refuses bad or oversized input by name and position."""
from __future__ import annotations

import pickle
import random
import re
from pathlib import Path

import lark
import pytest

from sglc.fsm.charset import CharSet
from sglc.fsm.errors import FSMError, InvalidRegexError, UnsupportedRegexError
from sglc.grammar import (
    CharClass, Choice, Grammar, GrammarBudget, GrammarBudgetError, GrammarError, GrammarSyntaxError, Literal,
    Repeat, RuleRef, Seq, UnsupportedGrammarError, grammar_from_regex, parse_ebnf, parse_gbnf, parse_lark,
)
from sglc.grammar.budget import GrammarMeter
from sglc.grammar.build import Builder
from grammar_oracle import lark_parser_for, mutate, sample

xgrammar = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string as xgrammar_accepts  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "grammars"
GBNF_FILES = ["json.gbnf", "arithmetic.gbnf", "list.gbnf", "chess.gbnf"]


def gbnf(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- GBNF: hand-picked strings ------------------------------------------------------------------
HAND_PICKED = {
    "json.gbnf": (
        ['{"a": [1, 2.5e3, true, null, {"b": "x\\u00e9\\n"}]}', "{}", '{"k":-0.5E+7}', '{ "a" : "é😀" }'],
        ['{"a" 1}', "[1]", '{"a": tru}', '{"a": 01x}', '{"a": "\\q"}', '{"a": "line\nbreak"}', ""],
    ),
    "arithmetic.gbnf": (
        ["x=1\n", "(a +2)*b=c\n", "foo_1 /3=4\nx=y\n"],
        ["x=1", "=1\n", "X=1\n", "x==1\n", "(a=1\n", "(a + 2)=c\n"],
    ),
    "list.gbnf": (
        ["- milk\n", "- a\n- b c\n"],
        ["- \n", "-milk\n", "- a", "- a\u2028b\n", ""],
    ),
    "chess.gbnf": (
        ["1. e4 e5\n2. d4 d5\n", "1. e4 e5\n2. Nf3 Nc6\n3. O-O Bxe5+\n"],
        ["1. e4 e5\n", "1. e4 e5", "1. e9 e5\n", "2. e4 e5\n", "1. e4 e5\n2. Zf3 Nc6\n"],
    ),
}


@pytest.mark.parametrize("name", GBNF_FILES)
def test_gbnf_fixture_accepts_and_rejects_hand_picked_strings(name):
    """Each llama.cpp grammar parses; the IR accepts its hand-picked members and rejects the rest."""
    oracle = lark_parser_for(parse_gbnf(gbnf(name)))
    good, bad = HAND_PICKED[name]
    assert [s for s in good if not oracle.accepts(s)] == []
    assert [s for s in bad if oracle.accepts(s)] == []


@pytest.mark.parametrize("name", GBNF_FILES)
def test_gbnf_round_trips_through_to_ebnf_and_xgrammar_reads_it(name):
    """to_ebnf() parses back to an equal grammar, and xgrammar accepts the printed text."""
    g = parse_gbnf(gbnf(name))
    assert parse_gbnf(g.to_ebnf()) == g
    xgrammar.Grammar.from_ebnf(g.to_ebnf())


@pytest.mark.parametrize("name", GBNF_FILES)
def test_gbnf_random_strings_agree_with_xgrammar(name):
    """On sampled members and their one-character mutations (seeded), lark on our IR and
    xgrammar on the grammar text (the original where xgrammar reads it, else our print) agree."""
    rng = random.Random(27)
    g = parse_gbnf(gbnf(name))
    oracle = lark_parser_for(g)
    try:
        reference = xgrammar.Grammar.from_ebnf(gbnf(name))  # json.gbnf's empty alternative is refused
    except RuntimeError:
        reference = xgrammar.Grammar.from_ebnf(g.to_ebnf())
    alphabet = "".join(sorted(set("".join(HAND_PICKED[name][0])))) + "\n -"
    members = [s for s in (sample(g, rng) for _ in range(40)) if s is not None and len(s) < 200][:25]
    assert len(members) >= 10
    cases = members + [mutate(s, rng, alphabet) for s in members for _ in range(2)]
    accepted = 0
    for s in cases:
        ours = oracle.accepts(s)
        assert ours == xgrammar_accepts(reference, s), s
        accepted += ours
    assert len(members) <= accepted < len(cases)  # both kinds were exercised


def test_gbnf_syntax_covers_escapes_classes_repeats_and_multiline_rules():
    """Escapes, classes with ] and -, negation, '.', {m}/{m,}/{m,n}, comments, '-' in names and
    rules spanning lines read as written."""
    text = r'''
root ::= "a\x41\u00e9\U0001F600\"\\\t" # comment
    [a-z\]]{2} [^0-9] . my-rule{1,} "q"{0,2} [-x-]?
  | ( "b"
      | "c" )+
my-rule ::= "m"
'''
    g = parse_gbnf(text)
    root = g.rules["root"]
    assert isinstance(root, Choice) and len(root.options) == 2
    first = root.options[0]
    assert first.items[0] == Literal('aAé\U0001F600"\\\t')
    assert first.items[1] == Repeat(CharClass(first.items[1].item.chars), 2, 2)
    assert "]" in first.items[1].item.chars and "z" in first.items[1].item.chars
    assert "5" not in first.items[2].chars and "\U0010FFFF" in first.items[2].chars
    assert "\n" in first.items[3].chars  # '.' is any character, newline included
    assert first.items[4] == Repeat(RuleRef("my-rule"), 1, None)
    assert first.items[5] == Repeat(Literal("q"), 0, 2)
    assert set("-x") == {chr(c) for lo, hi in first.items[6].item.chars.ranges for c in range(lo, hi + 1)}
    assert root.options[1] == Repeat(Choice((Literal("b"), Literal("c"))), 1, None)
    oracle = lark_parser_for(g)
    assert oracle.accepts('aAé\U0001F600"\\\t' + "]a" + "x" + "\n" + "mm" + "qq" + "-")
    assert oracle.accepts("bcb") and not oracle.accepts("bd")
    assert parse_gbnf(g.to_ebnf()) == g
    assert parse_ebnf is parse_gbnf


def test_gbnf_syntax_errors_name_line_and_column():
    """A bad grammar names the line, the column and shows a caret under it."""
    cases = [
        ('root ::= "a"\nfoo ::= "b" )', 2, 13, "unexpected ')'"),
        ('root ::= "abc', 1, 10, "unterminated string literal"),
        ("root ::= [a-", 1, 10, "unterminated character class"),
        ('root ::= "\\q"', 1, 11, "unknown escape \\q"),
        ("root ::= \n  x y\nx ::= \"1\"", 2, 5, "undefined rule 'y'"),
        ('root ::= "a"{3,1}', 1, 16, "max < min"),
        ('root ::= * "a"', 1, 10, "repeats nothing"),
        ('root = "a"', 1, 6, "expected '::='"),
        ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
        ('root ::= ("a" | "b"', 1, 20, "unclosed '('"),
        ('root ::= "\\uD800"', 1, 11, "not a Unicode scalar value"),
    ]
    for text, line, column, message in cases:
        with pytest.raises(GrammarSyntaxError) as info:
            parse_gbnf(text)
        err = info.value
        assert (err.line, err.column) == (line, column), (text, str(err))
        assert message in str(err)
        caret = str(err).splitlines()[-1]
        assert caret.index("^") == column - 1, str(err)


def test_gbnf_refuses_token_references_and_missing_root_by_name():
    """llama.cpp token references and xgrammar lookaheads are refused by name; no root is named."""
    with pytest.raises(UnsupportedGrammarError, match="token reference"):
        parse_gbnf('root ::= <[123]> "a"')
    with pytest.raises(UnsupportedGrammarError, match="lookahead"):
        parse_gbnf('root ::= a\na (= "b") ::= "a"')
    with pytest.raises(GrammarError, match="no root rule 'root'"):
        parse_gbnf('start ::= "a"')
    assert parse_gbnf('start ::= "a"', root="start").root == "start"


def test_grammar_errors_are_fsm_errors_and_pickle():
    """Every grammar error is an FSMError (a 400 at the edge) and pickles to the same fields."""
    errors = [
        GrammarSyntaxError("boom", 3, 4, "xx\n   ^"),
        UnsupportedGrammarError("%declare", "terminal 'A'", "detail"),
        GrammarBudgetError("max_rules", 10, "rules 11"),
        GrammarError("plain"),
    ]
    for err in errors:
        assert isinstance(err, FSMError) and isinstance(err, ValueError)
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
    assert "GrammarBudget.max_rules = 10" in str(errors[2]) and "raise it" in str(errors[2])


# -- budgets --------------------------------------------------------------------------------------
@pytest.mark.timeout(60)  # NOTE: a guard against a hang, not a timing (timings belong in bench/)
def test_budget_refuses_long_text_before_parsing():
    """Over-long text is refused before parsing, naming max_grammar_chars."""
    text = 'root ::= "' + "a" * 5_000_000 + '"'
    with pytest.raises(GrammarBudgetError, match="max_grammar_chars"):
        parse_gbnf(text)


@pytest.mark.timeout(60)  # NOTE: a guard against a hang, not a timing
def test_budget_refuses_deep_nesting_before_parsing():
    """Deep groups are refused by the linear scan (no RecursionError), naming max_nesting_depth;
    brackets inside strings and classes do not count."""
    with pytest.raises(GrammarBudgetError, match="max_nesting_depth"):
        parse_gbnf("root ::= " + "(" * 50_000 + '"a"' + ")" * 50_000)
    parse_gbnf('root ::= "' + "(" * 500 + '" [' + "(" * 500 + "] # " + "(" * 500)


def test_budget_refuses_too_many_rules_and_nodes_and_big_repeats():
    """Rules, nodes and repetition bounds are counted as built and refused by name."""
    many = "\n".join(f"r{i} ::= \"x\"" for i in range(200))
    with pytest.raises(GrammarBudgetError, match="max_rules"):
        parse_gbnf('root ::= "a"\n' + many, GrammarBudget(max_rules=100))
    with pytest.raises(GrammarBudgetError, match="max_expr_nodes"):
        parse_gbnf("root ::= " + ' "a"' * 500, GrammarBudget(max_expr_nodes=100))
    with pytest.raises(GrammarBudgetError, match="max_repeat_bound"):
        parse_gbnf('root ::= "a"{1,100000}')
    with pytest.raises(GrammarBudgetError, match="max_repeat_bound"):
        parse_gbnf('root ::= "a"{' + "9" * 100_000 + "}")


def test_budget_parse_reads_fields_and_names_unknown_ones():
    """GrammarBudget.parse sets the named fields and refuses unknown or malformed entries."""
    b = GrammarBudget.parse("max_rules=7, max_compile_seconds=0.5,max_expr_nodes=1_000")
    assert (b.max_rules, b.max_compile_seconds, b.max_expr_nodes) == (7, 0.5, 1000)
    with pytest.raises(ValueError, match="unknown grammar budget entry 'max_states=3'"):
        GrammarBudget.parse("max_states=3")
    with pytest.raises(ValueError, match="not a number"):
        GrammarBudget.parse("max_rules=lots")
    with pytest.raises(ValueError, match="positive"):
        GrammarBudget(max_rules=0)


# -- regex -------------------------------------------------------------------------------------
REGEXES = [r"[a-c]{1,3}(x|yz)*", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", r"\d{2}-\w+\s?", r"(ab|a)(bc|c)?", r"[^a-c]+.\."]


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_grammar_agrees_with_python_re(pattern):
    """grammar_from_regex accepts exactly what re.fullmatch (ASCII) accepts, on random strings."""
    rng = random.Random(hash(pattern) & 0xFFFF)
    g = grammar_from_regex(pattern)
    oracle = lark_parser_for(g)
    compiled = re.compile(pattern, re.ASCII)
    alphabet = "abcxyz019-._ \n"
    members = [s for s in (sample(g, rng) for _ in range(30)) if s is not None]
    cases = members + [mutate(s, rng, alphabet) for s in members] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(60)]
    seen = set()
    for s in cases:
        expected = compiled.fullmatch(s) is not None
        assert oracle.accepts(s) == expected, (pattern, s)
        seen.add(expected)
    assert seen == {True, False}
    assert parse_gbnf(g.to_ebnf()) == g


def test_regex_grammar_refuses_what_the_fsm_refuses():
    """Lookaround and bad syntax raise the FSM library's errors; big bounds the grammar budget's."""
    with pytest.raises(UnsupportedRegexError, match="lookahead"):
        grammar_from_regex("a(?=b)")
    with pytest.raises(InvalidRegexError):
        grammar_from_regex("a(b")
    with pytest.raises(GrammarBudgetError, match="max_repeat_bound"):
        grammar_from_regex("a{0,50000}")
    with pytest.raises(GrammarBudgetError, match="max_nesting_depth"):
        grammar_from_regex("(" * 1000 + ")" * 1000)
    assert grammar_from_regex("abc").rules == {"root": Literal("abc")}
    assert isinstance(grammar_from_regex("ab|c").rules["root"], Choice)
    assert isinstance(grammar_from_regex("a[bc]").rules["root"], Seq)
    assert Grammar({"root": Literal("x")}).verify()


# -- lark ----------------------------------------------------------------------------------------

LARK_CASES = {
    "sql_subset.lark": (
        ["select * from t", "SELECT a, b AS c FROM t WHERE a = 1 AND b <> \"x\\\"y\" ORDER BY a desc LIMIT 10;",
         "  select a from t where (a<1 or b>=2.5e3) and c=d  ", "select\ta\nfrom\tt"],
        ["select from t", "select * from", "select * from t where", "select a b from t", "select * from t limit 1.5",
         "select * from t where a = \"x\ny\"", "select * from t;;"],
        "selectfromwhereandorby*,;=<>()\"\\ abt12.e\n",
    ),
    "arithmetic.lark": (
        ["1 + 2 * 3", "-(a - b) / f(1, g())", "x", "  2.5e3*-y  ", "f()"],
        ["1 +", "(1", "f(1,)", "1 2", "", "1\n+2"],
        "12+-*/(),. xyf\te\n",
    ),
}


def lark_reference(text: str) -> lark.Lark:
    """lark's own Earley parser on the ORIGINAL grammar, trying every token length."""
    return lark.Lark(text, parser="earley", lexer="dynamic_complete")


def lark_accepts(parser: lark.Lark, s: str) -> bool:
    try:
        parser.parse(s)
    except lark.exceptions.LarkError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(LARK_CASES))
def test_lark_grammar_agrees_with_lark_on_the_original(name):
    """On hand-picked and random strings (seeded samples and mutations), our IR accepts exactly
    what lark's Earley parser accepts with the original grammar (%ignore included)."""
    text = (FIXTURES / name).read_text()
    good, bad, alphabet = LARK_CASES[name]
    g = parse_lark(text)
    ours, reference = lark_parser_for(g), lark_reference(text)
    assert [s for s in good if not (ours.accepts(s) and lark_accepts(reference, s))] == []
    assert [s for s in bad if ours.accepts(s) or lark_accepts(reference, s)] == []
    rng = random.Random(name)
    members = [s for s in (sample(g, rng, max_depth=5) for _ in range(60)) if s is not None and len(s) < 80][:30]
    assert len(members) >= 15
    kinds = set()
    for s in members + [mutate(m, rng, alphabet) for m in members for _ in range(2)]:
        expected = lark_accepts(reference, s)
        assert ours.accepts(s) == expected, s
        kinds.add(expected)
    assert kinds == {True, False}
    assert parse_gbnf(g.to_ebnf(), root=g.root) == g
    xgrammar.Grammar.from_ebnf(g.to_ebnf(), root_rule_name=g.root)


def test_lark_lowers_left_recursion_repeats_templates_and_flags():
    """Left recursion, `~` ranges, templates, `[]`, the i and s flags and string escapes mean
    what they mean to lark; no rule of the result is directly left-recursive."""
    text = r'''
start: _list{item} "!"~2..3 TAIL? KEY
_list{x}: x | _list{x} "," x
item: /a.b/s | "q"~2
TAIL: /[^x]/i
KEY: "ab\"c"i
'''
    g = parse_lark(text)
    for name, expr in g.rules.items():
        options = expr.options if isinstance(expr, Choice) else (expr,)
        for o in options:
            first = o.items[0] if isinstance(o, Seq) else o
            assert first != RuleRef(name), name
    ours, reference = lark_parser_for(g), lark_reference(text)
    cases = ["a\nb,qq!!AB\"c", "qq!!!zab\"C", "aab!!ab\"c", "qq,qq,a-b!!Xab\"c", "qq!!!!ab\"c", "qq!ab\"c", "qq!!xab\"c"]
    assert [s for s in cases if ours.accepts(s) != lark_accepts(reference, s)] == []
    assert {ours.accepts(s) for s in cases} == {True, False}


def test_lark_ignore_allows_several_ignored_terminals_around_every_terminal_only():
    """Two %ignore terminals (spaces, # comments) may come before, between and after terminals,
    in any mix, but never inside one, exactly as lark decides on the original grammar."""
    text = r'''
start: pair+
pair: KEY "=" INT
KEY: /[a-z]+/
%import common.INT
COMMENT: /#[^\n]*/
%ignore COMMENT
%ignore /[ \n]+/
'''
    g = parse_lark(text)
    ours, reference = lark_parser_for(g), lark_reference(text)
    cases = ["a=1", " a = 1 ", "#c\na=1#d", "a=1 b=22\n#x\n c =3", "ab=1", "a b=1", "a=1 2", "a=1#x b=2", "a=1#x\nb=2",
             "#only", "a=#c\n1", "a=", "=1", "a=1\n\n"]
    results = {s: ours.accepts(s) for s in cases}
    assert results == {s: lark_accepts(reference, s) for s in cases}
    assert results["a=#c\n1"] and results["ab=1"] and not results["a b=1"] and not results["a=1 2"]
    # NOTE: terminals are languages, not longest matches: '#x' is a COMMENT too (as lark's
    # dynamic_complete lexer agrees), so "b=2" after it on the same line is a pair
    assert results["a=1#x b=2"]


def test_lark_refusals_name_the_construct():
    """%declare, file imports, lookaround, the x flag and lark's own errors are refused by name
    (lark syntax errors with line and column); common.ESCAPED_STRING is not refused."""
    with pytest.raises(UnsupportedGrammarError, match="%declare"):
        parse_lark("start: A\n%declare A")
    with pytest.raises(UnsupportedGrammarError, match="%import .mygrammar"):
        parse_lark("start: A\n%import .mygrammar.A")
    with pytest.raises(UnsupportedGrammarError, match="lookahead.*terminal 'A'"):
        parse_lark("start: A\nA: /a(?=b)/")
    with pytest.raises(UnsupportedGrammarError, match="regex flag 'x'"):
        parse_lark("start: A\nA: /a b/x")
    with pytest.raises(GrammarError, match="'b' used but not defined"):
        parse_lark('start: "a" b')
    with pytest.raises(GrammarError, match="lark grammar error: .*missing \\)"):
        parse_lark("start: A\nA: /a(/")  # lark compiles the regex: its error, not a traceback
    with pytest.raises(GrammarSyntaxError) as info:
        parse_lark('start: "a"\nfoo: "b" )')
    assert (info.value.line, info.value.column) == (2, 10)
    with pytest.raises(GrammarBudgetError, match="max_repeat_bound"):
        parse_lark('start: "a"~1..100000')
    with pytest.raises(GrammarBudgetError, match="max_nesting_depth"):
        parse_lark("start: " + "(" * 5000 + '"a"' + ")" * 5000)
    g = parse_lark('start: "é"i "ü"')  # lark names these terminals É and Ü: renamed for GBNF
    assert parse_gbnf(g.to_ebnf(), root=g.root) == g and lark_parser_for(g).accepts("Éü")
    g = parse_lark("start: ESCAPED_STRING\n%import common.ESCAPED_STRING")
    ours, reference = lark_parser_for(g), lark_reference("start: ESCAPED_STRING\n%import common.ESCAPED_STRING")
    for s in ['""', '"a\\"b"', '"a\\\\"', '"a\\\\"b"', '"a"b"', '"\\', '"x\ny"', '"\\\\\\""']:
        assert ours.accepts(s) == lark_accepts(reference, s), s


# -- the printer ---------------------------------------------------------------------------------

TRICKY = ['"', "\\", "]", "[", "-", "^", "\n", "\t", "\r", "\x00", "\x7f", "#", "|", " ", "é", "\u2028", "\U0001F600", "a", "z", "0"]


def random_grammar(rng: random.Random) -> Grammar:
    """A random grammar in the builder's normal form, with characters that need escaping."""
    b = Builder(GrammarMeter())
    names = ["root", "r-1", "r_2"]

    def expr(depth: int):
        kind = rng.randrange(6 if depth < 3 else 2)
        if kind == 0:
            return b.lit("".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 3))))
        if kind == 1:
            picks = [ord(rng.choice(TRICKY)) for _ in range(rng.randint(1, 3))]
            chars = CharSet.of_ranges((p, p + rng.choice([0, 0, 5])) for p in picks)
            return b.chars(chars.negate() if rng.random() < 0.2 else chars)
        if kind == 2:
            return b.ref(rng.choice(names[1:]))
        if kind == 3:
            return b.seq(expr(depth + 1) for _ in range(rng.randint(2, 3)))
        if kind == 4:
            return b.choice(expr(depth + 1) for _ in range(rng.randint(2, 3)))
        lo = rng.randint(0, 2)
        return b.repeat(expr(depth + 1), lo, rng.choice([None, lo, lo + 1, lo + 3]))

    for name in names:
        b.add_rule(name, b.seq([b.lit("x"), expr(0)]) if name != "root" else expr(0))
    return b.grammar("root")


def test_printed_grammars_parse_back_equal_and_xgrammar_agrees_on_their_language():
    """Random normal-form grammars (escapes, classes, nesting) print to text that parses back to
    an equal grammar, that xgrammar reads, and whose sampled strings both lark and xgrammar accept."""
    rng = random.Random(2727)
    for _ in range(40):
        g = random_grammar(rng)
        text = g.to_ebnf()
        assert parse_gbnf(text) == g, text
        reference = xgrammar.Grammar.from_ebnf(text)
        oracle = lark_parser_for(g)
        for s in filter(None, (sample(g, rng, max_depth=4) for _ in range(3))):
            assert oracle.accepts(s) and xgrammar_accepts(reference, s), (text, s)
            wrong = mutate(s, rng, "".join(TRICKY))
            assert oracle.accepts(wrong) == xgrammar_accepts(reference, wrong), (text, wrong)
