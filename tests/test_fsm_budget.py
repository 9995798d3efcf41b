"""Compile budgets in the FSM library: every stage refuses work over its limit, naming the limit.

The pathological cases are the ones issue #12 saw against the real server; the defaults must
still compile every constraint the tests, samples and benchmarks use (index sizes for those are
checked with the real vocabulary in test_constrained_budget.py).
"""
from __future__ import annotations

import importlib
import threading
import time
import tracemalloc

import pytest

from constrained_cases import CASES
from sglc import fsm
from sglc.fsm import CompileBudget, CompileBudgetError, compile_regex_metered
from sglc.fsm.nfa import build_nfa, nfa_num_states
from sglc.fsm.regex_parser import nesting_depth, parse_regex

DEFAULT = CompileBudget()


def refusal(limit: str, fn, *args, **kwargs) -> CompileBudgetError:
    """Run fn, expecting a CompileBudgetError that names ``limit`` (and its value) in its text."""
    with pytest.raises(CompileBudgetError) as info:
        fn(*args, **kwargs)
    err = info.value
    assert err.limit == limit, str(err)
    assert f"CompileBudget.{limit} = " in str(err)
    return err


def workload_patterns() -> dict[str, str]:
    """Every constraint the tests, samples and benchmarks compile (as regexes)."""
    from bench import constrained_index
    from bench.suite.workloads import json_decode

    patterns = {case.name: case.regex for case in CASES}
    patterns.update({f"bench {k}": v for k, v in constrained_index.PATTERNS.items()})
    for size, spec in json_decode.SIZE.items():
        patterns[f"json_decode {size}"] = json_decode.record_regex(spec[1])
    for name in ("json_extraction", "essay_judge"):
        module = importlib.import_module(f"samples.{name}")
        patterns.update({f"{name}.{k}": getattr(module, k) for k in dir(module) if k.endswith("_REGEX")})
    patterns["any JSON value"] = fsm.regex_from_json_schema({})
    patterns["string maxLength 100"] = fsm.regex_from_json_schema({"type": "string", "maxLength": 100})
    return patterns


# --- the defaults -------------------------------------------------------------------------

def test_default_budget_compiles_every_workload_constraint_with_its_byte_dfa():
    """Tests, samples and benchmarks all compile (FSM and byte DFA) under the default budget."""
    patterns = workload_patterns()
    assert len(patterns) > 30
    for name, pattern in patterns.items():
        meter = DEFAULT.start()
        compile_regex_metered(pattern, meter).build_byte_dfa(meter)


def test_budget_fields_are_validated_and_parse_from_text():
    """Non-positive or non-numeric limits are refused naming the field; parse reads k=v pairs."""
    with pytest.raises(ValueError, match="CompileBudget.max_dfa_states must be a positive number"):
        CompileBudget(max_dfa_states=0)
    with pytest.raises(ValueError, match="max_compile_seconds"):
        CompileBudget(max_compile_seconds=True)
    assert CompileBudget.parse("max_dfa_states=20_000, max_compile_seconds=2.5") == CompileBudget(
        max_dfa_states=20_000, max_compile_seconds=2.5)
    assert CompileBudget.parse("") == DEFAULT
    with pytest.raises(ValueError, match="unknown constraint budget entry 'max_states=3'"):
        CompileBudget.parse("max_states=3")
    with pytest.raises(ValueError, match="is not a number"):
        CompileBudget.parse("max_dfa_states=many")


# --- each stage ---------------------------------------------------------------------------

def test_nested_groups_past_the_depth_limit_are_refused_before_parsing():
    """5,000 nested groups: CompileBudgetError naming max_nesting_depth, not RecursionError."""
    deep = "(" * 5000 + "a" + ")" * 5000
    err = refusal("max_nesting_depth", fsm.compile_regex_metered, deep)
    assert "nested groups 5,000" in str(err)


def test_nesting_at_the_depth_limit_still_parses_from_a_busy_thread():
    """The default depth limit leaves the parser's recursion room, even 200 frames deep."""
    depth = DEFAULT.max_nesting_depth
    pattern = "(" * depth + "a" + ")" * depth
    result: list = []

    def deep_call(n: int) -> None:
        if n:
            return deep_call(n - 1)
        try:
            result.append(compile_regex_metered(pattern).accepts("a"))
        except BaseException as err:  # noqa: BLE001 - reported by the assert below
            result.append(err)

    thread = threading.Thread(target=deep_call, args=(200,))
    thread.start()
    thread.join()
    assert result == [True]


