"""Unit tests: regex syntax -> FSM, errors, forced strings, compression, dtypes, serialization."""
import json
import re

import pytest

from sglc.fsm import (
    FSMFormatError,
    InvalidRegexError,
    UnsupportedRegexError,
    compile_choices,
    compile_dtype,
    compile_regex,
    fsm_from_dict,
    fsm_from_json,
    fsm_to_dict,
    fsm_to_json,
    regex_for_choices,
)
from sglc.fsm.serialize import VERSION

# (pattern, strings it must accept, strings it must reject)
SYNTAX_CASES = [
    ("abc", ["abc"], ["", "ab", "abcd", "ABC"]),
    ("a|bc|", ["a", "bc", ""], ["b", "abc"]),
    ("[a-c]x", ["ax", "bx", "cx"], ["dx", "x", "a"]),
    ("[^a-c]", ["d", "\u00e9", "\n", "\U0001F600"], ["a", "b", "", "dd"]),
    ("[]a]", ["]", "a"], ["[", ""]),
    ("[-a]|[a-]", ["-", "a"], ["b"]),
    ("[\\]\\\\]", ["]", "\\"], ["[", "a"]),
    ("\\d\\D", ["1a", "9 "], ["11", "a1", "\u0663a"]),
    ("\\w+", ["abc_09", "X"], ["", "a-b", "\u00e9"]),
    ("\\s\\S", [" a", "\ta", "\na"], ["  ", "a "]),
    ("a.c", ["abc", "a\u00e9c", "a c"], ["a\nc", "ac"]),
    ("(ab)+", ["ab", "abab"], ["", "aba"]),
    ("(?:ab)*c", ["c", "abc", "ababc"], ["ab", "abac"]),
    ("(?P<word>hi)!", ["hi!"], ["hi"]),
    ("a(?#a comment)b", ["ab"], ["a b"]),
    ("a?b", ["b", "ab"], ["aab"]),
    ("a{3}", ["aaa"], ["aa", "aaaa"]),
    ("a{2,}", ["aa", "aaaaa"], ["a"]),
    ("a{,2}", ["", "a", "aa"], ["aaa"]),
    ("a{1,3}", ["a", "aaa"], ["", "aaaa"]),
    ("a{0}b", ["b"], ["ab"]),
    ("a*?b+?c??", ["b", "aabbc"], ["ac"]),
    ("a{1,2}?", ["a", "aa"], ["aaa"]),
    ("a{,}b", ["b", "aab"], ["a{,}b"]),
    ("a{}", ["a{}"], ["a", ""]),
    ("x{2", ["x{2"], ["xx"]),
    ("^abc$", ["abc"], ["ab"]),
    ("^a|^b$", ["a", "b"], ["ab"]),
    ("\\Aab\\Z", ["ab"], ["a"]),
    ("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\/\\-", [".*+?()[]{}|^$/-"], [""]),
    ("\\n\\t\\r\\f\\v\\a\\0", ["\n\t\r\f\v\a\0"], [""]),
    ("\\x41\\u00e9\\U0001F600\\101\\N{BULLET}", ["A\u00e9\U0001F600A\u2022"], [""]),
    ("[\\u00e0-\\u00ff]+", ["\u00e0\u00ff"], ["a"]),
    ("[\\b]", ["\b"], ["b"]),
    ("caf\u00e9|na\u00efve|\u65e5\u672c", ["caf\u00e9", "na\u00efve", "\u65e5\u672c"], ["cafe", "\u65e5"]),
    ("[\u00e9-\u00eb]x|\U0001F600+", ["\u00eax", "\U0001F600\U0001F600"], ["\u00ecx", ""]),
]


@pytest.mark.parametrize("pattern,accept,reject", SYNTAX_CASES)
def test_each_syntax_element_matches_like_python(pattern, accept, reject):
    """Each supported construct accepts and rejects exactly what re.fullmatch (re.ASCII) does."""
    fsm = compile_regex(pattern)
    for s in accept:
        assert fsm.accepts(s), (pattern, s)
        assert re.fullmatch(pattern, s, re.ASCII), (pattern, s)
        assert fsm.byte_dfa.accepts(s.encode()), (pattern, s)
    for s in reject:
        assert not fsm.accepts(s), (pattern, s)
        assert not re.fullmatch(pattern, s, re.ASCII), (pattern, s)
        assert not fsm.byte_dfa.accepts(s.encode()), (pattern, s)


