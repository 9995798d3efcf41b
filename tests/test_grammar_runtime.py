"""Context-free grammar constraints in the runtime (issue 27) on the real model: GBNF/EBNF
grammars (``SamplingParams.ebnf``) and recursive JSON schemas compile with ``sglc.grammar`` in
the compile pool, and every sampled output parses with an independent parser (lark's Earley for
the grammars, ``json`` + ``jsonschema`` for the schema); jump-forward takes the text a grammar
forces; bad grammars are refused at submit naming the problem and the engine keeps serving.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from grammar_oracle import lark_parser_for
from sglc.grammar import parse_gbnf
from sglc.grammar.regular import regex_of
from sglc_runtime.constrained import CompiledCFG, CompiledGrammar, ConstraintSpec
from sglc_runtime.constrained.cfg_state import whole_characters
from sglc_runtime.engine import Engine
from sglc_runtime.sampling.sampling_params import SamplingParams

FIXTURES = Path(__file__).parent / "fixtures" / "grammars"
#: Sampled generations per grammar (all in flight together).
NUM_SAMPLES = 16

#: Nested lists of digits: recursion the FSM path cannot express.
NESTED = 'root ::= list\nlist ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9] | list'
#: Arithmetic with parentheses, no spaces.
ARITH = 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n' \
        'factor ::= [0-9]{1,3} | "(" expr ")"'
#: A tree: a node's children are nodes (a $ref to the root: recursive).
TREE = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
    "required": ["name", "children"], "additionalProperties": False}


def test_whole_characters_cuts_forced_bytes_after_the_last_complete_character():
    assert whole_characters(b'{"name": ') == b'{"name": '
    assert whole_characters("é".encode()[:1]) == b""  # a lead byte alone: nothing whole
    assert whole_characters(b"ab" + "é".encode()[:1]) == b"ab"
    assert whole_characters("日本".encode()) == "日本".encode()
    assert whole_characters("é".encode()[1:] + b"x") == "é".encode()[1:] + b"x"  # completes a split char
    assert whole_characters("é".encode()[1:]) == b""  # only continuation bytes: end unknown
    assert whole_characters(b"") == b""


@pytest.fixture(scope="module")
def engine():
    engine = Engine(max_running_requests=64)
    yield engine
    engine.shutdown()


def prompt(engine: Engine, question: str) -> str:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)


def sample(engine: Engine, question: str, n: int = NUM_SAMPLES, **params) -> list:
    rids = [engine.submit(prompt(engine, question),
                          SamplingParams(temperature=1.0, seed=1000 + i, **params)) for i in range(n)]
    return [engine.wait(r) for r in rids]


@pytest.mark.model
@pytest.mark.parametrize("name,grammar,question", [
    ("nested_lists", NESTED, "Write a nested list of digits."),
    ("arithmetic", ARITH, "Write an arithmetic expression."),
    ("json_gbnf", (FIXTURES / "json.gbnf").read_text(), "Describe a cat as JSON."),
])
def test_sampled_outputs_parse_with_lark(engine, name, grammar, question):
    """Temperature 1, seeded: every output that ended by the grammar parses with lark's Earley
    parser on the same grammar; outputs cut by max_new_tokens are prefixes lark can continue
    (not checked: lark has no prefix test), and most outputs do end by the grammar."""
    parser = lark_parser_for(parse_gbnf(grammar))
    outs = sample(engine, question, ebnf=grammar, max_new_tokens=96)
    finished = [o for o in outs if o.finish_reason["type"] == "stop"]
    assert len(finished) >= NUM_SAMPLES // 2, [(o.text, o.finish_reason) for o in outs]
    for o in finished:
        assert parser.accepts(o.text), o.text


@pytest.mark.model
def test_a_recursive_json_schema_takes_the_grammar_engine_and_validates(engine):
    """The FSM path refuses a schema that refers to itself; the grammar engine takes it, and every
    finished output is JSON valid under the schema."""
    outs = sample(engine, "Write a small family tree as JSON.", json_schema=json.dumps(TREE), max_new_tokens=160)
    finished = [o for o in outs if o.finish_reason["type"] == "stop"]
    assert finished, [(o.text, o.finish_reason) for o in outs]
    for o in finished:
        jsonschema.validate(json.loads(o.text), TREE)
    assert engine.grammars.num_compiles.get("json_schema", 0) >= 1


@pytest.mark.model
def test_jump_forward_appends_the_text_a_grammar_forces(engine):
    """A grammar that forces a long literal: the output carries it whole, with and without
    jump-forward, and with it the engine made jumps."""
    # NOTE: recursive (n), so the grammar engine runs it: a regular grammar takes the FSM path
    grammar = 'root ::= "The final answer, after careful thought, is: " n "."\nn ::= [0-9]{1,4} | "(" n ")"'
    before = engine.jump_counts["jumps"]
    on = sample(engine, "What is 6 times 7?", n=2, ebnf=grammar, max_new_tokens=40)
    off = sample(engine, "What is 6 times 7?", n=2, ebnf=grammar, max_new_tokens=40, jump_forward=False)
    parser = lark_parser_for(parse_gbnf(grammar))
    for o in on + off:
        assert o.finish_reason["type"] == "stop", o
        assert parser.accepts(o.text), o.text
    assert engine.jump_counts["jumps"] > before


@pytest.mark.model
@pytest.mark.parametrize("grammar,needle", [
    ('root ::= "a" b', "undefined rule 'b'"),
    ('root ::= "a" )', "line 1"),
    ('root ::= [a-', "line 1"),
])
def test_a_bad_grammar_is_refused_at_submit_and_the_engine_keeps_serving(engine, grammar, needle):
    with pytest.raises(ValueError, match="ebnf") as err:
        engine.submit("hi", SamplingParams(max_new_tokens=4, ebnf=grammar))
    assert needle in str(err.value)
    out = engine.generate("Say hi.", SamplingParams(max_new_tokens=4, temperature=0))[0]
    assert out.finish_reason["type"] in ("stop", "length")


@pytest.mark.model
def test_a_grammar_and_a_regex_in_one_batch_each_match_their_own(engine):
    """Masks are per row: a grammar request and a regex request decoded together."""
    rid_g = engine.submit(prompt(engine, "List digits."), SamplingParams(temperature=1.0, seed=3, ebnf=NESTED,
                                                                        max_new_tokens=64))
    rid_r = engine.submit(prompt(engine, "Give a year."), SamplingParams(temperature=1.0, seed=4, regex="(19|20)[0-9]{2}",
                                                                        max_new_tokens=8))
    g, r = engine.wait(rid_g), engine.wait(rid_r)
    assert re.fullmatch("(19|20)[0-9]{2}", r.text), r.text
    if g.finish_reason["type"] == "stop":
        assert lark_parser_for(parse_gbnf(NESTED)).accepts(g.text), g.text
    else:
        assert g.text.startswith("[")


@pytest.mark.model
def test_a_regular_grammar_runs_on_the_fsm_path(engine):
    """One engine decides: a GBNF grammar without recursion compiles to the FSM path (its regex's
    token index); a recursive one to the grammar engine. Both keep their outputs in the grammar."""
    grammar = 'root ::= answer ", because " [a-z ]{1,24} "."\nanswer ::= "yes" | "no"'
    assert isinstance(engine.grammars.get(ConstraintSpec.of(ebnf=grammar)), CompiledGrammar)
    assert isinstance(engine.grammars.get(ConstraintSpec.of(ebnf=NESTED)), CompiledCFG)
    regex = regex_of(parse_gbnf(grammar))
    for o in sample(engine, "Is the sky blue?", n=4, ebnf=grammar, max_new_tokens=40):
        if o.finish_reason["type"] == "stop":
            assert re.fullmatch(regex, o.text), o.text
        else:
            assert re.match("yes|no", o.text), o.text