def test_nesting_depth_skips_escapes_and_character_classes():
    """Only real groups count: escaped parentheses and those inside classes do not."""
    assert nesting_depth(r"(a(b)\(\(\([(((](c))") == 2
    assert nesting_depth("[]()]((x))") == 2
    assert nesting_depth("") == 0


def test_long_patterns_are_refused_before_parsing():
    """A pattern longer than max_pattern_chars is refused by its length alone."""
    refusal("max_pattern_chars", compile_regex_metered, "a" * 101, CompileBudget(max_pattern_chars=100).start())


@pytest.mark.parametrize("pattern", ["a", "ab|c", "(ab){2,5}", "x{0,3}y+z?", "[^a]{3,}", "(a|b)*a(a|b){3}", "(?:)", "a{0}"])
def test_nfa_state_count_is_computed_exactly_without_building(pattern):
    """nfa_num_states(tree) equals the states build_nfa creates (the check must not lie)."""
    tree = parse_regex(pattern)
    assert nfa_num_states(tree) == build_nfa(tree).num_states


def test_huge_bounded_repeat_is_refused_before_expansion():
    """[\\s\\S]{0,100000}: refused on the NFA count; nothing is expanded, so it is instant."""
    started = time.monotonic()
    err = refusal("max_nfa_states", compile_regex_metered, r"[\s\S]{0,100000}")
    assert "NFA states 200,00" in str(err)
    assert time.monotonic() - started < 2.0  # generous: the refusal costs a tree walk


def test_exponential_dfa_is_refused_at_the_state_limit():
    """(a|b)*a(a|b){25} (2^26 DFA states) stops at max_dfa_states instead of exhausting memory."""
    err = refusal("max_dfa_states", compile_regex_metered, "(a|b)*a(a|b){25}")
    assert f"DFA states {DEFAULT.max_dfa_states + 1:,}" in str(err)


def test_subset_construction_memory_is_bounded():
    """(?:a?){2000}: few DFA states but huge subsets; refused on max_subset_states."""
    refusal("max_subset_states", compile_regex_metered, "(?:a?){2000}")


def test_wide_alphabets_count_cells_not_just_states():
    """Many alphabet classes x states is refused on max_dfa_cells even with few states."""
    distinct = "".join(chr(0x4E00 + 2 * i) for i in range(500))  # 500 separate code points
    budget = CompileBudget(max_dfa_cells=20_000)
    refusal("max_dfa_cells", compile_regex_metered, f"[{distinct}]{{0,30}}", budget.start())


def test_byte_dfa_states_are_counted_as_they_are_made():
    """A pattern whose UTF-8 expansion is large is refused on max_byte_states."""
    f = compile_regex_metered(r"[\s\S]{0,1000}")
    assert f.num_states == 1001
    refusal("max_byte_states", f.build_byte_dfa, CompileBudget(max_byte_states=2000).start())


def test_time_budget_stops_a_compile_at_the_next_checkpoint():
    """A spent wall-clock budget raises naming max_compile_seconds and the stage it was in."""
    meter = CompileBudget(max_compile_seconds=1e-6).start()
    time.sleep(0.01)
    err = refusal("max_compile_seconds", compile_regex_metered, "(ab|cd)*e", meter)
    assert "while " in str(err)


# --- the token index ----------------------------------------------------------------------

def small_vocab() -> fsm.Vocabulary:
    """Every single byte a token, plus some two-byte ones; token 0 is EOS."""
    tokens = [None] + [bytes([b]) for b in range(1, 256)] + [bytes([a, b]) for a in b"abc" for b in b"abc"]
    return fsm.Vocabulary(tokens, eos_token_ids=[0])


def test_index_cells_are_checked_before_the_walk():
    """byte states x vocabulary size over max_index_cells is refused before any token is walked."""
    f = compile_regex_metered("[a-c]{0,40}")  # 41 byte states x 265 tokens = 10,865 cells
    err = refusal("max_index_cells", fsm.TokenIndex, f, small_vocab(), CompileBudget(max_index_cells=10_000).start())
    assert "41 byte states x 265 tokens" in str(err)


