"""A grammar on the wire: the typed sglc.grammar.Grammar message (graph.pb's lowered ``grammar``)
round-trips every expression kind exactly and refuses malformed or oversized messages before
building anything; runtime.proto carries a grammar as ``ebnf`` text that parses back to the
same grammar."""
from __future__ import annotations

import json
import random

import pytest

from sglc.fsm.charset import CharSet
from sglc.grammar import (
    CharClass,
    Choice,
    Grammar,
    GrammarBudget,
    GrammarBudgetError,
    GrammarError,
    Literal,
    Repeat,
    RuleRef,
    Seq,
    parse_gbnf,
)
from sglc.wire import client_convert, server_convert
from sglc.wire.backend import GenParams
from sglc.wire.constraint_spec import ConstraintSpec
from sglc.wire.grammar_message import MAX_EXPR_DEPTH, GrammarFormatError, grammar_from_pb, grammar_to_pb
from sglc.wire.proto import grammar_pb2, runtime_pb2

DIGITS = CharClass(CharSet.of_ranges([(ord("0"), ord("9"))]))


def every_kind() -> Grammar:
    """A recursive grammar holding every Expr kind and their edge cases."""
    return Grammar({
        "root": Choice((Seq((Literal("("), RuleRef("root"), Literal(")"))), RuleRef("num"), Seq(()))),
        "num": Seq((Repeat(Literal("-"), 0, 1), Repeat(DIGITS, 1, None), Repeat(DIGITS, 2, 5), Repeat(DIGITS, 0, 0))),
        "odd": Choice((CharClass(CharSet(())), CharClass(CharSet.of_ranges([(0, 0x10FFFF)])), Literal(""),
                       Literal("é\n\"日本\\"))),
    }, "root").verify()


def round_trip(g: Grammar, budget: GrammarBudget | None = None) -> Grammar:
    data = grammar_to_pb(g).SerializeToString()
    return grammar_from_pb(grammar_pb2.Grammar.FromString(data), budget)


def test_every_expression_kind_round_trips_exactly():
    """Literal, CharClass (empty, all, ranges), Seq (empty too), Choice, Repeat (bounded, unbounded,
    {0,0}) and RuleRef come back equal, rule order and root kept."""
    g = every_kind()
    back = round_trip(g)
    assert back == g and list(back.rules) == list(g.rules) and back.root == "root"
    kinds = {e.WhichOneof("kind") for e in grammar_to_pb(g).exprs}
    assert kinds == {"literal", "char_class", "seq", "choice", "repeat", "rule_ref"}


def test_a_parsed_grammar_round_trips_and_prints_the_same_text():
    """A GBNF grammar's message rebuilds the same Grammar; its to_ebnf text is unchanged."""
    g = parse_gbnf('root ::= "{" ws pair ("," ws pair)* "}"\npair ::= [a-z_]{1,8} ":" ws [0-9]+\nws ::= [ \\t\\n]*')
    back = round_trip(g)
    assert back == g and back.to_ebnf() == g.to_ebnf()


def test_equal_subexpressions_are_written_once():
    """Three equal pairs of (digits "x") in different rules are one table entry plus its children."""
    pair = lambda: Seq((Repeat(DIGITS, 1, None), Literal("x")))  # noqa: E731  (distinct objects, equal values)
    g = Grammar({"root": Seq((pair(), RuleRef("a"), pair())), "a": pair()})
    msg = grammar_to_pb(g)
    assert len(msg.exprs) == 6  # DIGITS, its repeat, "x", the pair, rule_ref a, root's seq
    assert round_trip(g) == g


