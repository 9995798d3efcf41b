"""Runtime constrained decoding without the model: specs, grammar cache, states, jump-forward.

Uses the real SmolLM2 tokenizer (hence the model marker: it needs the converted model folder),
but no forward pass; the engine-level tests live in test_constrained_engine.py.
"""
from __future__ import annotations

import json
import random
import re

import numpy as np
import pydantic
import pytest

from sglc import fsm
from sglc_runtime.constrained import ConstraintSpec, GrammarCache, plan_jump, vocabulary_for


class Point(pydantic.BaseModel):
    x: int
    y: int


# --- ConstraintSpec (no tokenizer) --------------------------------------------------------

def test_spec_of_nothing_is_none_and_of_two_constraints_is_an_error():
    """No constraint gives None; two at once are refused with both names."""
    assert ConstraintSpec.of() is None
    with pytest.raises(ValueError, match="at most one constraint, got regex, json_schema"):
        ConstraintSpec.of(regex="a", json_schema={"type": "integer"})


def test_equal_json_schemas_given_differently_have_one_key():
    """A pydantic model, its schema dict and its JSON text are the same constraint."""
    schema = Point.model_json_schema()
    keys = {ConstraintSpec.of(json_schema=s).key for s in (Point, schema, json.dumps(schema))}
    assert len(keys) == 1


def test_spec_type_errors_name_the_argument():
    """Wrong argument types raise TypeError naming the argument; bad JSON raises ValueError."""
    with pytest.raises(TypeError, match="regex must be a str"):
        ConstraintSpec.of(regex=3)
    with pytest.raises(TypeError, match="fsm must be the dict"):
        ConstraintSpec.of(fsm="abc")
    with pytest.raises(ValueError, match="json_schema is not valid JSON"):
        ConstraintSpec.of(json_schema="{nope")


def test_spec_compile_matches_the_fsm_library():
    """Each kind compiles to the FSM the library gives for the same constraint."""
    assert ConstraintSpec.of(regex=r"\d+").compile() == fsm.compile_regex(r"\d+")
    assert ConstraintSpec.of(choices=["a", "b.c"]).compile() == fsm.compile_choices(["a", "b.c"])
    d = fsm.fsm_to_dict(fsm.compile_regex("x[yz]+"))
    assert ConstraintSpec.of(fsm=d).compile() == fsm.compile_regex("x[yz]+")


def test_sampling_params_take_one_constraint_and_check_it_at_construction():
    """regex / json_schema / fsm: one at most, typed; min_new_tokens cannot be combined with one."""
    from sglc_runtime.sampling.sampling_params import SamplingParams

    assert SamplingParams(regex=r"\d+").constraint_spec() == ConstraintSpec.of(regex=r"\d+")
    assert SamplingParams().constraint_spec() is None and SamplingParams().jump_forward is True
    with pytest.raises(ValueError, match="at most one constraint"):
        SamplingParams(regex="a", fsm=fsm.fsm_to_dict(fsm.compile_regex("a")))
    with pytest.raises(TypeError, match="regex must be a str"):
        SamplingParams(regex=5)
    with pytest.raises(ValueError, match="min_new_tokens must be 0 with a constraint"):
        SamplingParams(json_schema=Point, min_new_tokens=2)
    with pytest.raises(TypeError, match="jump_forward must be a bool"):
        SamplingParams(regex="a", jump_forward="yes")


# --- with the real tokenizer ----------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    from sglc_runtime.model.default_model import resolve_model_path
    from sglc_runtime.model.tokenizer import Tokenizer

    return Tokenizer(resolve_model_path(None))


@pytest.fixture(scope="module")
def cache(tokenizer):
    return GrammarCache(tokenizer)


def text_of(tokenizer, ids) -> str:
    return b"".join(tokenizer.token_bytes(i) for i in ids).decode("utf-8")


@pytest.mark.model
def test_vocabulary_is_built_once_per_tokenizer(tokenizer, cache):
    """vocabulary_for returns the same object for one tokenizer; EOS is the stop token."""
    assert vocabulary_for(tokenizer) is cache.vocab is GrammarCache(tokenizer).vocab
    assert cache.vocab.eos_token_ids == tuple(sorted(tokenizer.stop_token_ids))


