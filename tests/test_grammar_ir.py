"""The grammar IR: verify names what is missing, size counts nodes, to_ebnf prints GBNF."""
from __future__ import annotations

import pytest

from sglc.fsm.charset import CharSet
from sglc.grammar import CharClass, Choice, Grammar, GrammarError, Literal, Repeat, RuleRef, Seq


def test_verify_names_the_undefined_rule_and_missing_root():
    with pytest.raises(GrammarError, match="undefined rule 'value'"):
        Grammar({"root": RuleRef("value")}).verify()
    with pytest.raises(GrammarError, match="no root rule 'start'"):
        Grammar({"root": Literal("a")}, root="start").verify()
    with pytest.raises(GrammarError, match="repeat bounds"):
        Grammar({"root": Repeat(Literal("a"), 3, 2)}).verify()


def test_to_ebnf_prints_root_first_with_groups():
    g = Grammar({
        "root": Seq((Literal('a"\n'), Repeat(RuleRef("x")), Choice((Literal("b"), Seq(()))),
                     Repeat(Seq((Literal("c"), Literal("d"))), 2, 5))),
        "x": CharClass(CharSet(((ord("a"), ord("z")),))),
    }).verify()
    assert g.to_ebnf() == 'root ::= "a\\"\\n" x* ("b" | "") ("c" "d"){2,5}\nx ::= [a-z]'
    assert g.size() == 12  # 11 nodes in root, 1 in x
