"""sglc.grammar.regular: a grammar without recursion written as a regex (what lets the runtime run
a regular GBNF grammar on the FSM path). The regex accepts exactly what lark's Earley parser
accepts on the grammar; recursive grammars and exponential inlining give None.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from grammar_oracle import lark_parser_for
from sglc.grammar import parse_gbnf
from sglc.grammar.regular import regex_of

FIXTURES = Path(__file__).parent / "fixtures" / "grammars"

REGULAR = {
    "answer": 'root ::= ("yes" | "no") " " [0-9]{1,3} ("." [0-9]+)?',
    "list": (FIXTURES / "list.gbnf").read_text(),
    "shared-rule": 'root ::= pair ("," pair)*\npair ::= key "=" digit+\nkey ::= [a-c]{1,2}\ndigit ::= [0-9]',
    "specials": 'root ::= "a.b*" [\\]\\-^] "(x|y)" "\\\\" [^a-z]?',
}
RECURSIVE = {
    "json": (FIXTURES / "json.gbnf").read_text(),
    "arithmetic": (FIXTURES / "arithmetic.gbnf").read_text(),
    "nested": 'root ::= list\nlist ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9] | list',
}


def candidates(rng: random.Random, alphabet: str, accepted: list[str], n: int = 300) -> list[str]:
    """Random strings over the grammar's characters, plus mutations of accepted ones."""
    out = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(n)]
    for text in accepted:
        out.append(text)
        for _ in range(10):
            i = rng.randint(0, len(text))
            out.append(text[:i] + rng.choice(alphabet) + text[i + 1:])
            out.append(text[:i] + text[i + 1:])
    return out


@pytest.mark.parametrize("name", sorted(REGULAR))
def test_a_grammar_without_recursion_becomes_an_equivalent_regex(name):
    grammar = parse_gbnf(REGULAR[name])
    regex = regex_of(grammar)
    assert regex is not None
    oracle = lark_parser_for(grammar)
    rng = random.Random(7)
    seeds = {"answer": ["yes 12", "no 7.25"], "list": ["- a\n- bc\n"], "shared-rule": ["a=1,bc=22"],
             "specials": ['a.b*](x|y)\\', 'a.b*-(x|y)\\Z']}[name]
    alphabet = "".join(sorted(set("".join(seeds)) | set("ayesno -.019=,\n\\]^Z")))
    for text in candidates(rng, alphabet, seeds):
        assert bool(re.fullmatch(regex, text)) == oracle.accepts(text), (text, regex)
    assert all(re.fullmatch(regex, s) for s in seeds)


@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_a_recursive_grammar_is_not_written_as_a_regex(name):
    assert regex_of(parse_gbnf(RECURSIVE[name])) is None


def test_exponential_inlining_gives_up_at_the_size_limit():
    """r0 uses r1 twice, r1 uses r2 twice, ...: 2^40 copies written out; refused early, not built."""
    rules = [f"r{i} ::= r{i + 1} r{i + 1}" for i in range(40)] + ['r40 ::= "ab"']
    grammar = parse_gbnf("root ::= r0\n" + "\n".join(rules))
    assert regex_of(grammar, max_chars=10_000) is None
    small = parse_gbnf('root ::= r0\nr0 ::= r1 r1\nr1 ::= r2 r2\nr2 ::= "ab"')
    assert regex_of(small) == "ab" * 4
