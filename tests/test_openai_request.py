"""OpenAI request bodies as pydantic models (runtime/server/openai_request.py): the sampling
fields are the sampling table's openai column, checked by each row under the client's spelling;
unknown and unsupported fields are 400s naming the field."""
from __future__ import annotations

import json

import pytest

from sglc.wire import sampling_table
from sglc_runtime.server.openai_request import ChatRequest, CompletionRequest, parse_chat, parse_completion
from sglc_runtime.server.request_model import FieldError
from sglc_runtime.sampling.sampling_params import SamplingParams

#: One valid value per OpenAI spelling (by the row's kind).
VALUE = {"int": 3, "float": 0.5, "bool": True, "str_list": ["\n"], "token_ids": [2]}


def refused(parse, body, param: str, *words: str) -> str:
    with pytest.raises(FieldError) as info:
        parse(body).sampling_fields()
    assert info.value.param == param, str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("model", [CompletionRequest, ChatRequest])
def test_every_openai_spelling_of_the_table_is_a_field(model):
    """The request models take exactly the table's openai column as sampling fields."""
    assert set(sampling_table.BY_OPENAI) <= set(model.model_fields)
    assert {"max_tokens", "max_completion_tokens", "min_tokens", "seed"} <= set(sampling_table.BY_OPENAI)


def test_each_spelling_arrives_in_sampling_params_under_its_name():
    """Every OpenAI sampling field becomes the runtime field its row names, and SamplingParams takes it."""
    for key, row in sampling_table.BY_OPENAI.items():
        fields = parse_completion({"prompt": "x", key: VALUE[row.kind]}).sampling_fields()
        assert fields == {row.name: VALUE[row.kind]}, key
        SamplingParams(**fields)


def test_out_of_range_values_are_refused_under_the_clients_spelling():
    refused(parse_completion, {"prompt": "x", "max_completion_tokens": -1}, "max_completion_tokens",
            "'max_completion_tokens' must be an int in [0, 1048576], got -1")
    refused(parse_completion, {"prompt": "x", "top_p": 0}, "top_p", "(0, 1]")
    refused(parse_chat, {"messages": [{"role": "user", "content": "x"}], "min_tokens": 2**21}, "min_tokens")


def test_wrong_types_unknown_fields_and_unsupported_values_name_the_field():
    refused(parse_completion, {"prompt": "x", "max_tokens": "5"}, "max_tokens", "valid integer")
    refused(parse_completion, {"prompt": "x", "ignore_eos": 1}, "ignore_eos", "valid boolean")
    refused(parse_completion, {"prompt": "x", "temprature": 0}, "temprature", "not a field of OpenAI's completions")
    refused(parse_completion, {"prompt": "x", "suffix": "end"}, "suffix", "not supported")
    refused(parse_completion, {"prompt": "x", "logit_bias": {"5": 10}}, "logit_bias", "not supported")
    refused(parse_chat, {"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}, "tool_choice")
    refused(parse_completion, {"prompt": "x", "max_tokens": 3, "max_completion_tokens": 4}, "max_completion_tokens",
            "not both")


def test_defaults_are_accepted_as_clients_send_them():
    """null for every field, best_of 1, tool_choice "none", an empty logit_bias: accepted, no effect."""
    body = {"prompt": "x", **{k: None for k in sampling_table.BY_OPENAI}, "best_of": 1, "logit_bias": {},
            "user": "u-1", "stream": None, "n": None}
    assert parse_completion(body).sampling_fields() == {}
    chat = parse_chat({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none", "tools": []})
    assert chat.sampling_fields() == {}


def test_prompt_forms():
    assert parse_completion({"prompt": "a"}).prompts() == ["a"]
    assert parse_completion({"prompt": ["a", "b"]}).prompts() == ["a", "b"]
    assert parse_completion({"prompt": [1, 2]}).prompts() == [[1, 2]]
    assert parse_completion({"prompt": [[1], [2, 3]]}).prompts() == [[1], [2, 3]]
    with pytest.raises(FieldError, match="'prompt' must be a string, a non-empty list"):
        parse_completion({"prompt": []}).prompts()
    with pytest.raises(FieldError, match="a token-id list must not be empty"):
        parse_completion({"prompt": [[1], []]}).prompts()
    with pytest.raises(FieldError, match="prompt"):
        parse_completion({"prompt": [True]})


def test_constraints_regex_or_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert json.loads(parse_completion({"prompt": "x", "response_format": fmt}).sampling_fields()["json_schema"]) == schema
    assert parse_completion({"prompt": "x", "response_format": {"type": "json_object"}}).sampling_fields() == {
        "json_schema": '{"type": "object"}'}
    assert parse_completion({"prompt": "x", "response_format": {"type": "text"}}).sampling_fields() == {}
    assert parse_completion({"prompt": "x", "regex": "[0-9]+"}).sampling_fields() == {"regex": "[0-9]+"}
    refused(parse_completion, {"prompt": "x", "regex": "a", "response_format": fmt}, "response_format", "at most one")
    refused(parse_completion, {"prompt": "x", "response_format": {"type": "json_schema"}},
            "response_format.json_schema.schema")
    refused(parse_completion, {"prompt": "x", "response_format": {"type": "yaml"}}, "response_format.type")


def test_chat_messages_text_parts_join_and_other_parts_are_refused():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    chat = parse_chat({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": parts},
                                    {"role": "assistant", "content": None}]})
    assert chat.chat_messages() == [{"role": "system", "content": "s"}, {"role": "user", "content": "ab"},
                                    {"role": "assistant", "content": ""}]
    image = [{"type": "image_url", "image_url": {"url": "x"}}]
    refused(parse_chat, {"messages": [{"role": "user", "content": image}]}, "messages[0].content[0].type", "text-only")
    refused(parse_chat, {"messages": []}, "messages")
    refused(parse_chat, {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
            "messages[0].content[0].text", "valid string, got 5")