@pytest.mark.model
def test_invalid_and_unsupported_regexes_raise_value_errors_naming_the_problem(cache):
    """Bad patterns fail at get() with the FSM library's ValueErrors (SGLang #1521 crashed)."""
    with pytest.raises(fsm.InvalidRegexError, match="position"):
        cache.get(ConstraintSpec.of(regex="(ab"))
    with pytest.raises(fsm.UnsupportedRegexError, match="lookahead"):
        cache.get(ConstraintSpec.of(regex="a(?=b)"))
    with pytest.raises(fsm.EmptyLanguageError):
        cache.get(ConstraintSpec.of(regex=r"[^\x00-\U0010ffff]"))


@pytest.mark.model
def test_a_regex_and_the_compilers_fsm_dict_share_one_grammar(cache):
    """Second request: a cache hit; the same language in another form: the same grammar."""
    pattern = r"(yes|no)-\d{2}"
    first = cache.get(ConstraintSpec.of(regex=pattern))
    hits = cache.num_hits
    assert cache.get(ConstraintSpec.of(regex=pattern)) is first and cache.num_hits == hits + 1
    compiled_dict = fsm.fsm_to_dict(fsm.compile_regex(pattern))
    assert cache.get(ConstraintSpec.of(fsm=compiled_dict)) is first


@pytest.mark.model
def test_mask_allows_eos_only_in_final_states_and_terminal_states_finish(cache, tokenizer):
    """EOS is masked out until the match is complete; a state with nothing after it is finished."""
    eos = next(iter(tokenizer.stop_token_ids))
    state = cache.get(ConstraintSpec.of(regex="ab(c)?")).new_cursor()
    assert not state.allowed_mask()[eos] and not state.is_finished()
    for t in tokenizer.encode("ab", add_special_tokens=False):
        state.advance(t)
    mask = state.allowed_mask()
    assert mask[eos] and state.can_finish() and not state.is_finished()
    assert set(np.flatnonzero(mask.numpy()).tolist()) == set(state.grammar.index.allowed_token_ids(state.state).tolist())
    state.advance(tokenizer.encode("c", add_special_tokens=False)[0])
    assert state.is_finished() and state.allowed_mask().sum() == 1


@pytest.mark.model
def test_a_refused_token_raises_and_replace_tail_is_atomic(cache, tokenizer):
    """advance() refuses a disallowed token; a failed replace_tail leaves the state as it was."""
    state = cache.get(ConstraintSpec.of(regex=r"\d{3}")).new_cursor()
    with pytest.raises(fsm.ConstraintViolationError):
        state.advance(tokenizer.encode("x", add_special_tokens=False)[0])
    one = tokenizer.encode("1", add_special_tokens=False)
    state.advance(one[0])
    before = state.state
    with pytest.raises(fsm.ConstraintViolationError):
        state.replace_tail(1, one + tokenizer.encode("x", add_special_tokens=False))
    assert state.state == before and state.num_tokens == 1


@pytest.mark.model
def test_jump_bytes_stop_before_a_character_that_is_still_undecided(cache):
    """'x' then é or è: the forced bytes reach into the shared lead byte; the jump stops before it."""
    state = cache.get(ConstraintSpec.of(regex="x(é|è)")).new_cursor()
    assert state.cursor.forced_bytes() == b"x\xc3"
    assert state.jump_bytes() == b"x"


@pytest.mark.model
def test_jump_completes_a_character_the_last_token_split(cache, tokenizer):
    """After a token holding only the first byte of 日, the jump completes it and goes on."""
    state = cache.get(ConstraintSpec.of(regex="日本語-[0-9]")).new_cursor()
    first_byte = "日".encode()[:1]
    split = next(i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) == first_byte)
    state.advance(split)
    plan = plan_jump(state, [split], tokenizer)
    assert plan is not None and plan.start == 0
    assert text_of(tokenizer, plan.apply_to([split])) == "日本語-"
    assert plan.state.num_tokens == len(plan.token_ids)


@pytest.mark.model
def test_jump_from_the_start_uses_the_tokenizers_own_tokens(cache, tokenizer):
    """The forced JSON opening is spelled exactly as tokenizer.encode spells it."""
    state = cache.get(ConstraintSpec.of(json_schema=Point)).new_cursor()
    plan = plan_jump(state, [], tokenizer)
    assert plan.forced == b'{"x": '
    assert plan.token_ids == tokenizer.encode('{"x": ', add_special_tokens=False)