def test_a_grammar_at_the_depth_limit_round_trips_and_one_level_deeper_is_refused():
    """MAX_EXPR_DEPTH nested expressions encode, decode and print; one more is refused on write."""
    expr = Repeat(Literal("x"), 1, None)
    for _ in range(MAX_EXPR_DEPTH - 2):  # NOTE: each wrap is one level deeper
        expr = Choice((Literal("b"), expr)) if isinstance(expr, Seq) else Seq((Literal("a"), expr))
    g = Grammar({"root": expr})
    back = round_trip(g)
    assert back == g and back.to_ebnf().startswith("root ::=")
    with pytest.raises(GrammarError, match="more than 128 deep"):
        grammar_to_pb(Grammar({"root": Seq((Literal("b"), expr))}))


@pytest.mark.timeout(60)  # NOTE: a guard against a hang (building it would never end), not a timing
def test_a_shared_doubling_table_is_refused_by_the_budget_before_it_is_built():
    """60 entries that each use the previous one twice describe 2**60 tree nodes: refused at once by
    max_expr_nodes (Grammar.size() and verify() walk trees, so building it would never end)."""
    msg = grammar_pb2.Grammar(root="root")
    msg.exprs.add(literal="a")
    for i in range(1, 60):
        msg.exprs.add().seq.items.extend([i - 1, i - 1])
    msg.rules.add(name="root", expr=59)
    with pytest.raises(GrammarBudgetError, match="max_expr_nodes"):
        grammar_from_pb(msg)


def _msg(*exprs: grammar_pb2.Expr, rules=(("root", None),), root="root") -> grammar_pb2.Grammar:
    msg = grammar_pb2.Grammar(root=root, exprs=list(exprs))
    for name, index in rules:
        msg.rules.add(name=name, expr=len(exprs) - 1 if index is None else index)
    return msg


def _children(kind: str, *items: int) -> grammar_pb2.Expr:
    e = grammar_pb2.Expr()
    getattr(e, kind).SetInParent()
    getattr(e, kind).items.extend(items)
    return e


def _class(*ranges: tuple[int, int]) -> grammar_pb2.Expr:
    return grammar_pb2.Expr(char_class=grammar_pb2.CharClass(
        ranges=[grammar_pb2.CharRange(first=a, last=b) for a, b in ranges]))


A = grammar_pb2.Expr(literal="a")


@pytest.mark.parametrize("msg, needle", [
    (_msg(A, _children("seq", 0, 1)), "expression 1 refers to entry 1, which is not before it"),
    (_msg(A, rules=(("root", 5),)), "rule 'root' names expression 5, past the table's 1 entries"),
    (_msg(A, rules=(("root", 0), ("root", 0))), "rule 'root' is defined twice"),
    (_msg(A, rules=(("", 0),)), "rule 0 has no name"),
    (_msg(A, root=""), "names no root rule"),
    (_msg(A, rules=(("start", 0),)), "no root rule 'root'"),
    (_msg(grammar_pb2.Expr(rule_ref="nowhere")), "refers to undefined rule 'nowhere'"),
    (_msg(grammar_pb2.Expr(rule_ref="")), "refers to a rule with no name"),
    (_msg(_children("choice")), "expression 0 is a choice of no options"),
    (_msg(A, grammar_pb2.Expr(repeat=grammar_pb2.Repeat(item=0, min=3, max=2))), "max is below min"),
    (_msg(_class((ord("b"), ord("z")), (ord("a"), ord("c")))), "not sorted, disjoint"),
    (_msg(_class((ord("a"), ord("b")), (ord("c"), ord("d")))), "non-adjacent"),
    (_msg(_class((0xD000, 0xE000))), "free of surrogates"),
    (_msg(_class((5, 3))), "class range 5-3"),
    (_msg(_class((0, 0x110000))), "class range 0-1114112"),
    (_msg(grammar_pb2.Expr()), "expression 0 has no kind"),
    (_msg(A, *[_children("seq", i) for i in range(MAX_EXPR_DEPTH)]), "expression 128 nests more than 128 deep"),
])
def test_a_malformed_message_is_a_clear_error_naming_the_entry(msg, needle):
    """Each malformed table is a GrammarFormatError (a ValueError) whose message names the problem."""
    with pytest.raises(GrammarFormatError, match="malformed grammar message") as info:
        grammar_from_pb(msg)
    assert needle in str(info.value) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("msg, budget, limit", [
    (_msg(A, grammar_pb2.Expr(repeat=grammar_pb2.Repeat(item=0, min=0, max=10**6))), GrammarBudget(), "max_repeat_bound"),
    (_msg(A, grammar_pb2.Expr(repeat=grammar_pb2.Repeat(item=0, min=20_000))), GrammarBudget(), "max_repeat_bound"),
    (_msg(*[A] * 11), GrammarBudget(max_expr_nodes=10), "max_expr_nodes"),
    (_msg(A, rules=[(f"r{i}", 0) for i in range(6)] + [("root", 0)]), GrammarBudget(max_rules=5), "max_rules"),
    (_msg(grammar_pb2.Expr(literal="x" * 101)), GrammarBudget(max_grammar_chars=100), "max_grammar_chars"),
])
def test_sizes_over_the_grammar_budget_are_refused_by_name(msg, budget, limit):
    """Repeat bounds, table entries, rules and text are held to the GrammarBudget; the error names the limit."""
    with pytest.raises(GrammarBudgetError, match=limit):
        grammar_from_pb(msg, budget)


