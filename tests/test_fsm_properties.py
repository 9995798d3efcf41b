"""Property tests for the FSM library: Python ``re`` is the oracle.

Random regexes come from a recursive strategy over the supported syntax; random strings mix
members sampled from the FSM with arbitrary text over a small alphabet.
"""
import random
import re
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglc.fsm import (
    CompileBudgetError,
    FSMError,
    InvalidRegexError,
    UnsupportedRegexError,
    compile_regex,
    fsm_from_dict,
    fsm_to_dict,
    sample,
)
from sglc.fsm.dfa import determinize, minimize
from sglc.fsm.nfa import build_nfa
from sglc.fsm.regex_ast import to_regex
from sglc.fsm.regex_parser import parse_regex

ALPHABET = "abc\u00e9\u65e5\U0001F600 .-_1\n\"\\"
FAST = settings(database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

_LEAF_CHARS = ["a", "b", "c", "\u00e9", "\u65e5", "\U0001F600", " ", "1", "-", "_"]
_ESCAPED = ["\\.", "\\-", "\\\\", "\\n", '\\"', "\\u00e9", "\\x61", "\\U0001F600", "\\/"]
_SHORTHANDS = ["\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "."]
_CLASS_ITEMS = ["a", "b", "c", "a-c", "\u00e9", "\u00e0-\u00ff", "0-9", "\\d", "\\s", "\\n", "\\-", "\u65e5", "\\u0041-\\u005a", "\\]", "\\\\"]


@st.composite
def char_class(draw) -> str:
    items = draw(st.lists(st.sampled_from(_CLASS_ITEMS), min_size=1, max_size=3))
    neg = "^" if draw(st.booleans()) else ""
    return f"[{neg}{''.join(items)}]"


_leaves = st.one_of(
    st.sampled_from(_LEAF_CHARS),
    st.sampled_from(_ESCAPED),
    st.sampled_from(_SHORTHANDS),
    char_class(),
)
_QUANTS = ["*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}", "{,2}", "*?", "+?", "??", "{1,2}?"]


def _extend(children):
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map("".join),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
        st.tuples(children, st.sampled_from(_QUANTS)).map(lambda t: f"(?:{t[0]}){t[1]}"),
        st.tuples(children, st.sampled_from(_QUANTS)).map(lambda t: f"({t[0]}){t[1]}"),
    )


regexes = st.recursive(_leaves, _extend, max_leaves=8)
texts = st.text(alphabet=ALPHABET, max_size=8)


def _strings_for(fsm, seed: int, extra: list[str]) -> list[str]:
    rng = random.Random(seed)
    members = [sample(fsm, rng, max_steps=8) for _ in range(4)] if not fsm.is_empty() else []
    mutated = [m[:-1] for m in members if m] + [m + "a" for m in members]
    return members + mutated + extra


@settings(FAST, max_examples=700)
@given(regexes, st.lists(texts, max_size=4), st.integers(0, 2**16))
def test_fsm_acceptance_equals_python_fullmatch(pattern, extra, seed):
    """For every supported regex and string: FSM.accepts(s) == bool(re.fullmatch(p, s, re.ASCII)),
    and the NFA, the unminimized DFA, the minimized DFA and the byte DFA all agree."""
    oracle = re.compile(pattern, re.ASCII)
    fsm = compile_regex(pattern)
    nfa = build_nfa(parse_regex(pattern))
    raw = determinize(nfa)
    assert minimize(raw) == fsm.dfa and minimize(fsm.dfa) == fsm.dfa  # canonical, idempotent
    for s in _strings_for(fsm, seed, extra):
        want = oracle.fullmatch(s) is not None
        assert fsm.accepts(s) == want, (pattern, s)
        assert raw.accepts(s) == want, (pattern, s)
        assert nfa.accepts(s) == want, (pattern, s)
        assert fsm.byte_dfa.accepts(s.encode("utf-8")) == want, (pattern, s)


@settings(FAST, max_examples=200)
@given(regexes, st.integers(0, 2**16))
def test_forced_strings_and_compressed_edges_spell_accepted_text(pattern, seed):
    """Following compressed edges spells accepted strings, and every state's forced string is
    the only way forward until a final state or a branch."""
    fsm = compile_regex(pattern)
    rng = random.Random(seed)
    for s in range(fsm.num_states):
        forced = fsm.forced_string(s)
        end = fsm.walk(forced, s)
        assert end >= 0
        for i, ch in enumerate(forced):
            state = fsm.walk(forced[:i], s)
            assert not fsm.is_final(state) and len(fsm.transitions(state)) == 1
        assert fsm.is_final(end) or len(fsm.transitions(end)) != 1 or not fsm.is_forced(end)
    # walk the compressed graph from the initial node to a final node
    by_source: dict[int, list] = {}
    for e in fsm.edges:
        by_source.setdefault(e.source, []).append(e)
    node, text = fsm.initial, ""
    for _ in range(6):
        if fsm.is_final(node) and rng.random() < 0.4 or node not in by_source:
            break
        e = rng.choice(by_source[node])
        lo, hi = rng.choice(e.first)
        text += chr(rng.randint(lo, min(hi, lo + 50))) + e.text
        node = e.target
        assert fsm.walk(text) == node
    if fsm.is_final(node):
        assert re.fullmatch(pattern, text, re.ASCII)


@settings(FAST, max_examples=200)
@given(regexes)
def test_printed_tree_and_serialized_fsm_round_trip(pattern):
    """to_regex(parse(p)) compiles to the same minimal DFA, and fsm_from_dict(fsm_to_dict(f)) == f."""
    fsm = compile_regex(pattern)
    assert compile_regex(to_regex(parse_regex(pattern))).dfa == fsm.dfa
    assert fsm_from_dict(fsm_to_dict(fsm)) == fsm


_FUZZ_ALPHABET = "ab()[]{}|*+?.^$\\-,0189dwsuxNUABZbP<>:=!#é\n "


@settings(FAST, max_examples=500)
@given(st.text(alphabet=_FUZZ_ALPHABET, max_size=10), st.lists(texts, max_size=3))
def test_arbitrary_pattern_text_never_crashes_and_agrees_with_python(pattern, probes):
    """Any string either compiles (and then Python compiles it and agrees), or raises
    InvalidRegexError (and Python rejects it too), UnsupportedRegexError or CompileBudgetError
    (``a{99999}`` is valid but over budget); nothing else."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            oracle = re.compile(pattern, re.ASCII)
        except (re.error, OverflowError, RecursionError):
            oracle = None
    try:
        fsm = compile_regex(pattern)
    except InvalidRegexError:
        assert oracle is None, f"we rejected {pattern!r} but Python accepts it"
        return
    except (UnsupportedRegexError, CompileBudgetError):
        return
    assert oracle is not None, f"we accepted {pattern!r} but Python rejects it"
    for s in probes + ["", "a", "ab"]:
        assert fsm.accepts(s) == (oracle.fullmatch(s) is not None), (pattern, s)


def test_property_suite_errors_are_fsm_errors():
    """The two regex error types share the FSMError base (callers catch one type)."""
    assert issubclass(InvalidRegexError, FSMError) and issubclass(UnsupportedRegexError, FSMError)
