"""OpenAI response bodies pass their pydantic models (runtime/server/openai_response.py): every
whole answer and error body openai_protocol builds is checked, and dumped exactly as given; the
stream chunks' shapes are checked here and, over a real server, in tests/test_http_server.py."""
from __future__ import annotations

import pydantic
import pytest

from sglc_runtime.server import openai_protocol as proto
from sglc_runtime.server.openai_response import ChatCompletionChunk, Completion, checked


def decode(ids: list[int]) -> str:
    return "".join(chr(ord("a") + i) for i in ids)


def test_a_completion_with_logprobs_and_usage_is_dumped_as_given():
    lp = proto.completion_logprobs(decode, [0, 1], [-0.5, None], [[(0, -0.5)], None], 0)
    body = proto.answer("text_completion", "cmpl-1", "m", [{"index": 0, "text": "ab", "logprobs": lp,
                                                              "finish_reason": "length"}], proto.usage(3, 2, 1))
    assert body["choices"][0]["logprobs"] == {"tokens": ["a", "b"], "token_logprobs": [-0.5, None],
                                              "top_logprobs": [{"a": -0.5}, None], "text_offset": [0, 1]}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                             "prompt_tokens_details": {"cached_tokens": 1}}
    assert set(body) == {"id", "object", "created", "model", "choices", "usage"}


def test_a_chat_chunk_keeps_an_empty_delta_and_null_logprobs():
    chunk = checked(ChatCompletionChunk, proto.envelope("chat.completion.chunk", "c-1", "m", [
        {"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}]))
    assert chunk["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}]
    assert "usage" not in chunk


def test_a_chat_answer_with_logprobs():
    lps = proto.chat_logprobs(decode, [2], [None], None)  # a forced token: logprob 0, no top list
    body = proto.answer("chat.completion", "c-2", "m", [{"index": 0, "message": {"role": "assistant", "content": "c"},
                                                           "logprobs": lps, "finish_reason": "stop"}])
    assert body["choices"][0]["logprobs"]["content"] == [{"token": "c", "logprob": 0.0, "bytes": [99],
                                                          "top_logprobs": []}]


@pytest.mark.parametrize("kind, choice", [
    ("text_completion", {"index": 0, "txt": "typo"}),
    ("chat.completion", {"index": 0, "message": {"role": "user", "content": "x"}}),
    ("chat.completion", {"index": "0", "message": {"role": "assistant", "content": "x"}}),
])
def test_a_malformed_answer_fails_in_the_server_not_in_the_client(kind, choice):
    with pytest.raises(pydantic.ValidationError):
        proto.answer(kind, "x", "m", [choice])


def test_a_malformed_chunk_fails_its_model():
    with pytest.raises(pydantic.ValidationError):
        checked(ChatCompletionChunk, proto.envelope("chat.completion.chunk", "x", "m", [{"index": "0", "delta": {}}]))
    with pytest.raises(pydantic.ValidationError):
        checked(Completion, proto.envelope("text_completion", "x", "m", [{"index": 0, "txt": "typo"}]))


def test_error_bodies_have_openais_shape():
    assert proto.error_body("bad", param="n") == {"error": {"message": "bad", "type": "invalid_request_error",
                                                            "param": "n", "code": None}}
    with pytest.raises(pydantic.ValidationError):
        proto.error_body("bad", code=1.5)  # type: ignore[arg-type]
