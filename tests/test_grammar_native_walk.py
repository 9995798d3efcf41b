"""The grammar's native code gives exactly what its Python versions give: the C++ automaton
build (sglc/grammar/native/automaton_build.cpp: determinize, trim, minimize, assemble, analyse)
the same automaton, and the C++ token walk (native/token_walk.cpp) with the C++ context check
(native/context_check.cpp) the same token classes (accepted bits per position and the
context-dependent groups left after pruning), on every engine test grammar and fixture over
SmolLM2's vocabulary and on a tiny vocabulary; both builds and both walks stop at their budgets
naming the same limits and refuse the same grammars; with SGLC_NATIVE_OPS=0 Python runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sglc.fsm import CompileBudgetError, Vocabulary
from sglc.grammar import EngineBudget, compile_grammar, parse_gbnf, parse_lark
from sglc.grammar.automaton import build_automaton
from sglc.grammar.automaton_budget import EngineMeter
from sglc.grammar.automaton_native import native_builder
from sglc.grammar.context_check_native import native_context_check
from sglc.grammar.token_masks import classify_tokens
from sglc.grammar.token_walk_native import native_walker, walk_tokens
from test_grammar_engine_cases import GRAMMARS, sexpr_grammar, smollm2_vocab

FIXTURES = Path(__file__).parent / "fixtures" / "grammars"

# NOTE: where a compiler exists the native code must build: a failed build fails these tests
# (it would only log a warning and fall back to numpy in the engine).
pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler here")


def _fixture(name: str):
    text = (FIXTURES / name).read_text()
    return parse_lark(text) if name.endswith(".lark") else parse_gbnf(text)


def _assert_same_classes(grammar, vocab):
    assert native_walker() is not None, "native/token_walk.cpp did not build (see the log)"
    assert native_context_check() is not None, "native/context_check.cpp did not build (see the log)"
    auto = build_automaton(grammar)
    native = classify_tokens(auto, vocab, EngineMeter(), native=True)
    numpy = classify_tokens(auto, vocab, EngineMeter(), native=False)
    for field in ("position_of", "accepted", "group_offsets", "group_node", "token_offsets", "group_tokens"):
        a, b = getattr(native, field), getattr(numpy, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert native.suffixes == numpy.suffixes
    return native


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_the_native_walk_gives_the_numpy_classes(name):
    classes = _assert_same_classes(GRAMMARS[name](), smollm2_vocab())
    assert classes.accepted.any()


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.iterdir()))
def test_the_native_walk_gives_the_numpy_classes_on_the_fixtures(fixture):
    _assert_same_classes(_fixture(fixture), smollm2_vocab())


AUTOMATON_FIELDS = ("rule_start", "node_rule", "table", "final", "ref_offsets", "ref_callee", "ref_return",
                    "nullable", "follow")


@pytest.mark.parametrize("name", sorted(GRAMMARS) + sorted(p.name for p in FIXTURES.iterdir()))
def test_the_native_build_gives_the_python_automaton(name):
    assert native_builder() is not None, "native/automaton_build.cpp did not build (see the log)"
    grammar = GRAMMARS[name]() if name in GRAMMARS else _fixture(name)
    native = build_automaton(grammar, native=True)
    python = build_automaton(grammar, native=False)
    assert native.rule_names == python.rule_names and native.root == python.root
    for field in AUTOMATON_FIELDS:
        a, b = getattr(native, field), getattr(python, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field


def test_both_builds_drop_rules_that_match_nothing_and_refuse_an_empty_root():
    from sglc.fsm.errors import EmptyLanguageError

    grammar = parse_gbnf('root ::= "a" | "b" dead\ndead ::= "x" dead')
    native, python = build_automaton(grammar, native=True), build_automaton(grammar, native=False)
    assert native.rule_names == python.rule_names == ("root",)
    for field in AUTOMATON_FIELDS:
        assert np.array_equal(getattr(native, field), getattr(python, field)), field
    for native in (True, False):
        with pytest.raises(EmptyLanguageError, match="root"):
            build_automaton(parse_gbnf('root ::= "a" root'), native=native)


def test_both_builds_refuse_left_recursion_naming_the_cycle():
    from sglc.grammar.left_recursion import LeftRecursionError

    grammar = parse_gbnf('root ::= a\na ::= b "x" | "y"\nb ::= a "z" | "w"')
    cycles = []
    for native in (True, False):
        with pytest.raises(LeftRecursionError) as err:
            build_automaton(grammar, native=native)
        cycles.append(err.value.cycle)
    assert cycles[0] == cycles[1] and cycles[0][0] == cycles[0][-1]


# NOTE: "a" then eight more of [ab] from the end: a 40-node NFA, a 512-node DFA (subset blow-up)
BLOWUP = 'root ::= [ab]* "a" [ab] [ab] [ab] [ab] [ab] [ab] [ab] [ab]'


def test_both_builds_stop_at_the_dfa_node_limit_naming_it():
    for native in (True, False):
        with pytest.raises(CompileBudgetError) as err:
            build_automaton(parse_gbnf(BLOWUP), EngineMeter(EngineBudget(max_automaton_nodes=200)), native=native)
        assert err.value.limit == "max_automaton_nodes" and "automaton nodes 201" in str(err.value)
    assert build_automaton(parse_gbnf(BLOWUP), native=True).num_nodes == 512


@pytest.mark.parametrize("max_nodes,seconds,status", [(200, 60.0, 1), (10**6, 0.0, 2)])
def test_the_native_build_stops_at_each_limit_and_says_which(max_nodes, seconds, status):
    """Nodes and the clock: the build stops at the first passed and reports it
    (build_automaton turns that into the meter's named error)."""
    from sglc.grammar.automaton_native import build_rules
    from sglc.grammar.rule_automaton import GrammarNFA

    nfa = GrammarNFA(parse_gbnf(BLOWUP), ["root"])
    ends = [nfa.add_rule("root")]
    built, got, value = build_rules(native_builder(), nfa, ends, max_nodes, seconds)
    assert built is None and got == status
    if status == 1:
        assert value == max_nodes + 1


def test_a_tiny_vocabulary_with_duplicates_and_context_dependent_tokens():
    words = [b"(", b")", b"()", b"(()", b"))", b"a", b"a)", b"(a", b" ", b"a a", b"()", b")("]
    vocab = Vocabulary(words + [b"</s>"], eos_token_ids=[len(words)])
    classes = _assert_same_classes(sexpr_grammar(), vocab)
    assert classes.num_context_tokens > 0


def test_context_entries_over_budget_stop_both_walks_naming_the_limit():
    auto = build_automaton(_fixture("json.gbnf"))
    for native in (True, False):
        with pytest.raises(CompileBudgetError) as err:
            classify_tokens(auto, smollm2_vocab(), EngineMeter(EngineBudget(max_context_entries=5)), native=native)
        assert err.value.limit == "max_context_entries"


@pytest.mark.parametrize("limits,status", [((1000, 10**9, 60.0), 1), ((10**12, 5, 60.0), 2), ((10**12, 10**9, 0.0), 3)])
def test_the_walk_stops_at_each_limit_and_says_which(limits, status):
    """Steps, context-dependent entries and the clock: the walk stops at the first passed and
    reports it (classify_tokens turns that into the meter's named error)."""
    from sglc.grammar.token_masks import _preorder

    vocab = smollm2_vocab()
    auto = build_automaton(_fixture("json.gbnf"))
    pre = _preorder(vocab)
    positions = np.flatnonzero(auto.has_bytes).astype(np.int64)
    _, _, got, value = walk_tokens(native_walker(), auto, pre.walk_arrays, int(pre.depth.max()), positions,
                                   vocab.size, *limits)
    assert got == status
    if status in (1, 2):
        assert value > limits[status - 1]


def test_native_ops_off_runs_the_numpy_walk():
    code = ("from sglc.grammar.token_walk_native import native_walker, walk_tokens; "
            "from sglc.grammar import compile_grammar, parse_gbnf; from sglc.fsm import Vocabulary; "
            "v = Vocabulary([b'a', b'b', b'ab']); c = compile_grammar(parse_gbnf('root ::= (\"a\" | \"b\")+'), v); "
            "print(native_walker() is None, c.classes.accepted.tolist())")
    env = dict(os.environ, SGLC_NATIVE_OPS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    off, accepted = out.stdout.strip().split(" ", 1)
    assert off == "True"
    v = Vocabulary([b"a", b"b", b"ab"])
    assert accepted == str(compile_grammar(parse_gbnf('root ::= ("a" | "b")+'), v).classes.accepted.tolist())


def _random_gbnf(rng, names: list[str], depth: int = 0) -> str:
    """A random expression over a few bytes, classes (multi-byte ones too), the rules in
    ``names``, sequences, choices and repeats."""
    k = rng.random()
    if depth > 3 or k < 0.3:
        c = rng.random()
        if c < 0.4:
            return '"' + "".join(rng.choice("ab(),x") for _ in range(rng.randint(0, 3))) + '"'
        if c < 0.6:
            return rng.choice(["[a-c]", "[^a]", "[\\u00e0-\\u00ff]", "[0-9]", "[a\\u4e00-\\u4e05]"])
        return rng.choice(names)
    if k < 0.55:
        return "(" + " ".join(_random_gbnf(rng, names, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
    if k < 0.8:
        return "(" + " | ".join(_random_gbnf(rng, names, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
    return "(" + _random_gbnf(rng, names, depth + 1) + ")" + rng.choice(["*", "+", "?", "{2}", "{1,3}"])


def _build_outcome(grammar, native: bool, max_nodes: int):
    try:
        auto = build_automaton(grammar, EngineMeter(EngineBudget(max_automaton_nodes=max_nodes)), native=native)
    except Exception as err:  # noqa: BLE001 - the two builds must fail alike, naming the same thing
        return ("error", type(err).__name__, str(err))
    return ("built", auto.rule_names, [(getattr(auto, f).dtype, getattr(auto, f).tolist()) for f in AUTOMATON_FIELDS])


@pytest.mark.parametrize("seed,max_nodes", [(1, 3000), (2, 40)])
def test_both_builds_agree_on_random_grammars(seed, max_nodes):
    """300 random grammars (recursion, left recursion, empty languages, bounded repeats, and with
    40 nodes the budget stop): the same automaton or the same error from both builds. (Runs of
    2,000 found the Python minimization's early stop on an all-final rule: the next test.)"""
    import random

    rng = random.Random(seed)
    seen: dict[str, int] = {}
    for _ in range(300):
        names = ["root"] + [f"r{j}" for j in range(rng.randint(0, 3))]
        text = "\n".join(f"{name} ::= {_random_gbnf(rng, names)}" for name in names)
        grammar = parse_gbnf(text)
        native, python = _build_outcome(grammar, True, max_nodes), _build_outcome(grammar, False, max_nodes)
        assert native == python, text
        kind = native[0] if native[0] == "built" else native[1]
        seen[kind] = seen.get(kind, 0) + 1
    assert seen.get("built", 0) > 50 and seen.get("EmptyLanguageError", 0) > 10, seen
    if max_nodes == 40:
        assert seen.get("GrammarBudgetError", 0) > 50, seen
    else:
        assert seen.get("LeftRecursionError", 0) > 10, seen


def test_a_bounded_repeat_of_final_nodes_keeps_its_bound():
    """Every node of ``"x"{1,3} | ""`` is final: minimization must still tell them apart."""
    grammar = parse_gbnf('root ::= "x"{1,3} | ""')
    for native in (True, False):
        auto = build_automaton(grammar, native=native)
        node, taken = int(auto.rule_start[0]), 0
        while auto.table[node, ord("x")] >= 0 and taken < 10:  # NOTE: x* would loop for ever
            node, taken = int(auto.table[node, ord("x")]), taken + 1
        assert taken == 3 and auto.num_nodes == 4, native