def test_graph_pb_format_6_stores_a_lowered_grammar_as_the_typed_message():
    """encode() writes a gen's grammar as AttrValue.grammar_value; decode gives back an equal Grammar."""
    from sglc.ir import Graph, Op
    from sglc.ir.serialize import FORMAT_VERSION, decode, encode
    from sglc.passes.lower_constraints import lower_constraints
    from sglc.wire.proto import graph_pb2

    g = Graph("lowered")
    g.create_node(Op.GEN, attrs={"name": "x", "ebnf": 'root ::= "(" root ")" | [0-9]+'}, meta={"source": "p.py:3"})
    g = lower_constraints(g).graph
    data = encode(g)
    msg = graph_pb2.Graph.FromString(data)
    (entry,) = [e for e in msg.nodes[0].attrs.entries if e.key == "grammar"]
    assert FORMAT_VERSION == msg.format_version == 6 and entry.value.WhichOneof("kind") == "grammar_value"
    assert grammar_from_pb(entry.value.grammar_value) == g.find("x").attrs["grammar"]
    assert decode(data) == g


def _mutant(base: grammar_pb2.Grammar, rng: random.Random) -> grammar_pb2.Grammar:
    """``base`` with one to three random edits: indices, bounds, ranges, names, kinds, entries."""
    msg = grammar_pb2.Grammar()
    msg.CopyFrom(base)
    for _ in range(rng.randint(1, 3)):
        e = msg.exprs[rng.randrange(len(msg.exprs))]
        kind = e.WhichOneof("kind")
        pick = rng.randrange(7)
        big = rng.choice([0, 1, 2, len(msg.exprs), 2**31, 2**32 - 1])
        if pick == 0 and kind in ("seq", "choice"):
            items = getattr(e, kind).items
            if items:
                items[rng.randrange(len(items))] = big
            else:
                items.append(big)
        elif pick == 1 and kind == "repeat":
            setattr(e.repeat, rng.choice(["item", "min", "max"]), big)
        elif pick == 2 and kind == "char_class":
            e.char_class.ranges.add(first=rng.choice([0, 0xD800, 0x10FFFF, 2**32 - 1]), last=big)
        elif pick == 3:
            msg.rules[rng.randrange(len(msg.rules))].expr = big
        elif pick == 4:
            msg.rules[rng.randrange(len(msg.rules))].name = rng.choice(["", "root", "x", "é"])
        elif pick == 5:
            e.rule_ref = rng.choice(["", "root", "nowhere", "item"])
        else:
            e.ClearField("kind") if rng.random() < 0.3 else msg.exprs.add().choice.items.extend([0, big])
    return msg


