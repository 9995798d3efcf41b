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


def test_to_ebnf_prints_each_node_once(monkeypatch):
    """Nested repeats print in time linear in the grammar (each node's text made once; printing a
    group twice doubled the work per level: a crafted graph.pb could hang `sglc inspect`)."""
    from sglc.grammar import ir

    expr = Literal("a")
    for _ in range(30):
        expr = Repeat(Seq((expr, Literal("b"))))
    calls = [0]
    real = ir.show

    def counting(e):
        calls[0] += 1
        return real(e)

    monkeypatch.setattr(ir, "show", counting)
    text = Grammar({"root": expr}).to_ebnf()
    assert text.startswith("root ::= ((((") and calls[0] <= 3 * Grammar({"root": expr}).size()