@pytest.mark.model
def test_jump_retokenizes_the_boundary_and_keeps_earlier_tokens(cache, tokenizer):
    """A sampled closing quote merges with the forced ', "y": ' as the tokenizer would merge it."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    state = cache.get(ConstraintSpec.of(json_schema=schema)).new_cursor()
    out = tokenizer.encode('{"a": "hello', add_special_tokens=False)
    out += tokenizer.encode('"', add_special_tokens=False)  # sampled alone: not how BPE spells it
    for t in out:
        state.advance(t)
    plan = plan_jump(state, out, tokenizer)
    new = plan.apply_to(out)
    assert text_of(tokenizer, new) == '{"a": "hello", "b": '
    assert new[: plan.start] == out[: plan.start] and plan.start >= len(out) - 2
    window = max(len(out) - 2, 0)
    assert new[window:] == tokenizer.encode(text_of(tokenizer, new[window:]), add_special_tokens=False)


@pytest.mark.model
def test_a_jump_that_only_merges_into_the_last_token_is_still_made(cache, tokenizer):
    """A sampled ' ' before the forced 'ok' becomes the single token ' ok': no extra token, but
    the text grows, so the jump is made (and with a tight max_new_tokens too)."""
    state = cache.get(ConstraintSpec.of(regex="[a-z] ok")).new_cursor()
    out = tokenizer.encode("a", add_special_tokens=False) + tokenizer.encode(" ", add_special_tokens=False)
    for t in out:
        state.advance(t)
    for cap in (None, len(out)):
        plan = plan_jump(state, out, tokenizer, max_new_tokens=cap)
        assert plan is not None and plan.start == len(out) - 1
        assert text_of(tokenizer, plan.apply_to(out)) == "a ok" and len(plan.apply_to(out)) == len(out)


@pytest.mark.model
def test_jump_respects_max_new_tokens(cache, tokenizer):
    """With a cap the new tail is cut to fit; with no room to progress there is no jump."""
    state = cache.get(ConstraintSpec.of(regex="The answer is [0-9]")).new_cursor()
    full = plan_jump(state, [], tokenizer)
    assert len(full.token_ids) > 2
    cut = plan_jump(state, [], tokenizer, max_new_tokens=2)
    assert cut.token_ids == full.token_ids[:2] and cut.state.num_tokens == 2
    assert plan_jump(state, [], tokenizer, max_new_tokens=0) is None


PATTERNS = [
    r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    r"[a-z0-9._]{1,12}@[a-z]{2,8}\.(com|org|net)",
    "(café|naïve|日本語)-[0-9]{2}",
    "a(bc)*d?",
    r'\{"name": "[A-Za-z ]{1,12}", "tags": \["[a-z]{1,5}"(, "[a-z]{1,5}"){0,2}\]\}',
    "(é|è|ê)+x",
]


@pytest.mark.model
@pytest.mark.parametrize("pattern", PATTERNS)
def test_random_token_walks_with_jumps_always_fullmatch(cache, tokenizer, pattern):
    """Random allowed tokens plus jump-forward after every step: the text always fullmatches."""
    grammar = cache.get(ConstraintSpec.of(regex=pattern))
    eos = set(tokenizer.stop_token_ids)
    rng = random.Random(7)
    for trial in range(30):
        state, out = grammar.new_cursor(), []
        for _ in range(200):
            if trial % 2 == 0:  # half the walks jump whenever they can
                plan = plan_jump(state, out, tokenizer)
                if plan is not None:
                    out, state = plan.apply_to(out), plan.state
                    assert state.num_tokens == len(out)
            if state.is_finished():
                break
            allowed = state.grammar.index.allowed_token_ids(state.state).tolist()
            if state.can_finish() and rng.random() < 0.3:
                break
            tok = rng.choice([t for t in allowed if t not in eos] or allowed)
            if tok in eos:
                break
            state.advance(tok)
            out.append(tok)
        text = text_of(tokenizer, out)
        assert re.fullmatch(pattern, text), (pattern, text)
