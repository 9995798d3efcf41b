"""JSON Schema -> grammar IR: sampled members are JSON that jsonschema validates, random texts are
accepted exactly when they are valid and laid out as json.dumps lays them out, recursive
schemas work, the regex path's schemas mean the same language, and refusals name the keyword
and its JSON path."""
from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from sglc.fsm import compile_regex, regex_from_json_schema
from sglc.fsm import json_schema as fsm_json_schema
from sglc.fsm.errors import InvalidSchemaError, UnsupportedSchemaError
from sglc.fsm.walk import sample as fsm_sample
from sglc.grammar import GrammarBudget, GrammarBudgetError, parse_gbnf
from sglc.grammar.json_schema_grammar import ANNOTATIONS, KEYWORDS, grammar_from_json_schema
from grammar_oracle import lark_parser_for, mutate, sample
from test_fsm_json_schema import SCHEMAS as FSM_SCHEMAS

TREE = {  # a node with a children array of $ref '#'
    "type": "object",
    "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99}, "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 3}},
    "required": ["value", "children"],
    "additionalProperties": False,
}
DEFS_TREE = {  # $defs-based: an expression tree of binary operations and leaves
    "$defs": {
        "expr": {"anyOf": [{"$ref": "#/$defs/leaf"}, {"$ref": "#/$defs/binop"}]},
        "leaf": {"type": "object", "properties": {"num": {"type": "number"}}, "required": ["num"], "additionalProperties": False},
        "binop": {
            "type": "object",
            "properties": {"op": {"enum": ["+", "-", "*"]}, "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}, "minItems": 2, "maxItems": 2}},
            "required": ["op", "args"], "additionalProperties": False,
        },
    },
    "$ref": "#/$defs/expr",
}
COMMENTS = {  # definitions-based, optional members, strings with bounds, null
    "definitions": {
        "comment": {
            "type": "object",
            "properties": {
                "author": {"type": ["string", "null"], "maxLength": 4},
                "ok": {"type": "boolean"},
                "replies": {"type": "array", "items": {"$ref": "#/definitions/comment"}},
            },
            "additionalProperties": False,
        },
    },
    "type": "array", "items": {"$ref": "#/definitions/comment"}, "maxItems": 2,
}
RECURSIVE = {"tree": TREE, "defs_tree": DEFS_TREE, "comments": COMMENTS}
ALPHABET = '{}[]",: 0123456789-+.eEtrufalsn\\avlueochildrenpgx'


def valid(text: str, schema) -> bool:
    try:
        value = json.loads(text)
        jsonschema.validate(value, schema)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def canonical(text: str) -> bool:
    """Is ``text`` laid out as json.dumps lays it out (numbers and escapes as written)?"""
    value = json.loads(text)
    return text == json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_recursive_schema_members_validate_and_random_texts_agree(name):
    """Sampled members validate; on mutations, the grammar accepts exactly the valid texts in
    json.dumps layout (and never an invalid one)."""
    schema = RECURSIVE[name]
    g = grammar_from_json_schema(schema)
    oracle = lark_parser_for(g)
    rng = random.Random(name)
    members = [s for s in (sample(g, rng, max_depth=6) for _ in range(120)) if s is not None][:80]
    assert len(members) >= 40
    depth_seen = max(s.count("[") for s in members)
    assert depth_seen >= 2, "the samples never recursed"
    for s in members:
        assert valid(s, schema), s
    agreed = {True: 0, False: 0}
    for s in [mutate(m, rng, ALPHABET) for m in members for _ in range(3)]:
        ours = oracle.accepts(s)
        if ours:
            assert valid(s, schema), s
        elif valid(s, schema):
            assert not canonical(s), s  # valid but not in the one layout we emit
        agreed[ours] += 1
    assert agreed[True] and agreed[False]
    assert parse_gbnf(g.to_ebnf()) == g
    xgrammar = pytest.importorskip("xgrammar")
    xgrammar.Grammar.from_ebnf(g.to_ebnf())  # the printed grammar is one xgrammar reads


def test_recursive_schemas_accept_hand_written_deep_values():
    """Values nested deeper than any regex bound are accepted; near misses are not."""
    leaf = {"value": 1, "children": []}
    deep = leaf
    for i in range(12):
        deep = {"value": i, "children": [deep, leaf]}
    tree = lark_parser_for(grammar_from_json_schema(TREE))
    assert tree.accepts(json.dumps(deep))
    assert not tree.accepts(json.dumps({"value": 100, "children": []}))
    assert not tree.accepts(json.dumps({"children": [], "value": 1}))  # declared order only
    assert not tree.accepts(json.dumps(deep, separators=(",", ":")))
    compact = lark_parser_for(grammar_from_json_schema(TREE, separators=(",", ":")))
    assert compact.accepts(json.dumps(deep, separators=(",", ":")))
    expr = {"op": "+", "args": [{"num": 1.5}, {"op": "*", "args": [{"num": -2}, {"num": 3e5}]}]}
    defs = lark_parser_for(grammar_from_json_schema(DEFS_TREE))
    assert defs.accepts(json.dumps(expr)) and valid(json.dumps(expr), DEFS_TREE)
    assert not defs.accepts(json.dumps({"op": "/", "args": [{"num": 1}, {"num": 2}]}))
    assert not defs.accepts(json.dumps({"op": "+", "args": [{"num": 1}]}))


@pytest.mark.parametrize("name", sorted(FSM_SCHEMAS))
def test_regex_path_schemas_mean_the_same_language(name):
    """For the FSM path's schemas, grammar samples match the schema's regex and FSM samples are
    accepted by the grammar (any-value schemas aside, which the regex bounds to depth 2)."""
    schema = FSM_SCHEMAS[name]
    g = grammar_from_json_schema(schema)
    oracle = lark_parser_for(g)
    regex = re.compile(regex_from_json_schema(schema))
    fsm = compile_regex(regex.pattern)
    rng = random.Random(name)
    for _ in range(25):
        text = fsm_sample(fsm, rng, max_steps=80)
        assert oracle.accepts(text), text
    bounded = name not in {"any_value", "free_object"}
    for text in filter(None, (sample(g, rng, max_depth=4) for _ in range(25))):
        jsonschema.validate(json.loads(text), schema)
        if bounded:
            assert regex.fullmatch(text), text
    assert parse_gbnf(g.to_ebnf()) == g


def test_schema_keyword_lists_match_the_regex_path():
    """Both paths support (and ignore as annotations) the same keywords."""
    assert KEYWORDS == fsm_json_schema._KEYWORDS
    assert ANNOTATIONS == fsm_json_schema._ANNOTATIONS


def test_left_recursion_through_anyof_adds_nothing():
    """A bare self-reference in anyOf contributes no string, so the grammar is not left-recursive."""
    g = grammar_from_json_schema({"anyOf": [{"$ref": "#"}, {"type": "null"}]})
    assert g.to_ebnf() == 'root ::= "null"'
    g = grammar_from_json_schema({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})
    assert not lark_parser_for(g).accepts("null")


@pytest.mark.parametrize(
    "schema,keyword,path",
    [
        ({"not": {"type": "string"}}, "not", "#/not"),
        ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "allOf", "#/allOf"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "#/uniqueItems"),
        ({"type": "number", "maximum": 3.5}, "maximum", "#/maximum"),
        ({"type": "string", "format": "hostname"}, "format", "#/format"),
        ({"type": "object", "patternProperties": {"^a": {}}}, "patternProperties", "#/patternProperties"),
        ({"$defs": {"N": {"if": {}}}, "type": "array", "items": {"$ref": "#/$defs/N"}}, "if", "#/$defs/N/if"),
        ({"type": "string", "pattern": "(?=a)b"}, "pattern", "#/pattern"),
        ({"$ref": "other.json#/x"}, "$ref", "#/$ref"),
        ({"type": "integer", "maximum": 10**50}, "maximum", "#/maximum"),
    ],
)
def test_unsupported_keywords_raise_naming_keyword_and_path(schema, keyword, path):
    """Keywords we cannot lower raise the regex path's UnsupportedSchemaError, keyword and path."""
    with pytest.raises(UnsupportedSchemaError) as info:
        grammar_from_json_schema(schema)
    assert info.value.keyword == keyword and info.value.path == path
    try:
        regex_from_json_schema(schema)
    except UnsupportedSchemaError as err:  # the same message on both paths
        assert str(err) == str(info.value)


