"""Grammars on the wire (issue 27): SGLang's ``/generate`` ``sampling_params.ebnf``, the OpenAI
endpoints' ``ebnf`` (SGLang's extension) and ``grammar`` (what llama-server's users send), and
``response_format`` json_schema with a recursive schema, through the real ``openai`` client; each
answer parses with an independent parser; a bad grammar is a 400 naming where; two constraints at
once are a 400 naming both.
"""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from grammar_oracle import lark_parser_for
from grpc_helpers import runtime_fixture
from server_helpers import http_base, post_json
from sglc.grammar import parse_gbnf

pytestmark = pytest.mark.model

runtime = runtime_fixture(4096, http_port=0)

#: Nested lists of digits (recursive: no regex can express it).
NESTED = 'root ::= list\nlist ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9] | list'
TREE = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
    "required": ["name", "children"], "additionalProperties": False,
    "$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["name", "children"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


@pytest.fixture(scope="module")
def client(base) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=120)


def nested_ok(text: str) -> bool:
    return lark_parser_for(parse_gbnf(NESTED)).accepts(text)


def test_sglang_generate_takes_ebnf(base):
    status, body = post_json(base, "/generate", {
        "text": ["A nested list of digits: ", "Digits in lists: "],
        "sampling_params": {"ebnf": NESTED, "max_new_tokens": 64, "temperature": 1.0}})
    assert status == 200, body
    for item in body:
        if item["meta_info"]["finish_reason"]["type"] == "stop":
            assert nested_ok(item["text"]), item["text"]
        else:
            assert item["text"].startswith("[")


@pytest.mark.parametrize("field", ["ebnf", "grammar"])
def test_openai_completions_take_ebnf_and_llama_servers_grammar(client, field):
    out = client.completions.create(model="default", prompt="A nested list of digits: ", max_tokens=64,
                                    temperature=1.0, seed=5, extra_body={field: NESTED})
    text, reason = out.choices[0].text, out.choices[0].finish_reason
    assert nested_ok(text) if reason == "stop" else text.startswith("["), (text, reason)


def test_chat_with_a_recursive_json_schema_answers_valid_json(client):
    out = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "A tiny family tree as JSON."}],
        max_tokens=200, temperature=0.7, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "tree", "schema": TREE, "strict": True}})
    choice = out.choices[0]
    if choice.finish_reason == "stop":
        jsonschema.validate(json.loads(choice.message.content), TREE)
    else:
        assert choice.message.content.startswith("{")


def test_a_bad_grammar_is_a_400_naming_line_and_column(client, base):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="default", prompt="x", max_tokens=4, extra_body={"grammar": 'root ::= "a" )'})
    assert "line 1" in str(err.value) and "column" in str(err.value)
    status, body = post_json(base, "/generate", {"text": "x", "sampling_params": {"ebnf": "root ::= b",
                                                                                  "max_new_tokens": 4}})
    assert status == 400 and "'b'" in json.dumps(body), body


def test_two_constraints_are_a_400_naming_both(client, base):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="default", prompt="x", max_tokens=4,
                                  extra_body={"grammar": NESTED, "regex": "[0-9]+"})
    assert "'regex'" in str(err.value) and "'grammar'" in str(err.value)
    status, body = post_json(base, "/generate", {"text": "x", "sampling_params": {
        "ebnf": NESTED, "regex": "[0-9]+", "max_new_tokens": 4}})
    assert status == 400 and "at most one constraint" in json.dumps(body), body