def test_index_transitions_are_counted_while_building():
    """An index that would hold more (state, token) pairs than max_index_transitions stops."""
    f = compile_regex_metered("[a-c]{0,40}")
    index = fsm.TokenIndex(f, small_vocab())
    assert index.num_transitions > 400
    refusal("max_index_transitions", fsm.TokenIndex, f, small_vocab(),
            CompileBudget(max_index_transitions=400).start())


def test_index_round_trips_through_flat_arrays():
    """to_arrays / from_arrays rebuild an index with the same entries (what a worker ships)."""
    vocab = small_vocab()
    f = compile_regex_metered("(ab|c)+a?")
    index = fsm.TokenIndex(f, vocab)
    again = fsm.TokenIndex.from_arrays(fsm.FSM(f.dfa, f.pattern, index.byte_dfa), vocab, index.to_arrays())
    assert again.states().keys() == index.states().keys()
    for state, (ids, nexts) in index.states().items():
        assert again.entry(state)[0].tolist() == ids.tolist()
        assert again.entry(state)[1].tolist() == nexts.tolist()
    assert again.num_transitions == index.num_transitions and again.nbytes > 0


# --- JSON schemas -------------------------------------------------------------------------

def test_deeply_nested_schema_is_refused_naming_the_depth_limit():
    """A schema nested 5,000 levels (built without recursion) is refused, not a RecursionError."""
    schema: dict = {"type": "integer"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    refusal("max_nesting_depth", fsm.regex_from_json_schema, schema)


def test_ref_fan_out_is_refused_while_the_regex_grows():
    """Each definition using the previous one twice doubles the regex: stopped at max_pattern_chars."""
    defs = {"d0": {"type": "integer"}}
    for i in range(1, 40):
        defs[f"d{i}"] = {"type": "array", "prefixItems": [{"$ref": f"#/$defs/d{i-1}"}] * 2, "items": False}
    started = time.monotonic()
    refusal("max_pattern_chars", fsm.regex_from_json_schema, {"$defs": defs, "$ref": "#/$defs/d39"})
    assert time.monotonic() - started < 10.0  # generous: 2^39 copies would never finish


def test_long_string_schema_is_refused():
    """{"type": "string", "maxLength": 1000} (1.2 GB and 14 s before) is refused on a DFA limit."""
    started = time.monotonic()
    err = refusal("max_dfa_states", fsm.compile_json_schema, {"type": "string", "maxLength": 1000},
                  meter=DEFAULT.start())
    assert time.monotonic() - started < 10.0
    assert "DFA states" in str(err)


# --- serialized FSMs ----------------------------------------------------------------------

def serialized(**changes) -> dict:
    data = fsm.fsm_to_dict(fsm.compile_regex("ab|c"))
    data.update(changes)
    return data


def test_serialized_fsm_dimensions_are_checked_before_allocation():
    """num_classes = 10**7 in a 150-byte dict is refused with next to no memory allocated."""
    data = serialized(num_states=1000, num_classes=10**7)
    tracemalloc.start()
    try:
        refusal("max_dfa_cells", fsm.fsm_from_dict, data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    refusal("max_dfa_states", fsm.fsm_from_dict, serialized(num_states=10**6, num_classes=1))


def test_serialized_fsm_lists_longer_than_its_dimensions_are_malformed():
    """More transitions than states x classes can hold is a format error, found before parsing them."""
    with pytest.raises(fsm.FSMFormatError, match="transitions has 39 entries; at most 36 fit 3 states x 4 classes"):
        fsm.fsm_from_dict(serialized(transitions=[0, 0, 1] * 13))
    with pytest.raises(fsm.FSMFormatError, match="bad num_states 0 / num_classes 4"):
        fsm.fsm_from_dict(serialized(num_states=0))


def test_fsm_errors_pickle_as_themselves():
    """Errors cross the compile worker's process boundary with their type and fields."""
    import pickle

    errors = [fsm.InvalidRegexError("missing )", "(a", 0), fsm.UnsupportedRegexError("lookahead (?=...)", "a(?=b)", 1),
              fsm.UnsupportedSchemaError("if", "#/if", "detail"), fsm.InvalidSchemaError("bad", "#/x"),
              fsm.IncompatibleVocabularyError(3, ["a", "b"], "ab"), fsm.EmptyLanguageError("none"),
              CompileBudgetError("max_dfa_states", 10, "DFA states 11"),
              CompileBudgetError("worker_memory_bytes", 2**30, "memory", owner="ConstraintCompilerConfig")]
    for err in errors:
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err) and vars(again) == vars(err)