@pytest.mark.parametrize(
    "pattern,construct",
    [
        ("(a)\\1", "backreference"),
        ("(?P<n>a)(?P=n)", "named backreference"),
        ("a(?=b)", "lookahead"),
        ("a(?!b)", "negative lookahead"),
        ("(?<=a)b", "lookbehind"),
        ("(?<!a)b", "negative lookbehind"),
        ("(?>ab)", "atomic group"),
        ("(?i)abc", "inline flags"),
        ("(?s:.)", "inline flags"),
        ("a*+", "possessive quantifier"),
        ("\\bword\\b", "word boundary"),
        ("a^b", "anchor '^'"),
        ("a$b", "anchor '$'"),
        ("(a)(?(1)b|c)", "conditional"),
        ("\\ud800", "surrogate"),
    ],
)
def test_unsupported_constructs_raise_naming_the_construct(pattern, construct):
    """Valid-but-irregular syntax raises UnsupportedRegexError naming the construct."""
    with pytest.raises(UnsupportedRegexError) as info:
        compile_regex(pattern)
    assert construct in str(info.value)
    assert info.value.pattern == pattern


@pytest.mark.parametrize(
    "pattern,message,position",
    [
        ("(", "missing ), unterminated subpattern", 0),
        ("a)", "unbalanced parenthesis", 1),
        ("a{3,1}", "min repeat greater than max repeat", 2),
        ("[z-a]", "bad character range z-a", 1),
        ("[", "unterminated character set", 0),
        ("[]", "unterminated character set", 0),
        ("*a", "nothing to repeat", 0),
        ("a**", "multiple repeat", 2),
        ("a{2}{3}", "multiple repeat", 4),
        ("\\", "bad escape (end of pattern)", 0),
        ("\\q", "bad escape \\q", 0),
        ("\\u12", "incomplete escape", 0),
        ("[\\d-z]", "bad character range", 1),
        ("(?P<1>x)", "bad character in group name", 4),
        ("\\N{NO SUCH CHARACTER}", "undefined character name", 0),
        ('[0-9]{1,3}\\.[0-9]{1,3}\\.(', "missing )", 24),
        ("((a)", "missing )", 0),
        ("(a(b", "missing )", 2),
        ("(a[)", "unterminated character set", 2),
        ("a[]b", "unterminated character set", 1),
    ],
)
def test_invalid_regexes_raise_clear_errors_with_position(pattern, message, position):
    """Syntax errors raise InvalidRegexError (never a crash) with Python's wording and position."""
    with pytest.raises(InvalidRegexError) as info:
        compile_regex(pattern)
    assert message in str(info.value)
    assert info.value.position == position
    with pytest.raises(re.error) as python:
        re.compile(pattern)
    assert python.value.pos == position


def test_non_string_pattern_is_a_type_error():
    """A pattern that is not a str is rejected up front."""
    with pytest.raises(TypeError):
        compile_regex(b"abc")  # type: ignore[arg-type]


def test_forced_string_follows_a_literal_chain_to_the_end():
    """Every state of a pure literal is forced up to the final state."""
    fsm = compile_regex("abc")
    assert fsm.forced_string(fsm.initial) == "abc"
    s = fsm.walk("a")
    assert fsm.forced_string(s) == "bc"
    assert fsm.forced_string(fsm.walk("abc")) == ""


def test_final_state_on_a_cycle_can_both_stop_and_continue():
    """In a(bc)*, the state after 'a' is final, forces nothing, and still allows 'bc'."""
    fsm = compile_regex("a(bc)*")
    s = fsm.walk("a")
    assert fsm.is_final(s)
    assert fsm.forced_string(s) == ""
    t = fsm.step(s, "b")
    assert t >= 0 and not fsm.is_final(t)
    assert fsm.forced_string(t) == "c"
    assert fsm.walk("c", t) == s
    assert fsm.step(s, "c") == -1


def test_forced_string_stops_at_a_branch():
    """Forcing stops where the pattern offers a choice."""
    fsm = compile_regex('\\{"name": "(Ann|Bob)", "ok": (true|false)\\}')
    assert fsm.forced_string(fsm.initial) == '{"name": "'
    after_name = fsm.walk('{"name": "Bob')
    assert fsm.forced_string(after_name) == '", "ok": '
    assert fsm.forced_string(fsm.walk('{"name": "Bob", "ok": t')) == "rue}"


def test_compressed_graph_merges_forced_chains_into_string_edges():
    """The compressed graph of a JSON-like pattern has few nodes and edges carrying strings."""
    fsm = compile_regex('\\{"name": "[a-z]+", "age": [0-9]+\\}')
    labels = [e.label for e in fsm.edges]
    assert repr('{"name": "') in labels and repr('", "age": ') in labels
    assert "[a-z]" in labels and "[0-9]" in labels
    assert len(fsm.nodes) == 6 and len(fsm.edges) == 7 and fsm.num_states == 24
    listing = str(fsm)
    assert "compressed nodes" in listing and "(final)" in listing


def test_equal_languages_compile_to_equal_automata():
    """Minimization is canonical: same language -> same DFA and fingerprint."""
    pairs = [("a|b", "[ab]"), ("(a|b)*", "[ab]*|a*"), ("x{2,3}", "xxx?"), ("\\d+", "[0-9][0-9]*")]
    for p, q in pairs:
        assert compile_regex(p).dfa == compile_regex(q).dfa
        assert compile_regex(p).fingerprint == compile_regex(q).fingerprint
    assert compile_regex("a").fingerprint != compile_regex("b").fingerprint


