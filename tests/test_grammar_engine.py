"""The token-level grammar engine (sglc.grammar: automaton, token classes, matcher) against
independent oracles: lark's Earley parser on the same grammar (accept/reject of texts), json.loads,
and xgrammar 0.2.8's token masks on the real SmolLM2 vocabulary (every state reached while
sampling). Grammars and helpers: tests/test_grammar_engine_cases.py."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from sglc.fsm import CompileBudgetError, ConstraintViolationError, EmptyLanguageError, Vocabulary
from sglc.grammar import EngineBudget, GrammarMatcher, LeftRecursionError, compile_grammar
from sglc.grammar.ir import Grammar
from test_grammar_engine_cases import (
    GRAMMARS, A, C, L, R, S, decode, json_grammar, lark_accepts, lark_parser, opt, plus, sample_tokens, sexpr_grammar,
    smollm2_vocab, star, xgrammar_compiler, xgrammar_mask,
)

#: Sampled outputs per grammar (temperature 1 over random logits, then the shortest completion).
SAMPLES = 200
#: Of which compared with xgrammar at every state (its masks cost up to ~20 ms a state here:
#: on these EBNF grammars many of its tokens are context-dependent).
XGRAMMAR_SAMPLES = 15
#: Grammar files of the front ends' fixtures (llama.cpp's GBNF, lark) compared the same way.
FIXTURES = ["json.gbnf", "arithmetic.gbnf", "chess.gbnf", "list.gbnf", "arithmetic.lark"]


def _tiny_vocab(tokens: list[bytes]) -> Vocabulary:
    """``tokens`` plus every single byte, EOS last."""
    allb = list(dict.fromkeys(list(tokens) + [bytes([b]) for b in range(256)]))
    return Vocabulary(allb + [b"<eos>"], eos_token_ids=[len(allb)])


def _accepts(compiled, data: bytes) -> bool:
    m = GrammarMatcher(compiled)
    try:
        m.advance_bytes(data)
    except ConstraintViolationError:
        return False
    return m.can_finish()


@pytest.fixture(scope="module")
def smol():
    return smollm2_vocab()


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_sampled_outputs_parse_and_masks_equal_xgrammar(name, smol):
    """Every sampled output parses with lark (and json.loads for JSON), and at every state
    reached in the first XGRAMMAR_SAMPLES runs our mask equals xgrammar's on the same grammar
    and vocabulary (EOS included; the vocabulary's special tokens are None for both)."""
    xgrammar = pytest.importorskip("xgrammar")
    grammar = GRAMMARS[name]()
    compiled = compile_grammar(grammar, smol)
    xcompiled = xgrammar_compiler(smol).compile_grammar(xgrammar.Grammar.from_ebnf(grammar.to_ebnf()))
    parser = lark_parser(grammar)
    rng = np.random.default_rng(27)
    num_states = 0
    for run in range(SAMPLES):
        xm = xgrammar.GrammarMatcher(xcompiled)
        taken: list[int] = []

        def check(m, tokens):
            nonlocal num_states
            # Mirror the tokens taken since the last check into xgrammar, then compare masks.
            for t in tokens[len(taken):]:
                assert xm.accept_token(t), f"xgrammar refused token {t} ({smol.token_bytes(t)!r}) we allowed"
                taken.append(t)
            ours, theirs = m.mask(), xgrammar_mask(xm, smol.size)
            if not np.array_equal(ours, theirs):
                diff = np.flatnonzero(ours != theirs)[:5].tolist()
                pytest.fail(f"{name}: masks differ after {decode(smol, taken)!r} on tokens "
                            f"{[(t, smol.token_bytes(t), bool(ours[t])) for t in diff]}")
            num_states += 1

        tokens = sample_tokens(compiled, rng, free_steps=int(rng.integers(1, 30)),
                               on_step=check if run < XGRAMMAR_SAMPLES else None)
        text = decode(smol, tokens).decode("utf-8")
        assert lark_accepts(parser, text), f"{name}: lark rejects sampled output {text!r}"
        if name == "json":
            json.loads(text)
    assert num_states >= XGRAMMAR_SAMPLES


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_grammars_masks_equal_xgrammar(fixture, smol):
    """llama.cpp's GBNF files and a lark grammar, through the front ends: at every state of a few
    sampled runs our mask equals xgrammar's on the printed grammar."""
    xgrammar = pytest.importorskip("xgrammar")
    from pathlib import Path

    from sglc.grammar import parse_gbnf, parse_lark

    text = (Path(__file__).parent / "fixtures" / "grammars" / fixture).read_text()
    grammar = parse_lark(text) if fixture.endswith(".lark") else parse_gbnf(text)
    compiled = compile_grammar(grammar, smol)
    xcompiled = xgrammar_compiler(smol).compile_grammar(
        xgrammar.Grammar.from_ebnf(grammar.to_ebnf(), root_rule_name=grammar.root))
    rng = np.random.default_rng(3)
    for _ in range(6):
        xm = xgrammar.GrammarMatcher(xcompiled)
        taken: list[int] = []

        def check(m, tokens):
            for t in tokens[len(taken):]:
                assert xm.accept_token(t), f"xgrammar refused token {t} ({smol.token_bytes(t)!r})"
                taken.append(t)
            ours, theirs = m.mask(), xgrammar_mask(xm, smol.size)
            assert np.array_equal(ours, theirs), \
                f"{fixture}: masks differ after {decode(smol, taken)!r} on {np.flatnonzero(ours != theirs)[:5].tolist()}"

        sample_tokens(compiled, rng, free_steps=int(rng.integers(1, 25)), on_step=check)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_accepts_exactly_what_lark_accepts(name, smol):
    """Texts near the language (sampled outputs mutated, cut, extended) and random strings over
    the grammar's characters: the engine accepts a text iff lark's Earley parser does."""
    grammar = GRAMMARS[name]()
    compiled = compile_grammar(grammar, smol)
    parser = lark_parser(grammar)
    rng = np.random.default_rng(7)
    texts: list[str] = []
    for _ in range(25):
        texts.append(decode(smol, sample_tokens(compiled, rng, free_steps=int(rng.integers(1, 12)))).decode("utf-8"))
    alphabet = sorted(set("".join(texts)) | set(" ()[]{},:\"'-+*/.\\\n0123456789abexyzé<>;=ANDORSELCTFWHN"))
    cases = set(texts)
    for text in texts:
        for _ in range(6):
            i = int(rng.integers(0, len(text) + 1))
            ch = alphabet[int(rng.integers(0, len(alphabet)))]
            cases.update({text[:i] + ch + text[i:], text[:i] + text[i + 1:], text[:i] + ch + text[i + 1:], text[:i]})
    for _ in range(150):
        cases.add("".join(alphabet[int(k)] for k in rng.integers(0, len(alphabet), size=int(rng.integers(0, 8)))))
    accepted = 0
    for text in sorted(cases):
        want = lark_accepts(parser, text)
        assert _accepts(compiled, text.encode("utf-8")) == want, f"{name}: lark says {want} for {text!r}"
        accepted += want
    assert 0 < accepted < len(cases)


def test_json_accepts_what_json_loads_accepts():
    """Hand-picked JSON texts, valid and not: the engine agrees with json.loads."""
    vocab = _tiny_vocab([b'{"', b'":', b'null', b'true'])
    compiled = compile_grammar(json_grammar(), vocab)
    for text in ['{"a": [1, -2.5e+3, true, false, null, {}], "b": "\\u00e9\\n\\"x"}', "[]", '"\u65e5\U0001F600"',
                 "01", "[1,]", '{"a" 1}', '"\\x"', "-", "1.", "1e", '"a\nb"', "[[[[[]]]]]", " 1", "{}\n"]:
        try:
            json.loads(text)
            valid = text == text.strip()  # NOTE: the grammar's root has no outer whitespace
        except ValueError:
            valid = False
        assert _accepts(compiled, text.encode("utf-8")) == valid, text


def test_tokens_may_split_utf8_characters():
    """A token ending inside a multi-byte character is allowed, and only the right continuation
    byte may follow it."""
    e = "\u00e9".encode("utf-8")
    vocab = _tiny_vocab([e[:1], b'"' + e[:1], e[1:] + b'"'])
    compiled = compile_grammar(Grammar({"root": S(L('"'), star(C("a-z\u00e9")), L('"'))}), vocab)
    m = GrammarMatcher(compiled)
    m.advance(vocab_id(vocab, b'"' + e[:1]))
    mask = m.mask()
    assert mask[vocab_id(vocab, e[1:] + b'"')] and mask[vocab_id(vocab, e[1:])]
    assert not mask[vocab_id(vocab, b"a")] and not mask[vocab_id(vocab, b'"')]
    assert m.forced_bytes() == e[1:]


def vocab_id(vocab: Vocabulary, data: bytes) -> int:
    return next(i for i in range(vocab.size) if vocab.token_bytes(i) == data)


def _brackets():
    return compile_grammar(Grammar({"root": R("list"), "list": S(L("["), star(A(R("list"), L("a"))), L("]"))}),
                           _tiny_vocab([b"[[", b"]]", b"a]", b"][", b"[a"]))


def test_rollback_and_copy_restore_earlier_states():
    """rollback(k) returns to the state k steps back (same mask); a copy moves independently."""
    compiled = _brackets()
    vocab = compiled.vocab
    m = GrammarMatcher(compiled)
    masks = [m.mask().copy()]
    for data in [b"[[", b"a", b"][", b"a]"]:
        m.advance(vocab_id(vocab, data))
        masks.append(m.mask().copy())
    assert m.num_steps == 4
    c = m.copy()
    c.advance(vocab_id(vocab, b"]"))
    assert c.is_finished and c.mask()[vocab.eos_token_ids[0]] and c.mask().sum() == 1
    assert not m.is_finished and np.array_equal(m.mask(), masks[4])
    for k in (1, 2):
        m.rollback(k)
        assert np.array_equal(m.mask(), masks[m.num_steps])
    assert m.num_steps == 1
    with pytest.raises(ValueError):
        m.rollback(2)
    m.rollback(1)
    assert m.num_steps == 0 and np.array_equal(m.mask(), masks[0])


def test_advance_refuses_and_eos_finishes():
    """A refused token raises and leaves the state; EOS only where the text may end; after EOS
    nothing is allowed; an excluded (None) token is never allowed."""
    compiled = _brackets()
    vocab = compiled.vocab
    eos = vocab.eos_token_ids[0]
    m = GrammarMatcher(compiled)
    assert not m.is_allowed(eos) and not m.is_allowed(vocab_id(vocab, b"]"))
    with pytest.raises(ConstraintViolationError):
        m.advance(vocab_id(vocab, b"a"))
    with pytest.raises(ConstraintViolationError):
        m.advance(eos)
    assert m.num_steps == 0
    m.advance_bytes(b"[a")
    assert m.is_allowed(vocab_id(vocab, b"a]")) and not m.can_finish()
    m.advance(vocab_id(vocab, b"]"))
    assert m.can_finish() and m.is_finished and m.is_allowed(eos)
    m.advance(eos)
    assert m.is_finished and not m.mask().any() and not m.is_allowed(eos)
    with pytest.raises(ConstraintViolationError):
        m.advance(vocab_id(vocab, b"a"))


def test_forced_bytes_follow_the_grammar():
    """forced_bytes is the text every continuation starts with, through rule calls and ends."""
    g = Grammar({"root": S(L('{"name": '), R("v"), L("}")), "v": A(S(L("[x"), opt(R("v")), L("]")), L("null"))})
    vocab = _tiny_vocab([b'{"', b'name'])
    m = GrammarMatcher(compile_grammar(g, vocab))
    assert m.forced_bytes() == b'{"name": '
    m.advance_bytes(b'{"name": [')
    assert m.forced_bytes() == b"x"
    m.advance_bytes(b"x")
    assert m.forced_bytes() == b""  # "[" (nested) or "]"
    m.advance_bytes(b"]")
    assert m.forced_bytes() == b"}"
    m.advance_bytes(b"}")
    assert m.forced_bytes() == b"" and m.is_finished


def test_direct_left_recursion_is_rewritten():
    """``e ::= e "+" t | e "-" t | t`` matches what lark's Earley parser matches on the same grammar."""
    vocab = _tiny_vocab([])
    g = Grammar({"root": R("e"), "e": A(S(R("e"), L("+"), R("t")), S(R("e"), L("-"), R("t")), R("t")),
                 "t": A(L("1"), S(L("("), R("e"), L(")")))})
    compiled, parser = compile_grammar(g, vocab), lark_parser(g)
    for text in ["1", "1+1", "1-(1+1)-1", "(((1)))+1", "", "+1", "1+", "(1", "1)", "11", "((1)-(1+(1)))"]:
        assert _accepts(compiled, text.encode()) == lark_accepts(parser, text), text


def test_indirect_left_recursion_is_refused_by_name():
    """Indirect and nullable-prefix left recursion raise LeftRecursionError naming the cycle."""
    vocab = _tiny_vocab([])
    cases = [
        {"root": R("a"), "a": A(S(R("b"), L("x")), L("y")), "b": S(R("a"), L("z"))},
        {"root": R("a"), "a": A(S(R("n"), R("a"), L("x")), L("y")), "n": opt(L("-"))},
    ]
    for rules in cases:
        with pytest.raises(LeftRecursionError) as err:
            compile_grammar(Grammar(rules), vocab)
        assert "left recursion" in str(err.value) and err.value.cycle[0] == err.value.cycle[-1]
    # Right recursion with a nullable prefix after a byte is fine.
    compile_grammar(Grammar({"root": R("a"), "a": A(S(L("x"), opt(L("-")), R("a")), L("y"))}), vocab)


def test_empty_language_and_dead_rules():
    """A root that matches nothing is refused; a reference to a rule that matches nothing is dropped."""
    vocab = _tiny_vocab([])
    with pytest.raises(EmptyLanguageError):
        compile_grammar(Grammar({"root": S(L("a"), R("x")), "x": S(L("b"), R("x"))}), vocab)
    compiled = compile_grammar(Grammar({"root": A(L("a"), R("x")), "x": S(L("b"), R("x"))}), vocab)
    assert _accepts(compiled, b"a") and not _accepts(compiled, b"b")


def test_budget_limits_are_checked_and_named():
    """Each engine limit refuses a grammar over it with CompileBudgetError naming the field."""
    vocab = _tiny_vocab([])
    big = Grammar({"root": S(plus(C("a-z")), Repeat_(C("0-9"), 5000))})
    with pytest.raises(CompileBudgetError) as err:
        compile_grammar(big, vocab, EngineBudget(max_automaton_nodes=1000))
    assert err.value.limit == "max_automaton_nodes"
    with pytest.raises(CompileBudgetError) as err:
        compile_grammar(sexpr_grammar(), vocab, EngineBudget(max_precompute_cells=100))
    assert err.value.limit == "max_precompute_cells"
    compiled = compile_grammar(sexpr_grammar(), vocab, EngineBudget(max_stack_depth=12))
    m = GrammarMatcher(compiled)
    with pytest.raises(CompileBudgetError) as err:
        for _ in range(20):
            m.advance_bytes(b"(")
    assert err.value.limit == "max_stack_depth"
    amb = Grammar({"root": R("a"), "a": star(A(L("x"), S(L("x"), R("a"))))})
    m = GrammarMatcher(compile_grammar(amb, vocab, EngineBudget(max_stacks=8)))
    with pytest.raises(CompileBudgetError) as err:
        for _ in range(40):
            m.advance_bytes(b"x")
    assert err.value.limit == "max_stacks"


def Repeat_(item, n):
    from sglc.grammar.ir import Repeat

    return Repeat(item, n, n)


def test_compiled_grammar_pickles(smol):
    """A compiled grammar survives pickling (a worker process builds it) with equal masks."""
    compiled = compile_grammar(json_grammar(), smol)
    clone = pickle.loads(pickle.dumps(compiled))
    a, b = GrammarMatcher(compiled), GrammarMatcher(clone)
    for data in [b'{"', b'k": [', b"1, ", b'"x"]']:
        a.advance_bytes(data)
        b.advance_bytes(data)
        assert np.array_equal(a.mask(), b.mask())