@pytest.mark.timeout(300)  # NOTE: a guard against a hang, not a timing
def test_randomly_damaged_messages_decode_or_fail_cleanly():
    """500 seeded mutants of a real grammar's message: each decodes to a verified Grammar or raises a
    ValueError (format, budget or grammar error); never another exception."""
    rng = random.Random(20261126)
    base = grammar_to_pb(parse_gbnf('root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]{1,3} | root | [^\\"]'))
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(500):
        msg = _mutant(base, rng)
        try:
            g = grammar_from_pb(grammar_pb2.Grammar.FromString(msg.SerializeToString()))
        except ValueError:
            outcomes["refused"] += 1
        else:
            assert g.verify() is g
            outcomes["ok"] += 1
    assert outcomes["refused"] > 100 and outcomes["ok"] > 10, outcomes


# ----- runtime.proto: a grammar travels as GBNF text -----

def test_generate_request_carries_a_grammar_as_ebnf_text_that_parses_to_the_same_grammar():
    """client_convert puts GenParams.ebnf in SamplingParams.ebnf (the constraint oneof); server_convert
    gives it back as the runtime's ``ebnf`` keyword, whose text parses to an equal Grammar and makes
    the contract's ConstraintSpec of kind "ebnf"."""
    g = parse_gbnf('root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]+ | root')
    request = client_convert.generate_request("Q: ", GenParams(max_new_tokens=8, ebnf=g.to_ebnf()))
    wire = runtime_pb2.GenerateRequest.FromString(request.SerializeToString())
    assert wire.sampling.WhichOneof("constraint") == "ebnf"
    fields = server_convert.sampling_fields_from_pb(wire)
    assert fields["max_new_tokens"] == 8 and "regex" not in fields and "fsm" not in fields
    assert parse_gbnf(fields["ebnf"]) == g
    spec = ConstraintSpec.of(ebnf=fields["ebnf"])
    assert spec.kind == "ebnf" and parse_gbnf(spec.text) == g


LARK_SUM = 'start: expr\nexpr: expr "+" term | term\nterm: /[0-9]+/ | "(" expr ")"\n'
TREE = {"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {
    "type": "array", "items": {"$ref": "#/$defs/n"}}}, "required": ["v", "kids"]}}, "$ref": "#/$defs/n"}


@pytest.mark.parametrize("attr, value", [("ebnf", 'root ::= "(" root ")" | "x"'), ("lark", LARK_SUM),
                                         ("json_schema", json.dumps(TREE))])
def test_a_lowered_gens_request_carries_text_that_parses_to_its_lowered_grammar(attr, value):
    """Every grammar syntax, lowered by the pass and turned into a request by the executor
    (Semantics.gen_params -> client_convert -> bytes -> server_convert), arrives as ebnf text whose
    parse equals the gen's lowered grammar (its start rule named root)."""
    from test_executor_support import ScriptedBackend

    from sglc.executor.semantics import Semantics
    from sglc.ir import Graph, Op
    from sglc.passes.lower_constraints import lower_constraints

    g = Graph("one")
    g.create_node(Op.GEN, attrs={"name": "x", attr: value}, meta={"source": "p.py:1"})
    lowered = lower_constraints(g).graph.find("x").attrs["grammar"]
    params = Semantics(ScriptedBackend()).gen_params(lower_constraints(g).graph.find("x").attrs)
    wire = runtime_pb2.GenerateRequest.FromString(client_convert.generate_request("p", params).SerializeToString())
    fields = server_convert.sampling_fields_from_pb(wire)
    assert lowered.root == "root" and parse_gbnf(fields["ebnf"]) == lowered
    assert "json_schema" not in fields and "fsm" not in fields


def test_a_grammar_and_another_constraint_on_one_request_are_refused():
    """GenParams with ebnf and a regex is a ValueError naming both, not a silently dropped constraint."""
    with pytest.raises(ValueError, match="at most one constraint, got regex, ebnf"):
        client_convert.gen_params_to_pb(GenParams(regex="a+", ebnf='root ::= "a"'))