def test_negated_class_is_stored_as_ranges_not_enumerated():
    """[^"] compiles to a tiny alphabet: two code-point intervals, not a million characters."""
    fsm = compile_regex('[^"]*')
    assert fsm.num_states == 1
    assert fsm.dfa.num_classes == 2 and len(fsm.dfa.interval_starts) == 5  # incl. surrogates
    assert fsm.accepts("\U0010FFFF\u00e9abc") and not fsm.accepts('a"')


def test_empty_language_compiles_and_reports_empty():
    """A pattern matching nothing compiles to an empty FSM (no final states)."""
    fsm = compile_regex("[^\\s\\S]")
    assert fsm.is_empty() and not fsm.accepts("")


@pytest.mark.parametrize(
    "dtype,good,bad,parse",
    [
        # NOTE: int and float are SGLang's REGEX_INT / REGEX_FLOAT (no exponent: never inf)
        (int, ["0", "-12", "42", "+1", "01", "7 \n"], ["", "1.0", "-", "1e3"], int),
        (float, ["0", "-1.5", ".5", "+2.25 "], ["", "1.", "3e10", "1.5E3017", "inf"], float),
        (bool, ["True", "False"], ["true", "1", ""], lambda s: s == "True"),
        (str, ['""', '"a b"', '"say \\"hi\\""', '"\\u00e9\\n"'], ['"', "abc", '"a"b"', '"\n"'], json.loads),
    ],
)
def test_dtype_fsms_accept_what_the_python_type_parses(dtype, good, bad, parse):
    """gen(dtype=...) FSMs accept literals the Python type parses (SGLang's patterns for int and float),
    and nothing else."""
    fsm = compile_dtype(dtype)
    assert compile_dtype(dtype.__name__) == fsm
    for s in good:
        assert fsm.accepts(s), s
        parse(s)
    for s in bad:
        assert not fsm.accepts(s), s


def test_unknown_dtype_is_rejected():
    """Only int, float, bool and str have regexes."""
    with pytest.raises(ValueError, match="unsupported dtype"):
        compile_dtype(list)


def test_choices_fsm_matches_exactly_the_choices_with_metacharacters_escaped():
    """select(choices) lowers to an alternation of escaped literals."""
    choices = ["yes", "no", "a.b", "(maybe)", "caf\u00e9", "1+1", "yes!"]
    fsm = compile_choices(choices)
    for c in choices:
        assert fsm.accepts(c)
    for s in ["ye", "axb", "maybe", "11", "yes!!", ""]:
        assert not fsm.accepts(s)
    assert fsm.is_final(fsm.walk("yes")) and fsm.forced_string(fsm.walk("yes")) == ""
    with pytest.raises(ValueError):
        regex_for_choices([])


def test_serialized_fsm_round_trips_exactly_through_dict_and_json():
    """fsm_from_dict(fsm_to_dict(f)) == f, the dict is plain JSON data, and so is the JSON form."""
    fsm = compile_regex('\\{"a": (\\d+|"[^"]*")\\}|caf\u00e9')
    data = fsm_to_dict(fsm)
    assert json.loads(json.dumps(data)) == data
    assert data["version"] == VERSION
    back = fsm_from_dict(data)
    assert back == fsm and back.fingerprint == fsm.fingerprint
    assert back.accepts('{"a": 12}') and not back.accepts('{"a": }')
    assert fsm_from_json(fsm_to_json(fsm)) == fsm
    as_floats = {k: ([float(x) for x in v] if isinstance(v, list) else v) for k, v in data.items()}
    assert fsm_from_dict(as_floats) == fsm  # protobuf Struct numbers are doubles


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d.update(version=VERSION + 1), "newer"),
        (lambda d: d.update(format="other"), "not a serialized FSM"),
        (lambda d: d.pop("finals"), "lacks field"),
        (lambda d: d.update(transitions=d["transitions"] + [0, 0]), "triples"),
        (lambda d: d.update(transitions=[0, 0, 999]), "out of range"),
        (lambda d: d.update(interval_starts=[1]), "interval_starts"),
        (lambda d: d.update(initial=1.5), "integer"),
        (lambda d: d.update(finals=[]), "canonical"),
        (lambda d: d.update(num_states=d["num_states"] + 1), "canonical"),
    ],
)
def test_malformed_serialized_fsm_raises_format_error(mutate, message):
    """A malformed or newer-version FSM dict raises FSMFormatError naming the problem."""
    data = fsm_to_dict(compile_regex("ab|c"))
    mutate(data)
    with pytest.raises(FSMFormatError, match=message):
        fsm_from_dict(data)