@pytest.mark.parametrize(
    "schema,message",
    [
        ({"$ref": "#/$defs/Missing"}, "points nowhere"),
        ({"type": "strin"}, "unknown type"),
        ({"type": "string", "maxLength": -1}, "non-negative integer"),
        ({"enum": []}, "non-empty list"),
        ("{not json", "not valid JSON"),
        ({"type": "string", "pattern": "(unclosed"}, "not a valid regex"),
        ({"type": "integer", "minimum": float("inf")}, "finite number"),
    ],
)
def test_malformed_schemas_raise_invalid_schema_error(schema, message):
    """Malformed schemas raise InvalidSchemaError naming the problem, as on the regex path."""
    with pytest.raises(InvalidSchemaError, match=re.escape(message)):
        grammar_from_json_schema(schema)


def test_schema_budgets_are_named():
    """Deep schemas, long schema text, big bounds and node counts are refused by limit name."""
    deep: dict = {"type": "integer"}
    for _ in range(5000):
        deep = {"type": "array", "items": deep}
    with pytest.raises(GrammarBudgetError, match="max_schema_depth"):
        grammar_from_json_schema(deep)
    with pytest.raises(GrammarBudgetError, match="max_schema_depth"):
        grammar_from_json_schema("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GrammarBudgetError, match="max_grammar_chars"):
        grammar_from_json_schema(json.dumps({"enum": ["x" * 300_000]}))
    with pytest.raises(GrammarBudgetError, match="literal characters"):
        grammar_from_json_schema({"enum": ["x" * 150_000, "y" * 150_000]})
    with pytest.raises(GrammarBudgetError, match="max_repeat_bound"):
        grammar_from_json_schema({"type": "array", "maxItems": 10**9})
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(300)}}
    with pytest.raises(GrammarBudgetError, match="max_expr_nodes"):
        grammar_from_json_schema(wide, GrammarBudget(max_expr_nodes=1000))
    many_defs = {"$defs": {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}} for i in range(30)}, "$ref": "#/$defs/d0"}
    many_defs["$defs"]["d30"] = {"type": "null"}
    with pytest.raises(GrammarBudgetError, match="max_rules"):
        grammar_from_json_schema(many_defs, GrammarBudget(max_rules=20))
    assert len(grammar_from_json_schema(many_defs).rules) >= 31


def test_schema_string_and_pydantic_forms_equal_the_dict_form():
    """A schema as JSON text, or a pydantic model, lowers exactly like its dict."""
    from test_fsm_json_schema import Person
    assert grammar_from_json_schema(json.dumps(TREE)) == grammar_from_json_schema(TREE)
    assert grammar_from_json_schema(Person) == grammar_from_json_schema(Person.model_json_schema())
