"""JSON schema -> regex -> FSM: generated members are valid JSON that validates (jsonschema)."""
import json
import random
import re
from typing import Literal, Optional, Union

import jsonschema
import pytest
from pydantic import BaseModel, Field

from sglc.fsm import (
    InvalidSchemaError,
    UnsupportedSchemaError,
    compile_json_schema,
    compile_regex,
    regex_from_json_schema,
    sample,
)
from sglc.fsm.int_range import int_range_regex


class Address(BaseModel):
    street: str
    zip: str = Field(pattern=r"^\d{5}$")


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=12)
    age: int = Field(ge=0, le=130)
    email: Optional[str] = None
    tags: list[str] = Field(default_factory=list, max_length=3)
    role: Literal["admin", "user", "caf\u00e9"]
    address: Address
    score: Union[int, bool] = 0


SCHEMAS = {
    "nested_pydantic": Person.model_json_schema(),
    "array_bounds": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 300}, "minItems": 2, "maxItems": 4},
    "enum_const": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "gr\"een", 3, None, {"a": [1, 2]}]},
            "version": {"const": "v1.0"},
        },
        "required": ["color", "version"],
    },
    "any_of": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}, {"type": "null"}]},
    "one_of_disjoint": {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "number"}, "maxItems": 2}]},
    "all_optional": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
    },
    "defs_ref": {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/Point"}, "maxItems": 3}, "origin": {"$ref": "#/$defs/Point"}},
        "required": ["origin"],
    },
    "definitions_ref": {
        "definitions": {"Tag": {"type": "string", "enum": ["x", "y"]}},
        "type": "array", "items": {"$ref": "#/definitions/Tag"},
    },
    "string_lengths": {"type": "string", "minLength": 2, "maxLength": 5},
    "string_pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": '^[A-Z]{2}-\\d{3}"?$'}, "free": {"type": "string", "pattern": "ab|\\n"}}, "required": ["code", "free"]},
    "formats": {"type": "array", "prefixItems": [{"type": "string", "format": f} for f in ("date", "time", "date-time", "uuid", "email", "uri")], "items": False},
    "int_bounds": {"type": "array", "items": {"type": "integer", "exclusiveMinimum": -12, "maximum": 7}},
    "nonnegative_number": {"type": "number", "minimum": 0},
    "free_dict": {"type": "object", "additionalProperties": {"type": "integer"}},
    "any_value": {},
    "free_object": {"type": "object"},
    "no_extra_props": {"type": "object", "properties": {}, "additionalProperties": False},
    "type_list": {"type": ["string", "null"], "maxLength": 2},
    "tuple_pydantic": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
    "prefix_then_items": {"type": "array", "prefixItems": [{"type": "null"}], "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
    "odd_keys": {"type": "object", "properties": {'a"b': {"type": "integer"}, "caf\u00e9.*": {"type": "null"}, "\\": {"const": [1]}}, "required": ['a"b']},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_random_members_are_valid_json_under_the_schema(name):
    """Random walks through the schema's FSM always yield JSON that jsonschema accepts."""
    schema = SCHEMAS[name]
    fsm = compile_json_schema(schema)
    rng = random.Random(name)
    for _ in range(60):
        text = sample(fsm, rng, max_steps=80)
        value = json.loads(text)
        jsonschema.validate(value, schema)


def test_pydantic_model_class_is_accepted_and_members_validate_with_pydantic():
    """A pydantic model class lowers via model_json_schema(); members parse as the model."""
    fsm = compile_json_schema(Person)
    assert fsm == compile_regex(regex_from_json_schema(Person.model_json_schema()))
    rng = random.Random(7)
    seen_email = set()
    for _ in range(60):
        text = sample(fsm, rng, max_steps=100)
        person = Person.model_validate_json(text)
        seen_email.add(person.email is None)
    assert seen_email == {True, False}  # the optional property is sometimes left out
    example = Person(name="Ann", age=30, role="caf\u00e9", address=Address(street="Main St", zip="12345"), tags=["a"])
    assert fsm.accepts(json.dumps(example.model_dump(mode="json"), ensure_ascii=False))


def test_whitespace_policy_is_json_dumps_default_layout():
    """Objects/arrays use exactly ', ' and ': '; compact separators are an option."""
    schema = SCHEMAS["defs_ref"]
    value = {"points": [{"x": 1, "y": 2.5}], "origin": {"x": 0, "y": -1}}
    assert compile_json_schema(schema).accepts(json.dumps(value))
    assert not compile_json_schema(schema).accepts(json.dumps(value, indent=2))
    assert not compile_json_schema(schema).accepts(json.dumps(value, separators=(",", ":")))
    compact = compile_json_schema(schema, separators=(",", ":"))
    assert compact.accepts(json.dumps(value, separators=(",", ":")))


def test_optional_properties_may_be_omitted_but_keep_declared_order():
    """All-optional objects accept every in-order subset (including {}) and no reordering."""
    fsm = compile_json_schema(SCHEMAS["all_optional"])
    for text in ["{}", '{"a": 1}', '{"b": true}', '{"a": 1, "c": null}', '{"a": -3, "b": false, "c": null}']:
        assert fsm.accepts(text), text
    for text in ['{"b": true, "a": 1}', '{, "a": 1}', '{"a": 1, }', '{"a": 1 "b": true}']:
        assert not fsm.accepts(text), text


def test_array_item_counts_are_enforced():
    """minItems/maxItems bound the number of items exactly."""
    fsm = compile_json_schema(SCHEMAS["array_bounds"])
    assert fsm.accepts("[1, 2]") and fsm.accepts("[-5, 300, 0, 7]")
    assert not fsm.accepts("[1]") and not fsm.accepts("[1, 2, 3, 4, 5]")
    assert not fsm.accepts("[301, 1]") and not fsm.accepts("[-6, 1]")


def test_enum_and_const_match_only_their_json_literals():
    """enum/const accept exactly the json.dumps forms of their values."""
    fsm = compile_json_schema(SCHEMAS["enum_const"])
    for color in ["red", 'gr"een', 3, None, {"a": [1, 2]}]:
        assert fsm.accepts(json.dumps({"color": color, "version": "v1.0"}))
    assert not fsm.accepts(json.dumps({"color": "blue", "version": "v1.0"}))
    assert not fsm.accepts(json.dumps({"color": "red", "version": "v2"}))


def test_string_pattern_is_searched_and_json_escaped():
    """A JSON 'pattern' constrains the decoded string (unanchored = search), escaped as JSON."""
    fsm = compile_json_schema(SCHEMAS["string_pattern"])
    ok = [{"code": 'AB-123"', "free": "xxabyy"}, {"code": "ZZ-000", "free": "line\nbreak"}]
    for value in ok:
        assert fsm.accepts(json.dumps(value, ensure_ascii=False)), value
    bad = [{"code": "AB-12", "free": "ab"}, {"code": "xAB-123", "free": "ab"}, {"code": "AB-123", "free": "a b"}]
    for value in bad:
        assert not fsm.accepts(json.dumps(value)), value


def test_integer_range_regex_matches_exactly_the_range():
    """int_range_regex(lo, hi) accepts exactly the canonical integers in [lo, hi]."""
    rng = random.Random(3)
    cases = [(0, None), (None, None), (None, -1), (7, 123), (-5, 5), (-123, -7), (99, 100), (10, None)]
    cases += [(a, a + rng.choice([0, 9, 250, 2000])) for a in (rng.randint(-3000, 3000) for _ in range(15))]
    for lo, hi in cases:
        rx = re.compile(int_range_regex(lo, hi))
        for n in range(-3500, 5500):
            assert bool(rx.fullmatch(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), (lo, hi, n)
        for bad in ["-0", "01", "+1", ""]:
            assert not rx.fullmatch(bad)


def test_any_value_schema_bounds_nesting_depth():
    """{} accepts any JSON value up to max_nesting levels of arrays/objects."""
    fsm = compile_json_schema({}, max_nesting=2)
    assert fsm.accepts('{"a": [1, {"b": null}]}') is False  # three levels deep
    assert fsm.accepts('{"a": [1, "x"]}') and fsm.accepts("[[true], {}]") and fsm.accepts('"s"')


@pytest.mark.parametrize(
    "schema,keyword,path",
    [
        ({"type": "object", "patternProperties": {"^a": {}}}, "patternProperties", "#/patternProperties"),
        ({"if": {"type": "string"}, "then": {"maxLength": 2}}, "if", "#/if"),
        ({"not": {"type": "string"}}, "not", "#/not"),
        ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "allOf", "#/allOf"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "#/uniqueItems"),
        ({"type": "number", "maximum": 3.5}, "maximum", "#/maximum"),
        ({"type": "string", "format": "hostname"}, "format", "#/format"),
        ({"type": "object", "properties": {"x": {"type": "string", "minProperties": 1}}}, "minProperties", "#/properties/x/minProperties"),
        ({"$defs": {"N": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/N"}}}}}, "$ref": "#/$defs/N"}, "$ref", "/$ref"),
        ({"type": "string", "pattern": "(?=a)b"}, "pattern", "#/pattern"),
        ({"$ref": "other.json#/x"}, "$ref", "#/$ref"),
    ],
)
def test_unsupported_keywords_raise_naming_keyword_and_path(schema, keyword, path):
    """Keywords that cannot be lowered raise UnsupportedSchemaError with the keyword and JSON path."""
    with pytest.raises(UnsupportedSchemaError) as info:
        regex_from_json_schema(schema)
    assert info.value.keyword == keyword
    assert path in info.value.path


@pytest.mark.parametrize(
    "schema,message",
    [
        ({"$ref": "#/$defs/Missing"}, "points nowhere"),
        ({"type": "strin"}, "unknown type"),
        ({"type": "string", "maxLength": -1}, "non-negative integer"),
        ({"enum": []}, "non-empty list"),
        ("{not json", "not valid JSON"),
        ({"type": "string", "pattern": "(unclosed"}, "not a valid regex"),
    ],
)
def test_malformed_schemas_raise_invalid_schema_error(schema, message):
    """Malformed schemas raise InvalidSchemaError with a message naming the problem."""
    with pytest.raises(InvalidSchemaError, match=re.escape(message)):
        regex_from_json_schema(schema)


def test_schema_given_as_json_string_equals_dict_form():
    """SGLang passes json_schema as a string; it lowers exactly like the dict."""
    schema = SCHEMAS["enum_const"]
    assert regex_from_json_schema(json.dumps(schema)) == regex_from_json_schema(schema)


@pytest.mark.parametrize("schema,message", [
    ({"type": "integer", "maximum": 10**5000}, "integer bounds of 10\\^40 or more"),
    ({"type": "integer", "minimum": -(10**40)}, "integer bounds of 10\\^40 or more"),
    ({"type": "integer", "exclusiveMaximum": float("inf")}, "finite number"),
    ({"type": "integer", "minimum": float("nan")}, "finite number"),
])
def test_huge_or_non_finite_integer_bounds_are_refused_by_name(schema, message):
    """Python's own int -> str (past 4,300 digits) or math.ceil(inf) never reaches the client:
    the bound is refused naming the keyword, as the grammar path does."""
    with pytest.raises((UnsupportedSchemaError, InvalidSchemaError), match=message):
        regex_from_json_schema(schema)
    assert regex_from_json_schema({"type": "integer", "maximum": 10**39})  # just under the limit
