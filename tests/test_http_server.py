"""The runtime's HTTP server (OpenAI-compatible + SGLang-native) on the real default model.

One in-process runtime with gRPC and HTTP on 127.0.0.1 (free ports); the REAL `openai` client
talks to it. Greedy answers over HTTP equal the engine's; bad requests get 4xx in OpenAI's
error shape and the server keeps serving.
"""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.request

import openai
import pytest

from grpc_helpers import runtime_fixture

from sglc_runtime.sampling.sampling_params import SamplingParams
from sglc_runtime.server.openai_response import ChatCompletionChunk, Completion, checked

pytestmark = pytest.mark.model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


runtime = runtime_fixture(4096, http_port=0)


@pytest.fixture(scope="module")
def base(runtime) -> str:
    http = [f for f in runtime.frontends if f.kind == "http"]
    assert len(http) == 1
    return f"http://{http[0].address}"


@pytest.fixture(scope="module")
def client(base) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def post(base: str, path: str, body: bytes | dict) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get_text(base: str, path: str) -> str:
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.read().decode()


def assert_serving(client, model) -> None:
    r = client.completions.create(model=model, prompt="One, two,", max_tokens=2, temperature=0)
    assert r.choices[0].text and r.usage.completion_tokens == 2


def test_models_lists_the_served_model(client, model):
    """/v1/models names the one model this server runs."""
    assert model == "SmolLM2-135M-Instruct"


def test_completion_greedy_equals_engine(client, model, runtime):
    """A greedy /v1/completions answer is the engine's own greedy text, with usage counts."""
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    rid = runtime.engine.submit("The capital of France is", SamplingParams(max_new_tokens=8, temperature=0.0))
    assert r.choices[0].text == runtime.engine.wait(rid).text
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"


def test_completion_prompts_as_token_id_lists_equal_the_texts(client, model, runtime):
    """OpenAI's prompt forms: a list of token-id lists gives one choice per prompt, each the greedy
    answer to the same text."""
    texts = ["The capital of France is", "One, two,"]
    ids = [list(runtime.engine.tokenizer.encode(t)) for t in texts]
    by_ids = client.completions.create(model=model, prompt=ids, max_tokens=4, temperature=0)
    by_text = client.completions.create(model=model, prompt=texts, max_tokens=4, temperature=0)
    assert [c.text for c in by_ids.choices] == [c.text for c in by_text.choices]
    assert len(by_ids.choices) == 2


def test_completion_stop_and_n(client, model):
    """`stop` cuts the text before the stop string; `n` returns n choices."""
    r = client.completions.create(model=model, prompt="Count: 1, 2, 3,", max_tokens=20, temperature=0, stop=[","])
    assert "," not in r.choices[0].text and r.choices[0].finish_reason == "stop"
    r = client.completions.create(model=model, prompt="A fruit:", max_tokens=4, temperature=0.8, top_p=0.9, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]


def test_completion_logprobs_and_echo(client, model):
    """logprobs gives one value per generated token (top-k dicts); echo+max_tokens=0 scores the prompt."""
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=3, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.token_logprobs) == 3
    assert all(x <= 0 for x in lp.token_logprobs) and all(len(t) == 2 for t in lp.top_logprobs)
    # greedy: the chosen token is the best of its top-k
    assert all(math.isclose(max(t.values()), x, abs_tol=1e-4) for t, x in zip(lp.top_logprobs, lp.token_logprobs))
    r = client.completions.create(model=model, prompt="Hello world", max_tokens=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "Hello world" and "".join(lp.tokens) == "Hello world"
    assert lp.token_logprobs[0] is None and all(x < 0 for x in lp.token_logprobs[1:])


def test_chat_uses_the_chat_template(client, model, runtime):
    """/v1/chat/completions renders the tokenizer's chat template: same greedy text as the engine on it."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                       logprobs=True, top_logprobs=2)
    text = runtime.engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    rid = runtime.engine.submit(text, SamplingParams(max_new_tokens=12, temperature=0.0))
    assert r.choices[0].message.content == runtime.engine.wait(rid).text
    assert r.choices[0].message.role == "assistant"
    content = r.choices[0].logprobs.content
    assert "".join(c.token for c in content) == r.choices[0].message.content
    assert all(len(c.top_logprobs) == 2 for c in content)


def test_streaming_chunks_concatenate_to_the_full_answer(client, model):
    """SSE streaming (completions and chat) yields deltas that join to the non-streamed greedy text."""
    full = client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0)
    parts = list(client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0,
                                           stream=True))
    assert len(parts) > 2 and "".join(p.choices[0].text for p in parts) == full.choices[0].text
    msgs = [{"role": "user", "content": "Say hello."}]
    full = client.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0)
    parts = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0, stream=True))
    assert "".join(p.choices[0].delta.content or "" for p in parts) == full.choices[0].message.content
    assert parts[-1].choices[0].finish_reason in ("length", "stop")


def test_stream_options_include_usage_ends_the_stream_with_the_usage(client, model):
    """stream_options={"include_usage": true}: the last chunk has no choices and the same usage as
    the non-streamed answer (both endpoints, n=2 summed)."""
    full = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0, n=2)
    parts = list(client.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0, n=2,
                                           stream=True, stream_options={"include_usage": True}))
    assert parts[-1].choices == [] and all(p.choices for p in parts[:-1])
    assert (parts[-1].usage.prompt_tokens, parts[-1].usage.completion_tokens) == (
        full.usage.prompt_tokens, full.usage.completion_tokens)
    msgs = [{"role": "user", "content": "Say hello."}]
    full = client.chat.completions.create(model=model, messages=msgs, max_tokens=6, temperature=0)
    parts = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=6, temperature=0, stream=True,
                                                stream_options={"include_usage": True}))
    assert parts[-1].choices == [] and parts[-1].usage.completion_tokens == full.usage.completion_tokens
    assert parts[-1].usage.total_tokens == full.usage.total_tokens


def _sse_events(base: str, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        lines = [line[len("data: "):] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_every_streamed_chunk_has_openais_shape(base):
    """The server does not re-validate each chunk (they are built per token), so this does: every
    SSE event of both endpoints, with echo, logprobs, n=2 and the usage chunk, passes its response
    model unchanged (no field missing, misspelled or of the wrong type)."""
    streams = {
        "/v1/completions": (Completion, {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "n": 2,
                                         "echo": True, "logprobs": 2, "stream": True,
                                         "stream_options": {"include_usage": True}}),
        "/v1/chat/completions": (ChatCompletionChunk, {"messages": [{"role": "user", "content": "Say hello."}],
                                                       "max_tokens": 4, "temperature": 0, "n": 2, "logprobs": True,
                                                       "top_logprobs": 2, "stream": True,
                                                       "stream_options": {"include_usage": True}}),
    }
    for path, (response_model, body) in streams.items():
        events = _sse_events(base, path, body)
        assert len(events) > 4 and events[-1]["usage"]["completion_tokens"] == 8, path
        for event in events:
            assert checked(response_model, event) == event, (path, event)


def test_json_schema_response_format_output_validates(client, model):
    """response_format json_schema constrains the output: it parses and matches the schema."""
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Describe a person as JSON."}], max_tokens=60,
        temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    obj = json.loads(r.choices[0].message.content)
    assert set(obj) == {"name", "age"} and isinstance(obj["name"], str) and len(obj["name"]) <= 12
    assert isinstance(obj["age"], int) and 0 <= obj["age"] <= 120


def test_regex_extension_constrains_completion(client, model):
    """The `regex` extension field makes the completion match the pattern."""
    r = client.completions.create(model=model, prompt="Today's date:", max_tokens=20, temperature=0,
                                  extra_body={"regex": r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"})
    import re
    assert re.fullmatch(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", r.choices[0].text)


def test_sglang_generate_returns_text_and_meta_info(base, runtime):
    """/generate answers SGLang's shape; a repeated prompt shows cached tokens; logprobs on request."""
    body = {"text": "The sky is", "sampling_params": {"max_new_tokens": 5, "temperature": 0},
            "return_logprob": True, "top_logprobs_num": 2}
    status, out = post(base, "/generate", body)
    assert status == 200 and out["meta_info"]["completion_tokens"] == 5
    assert out["meta_info"]["finish_reason"]["type"] == "length" and len(out["meta_info"]["output_token_logprobs"]) == 5
    status, again = post(base, "/generate", body)
    assert again["text"] == out["text"] and again["meta_info"]["cached_tokens"] > 0
    ids = runtime.engine.tokenizer.encode("The sky is")
    status, by_ids = post(base, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 5,
                                                                                      "temperature": 0}})
    assert status == 200 and by_ids["meta_info"]["prompt_tokens"] == len(ids)
    status, js = post(base, "/generate", {"text": "A person:", "sampling_params": {
        "max_new_tokens": 60, "temperature": 0, "json_schema": json.dumps(PERSON)}})
    assert set(json.loads(js["text"])) == {"name", "age"}


def test_info_health_flush_and_prometheus_metrics(base):
    """/health, /get_model_info, /get_server_info, /flush_cache answer; /metrics is Prometheus text."""
    assert json.loads(get_text(base, "/health"))["status"] == "serving"
    assert json.loads(get_text(base, "/get_model_info"))["context_length"] > 0
    assert "metrics" in json.loads(get_text(base, "/get_server_info"))
    status, flushed = post(base, "/flush_cache", {})
    assert status in (200, 409) and "flushed" in flushed
    text = get_text(base, "/metrics")
    samples = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if not line.startswith("#")}
    for name in ("sglc_prompt_tokens", "sglc_cached_tokens", "sglc_cache_hit_rate", "sglc_num_waiting",
                 "sglc_pool_usage"):
        assert name in samples, name
    assert "# TYPE sglc_prompt_tokens gauge" in text


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    ({"model": "gpt-nope", "prompt": "hi"}, 404, "does not exist"),
    ({"prompt": "hi", "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": "hi", "regex": "(("}, 400, "regex"),
    ({"prompt": "x " * 20000, "max_tokens": 1}, 400, "context"),
    ({"prompt": "hi", "n": 0}, 400, "'n'"),
    ({"prompt": "hi", "max_tokens": "5"}, 400, "'max_tokens': Input should be a valid integer"),
    ({"prompt": "hi", "temprature": 0}, 400, "'temprature' is not a field of OpenAI's completions request"),
    ({"prompt": "hi", "best_of": 3}, 400, "'best_of' is not supported"),
])
def test_bad_requests_get_openai_errors_and_server_keeps_serving(base, client, model, body, status, words):
    """Each bad request gets a 4xx with {"error": {message, type, param, code}} naming the problem;
    a good request right after it succeeds."""
    got, out = post(base, "/v1/completions", body)
    assert got == status, out
    assert set(out["error"]) == {"message", "type", "param", "code"}
    assert words.lower() in out["error"]["message"].lower(), out
    assert_serving(client, model)


def test_openai_client_raises_status_errors(client, model):
    """The openai client sees our errors as its typed exceptions (NotFound, BadRequest)."""
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=-5)
    image = [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
    with pytest.raises(openai.BadRequestError, match="text-only"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": image}])
    with pytest.raises(openai.BadRequestError, match="'tools' is not supported"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert_serving(client, model)


def test_sglang_generate_streams_cumulative_text_then_done(base):
    """/generate with stream=true sends SSE events whose text grows to the full answer, then [DONE]."""
    body = json.dumps({"text": "The sky is", "stream": True,
                       "sampling_params": {"max_new_tokens": 6, "temperature": 0}}).encode()
    req = urllib.request.Request(base + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        events = [line[len("data: "):] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) > 2
    parsed = [json.loads(e) for e in events[:-1]]
    texts = [p["text"] for p in parsed]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    _, full = post(base, "/generate", {"text": "The sky is", "sampling_params": {"max_new_tokens": 6,
                                                                                 "temperature": 0}})
    assert texts[-1] == full["text"] and parsed[-1]["meta_info"]["completion_tokens"] == 6


def test_logprobs_of_a_constrained_chat_answer_cover_jump_forward_tokens(client, model):
    """A json_object answer with logprobs: every token has a number (forced tokens count as logprob 0),
    and the tokens join to the answer (found by the server fuzz: a 500 on float(None))."""
    out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Give me JSON."}],
                                         max_tokens=12, temperature=0, logprobs=True, top_logprobs=2,
                                         response_format={"type": "json_object"})
    choice = out.choices[0]
    tokens = choice.logprobs.content
    assert tokens and "".join(t.token for t in tokens) == choice.message.content
    assert all(isinstance(t.logprob, float) and t.logprob <= 0.0 for t in tokens)
    assert any(t.logprob == 0.0 and not t.top_logprobs for t in tokens)  # the forced '{' at least


def test_a_stopped_http_server_lets_go_of_its_engine():
    """Whatever holds the app after a stop (FastAPI kept every endpoint in module-level caches); the endpoints
    must not keep the service, the engine and its model alive once the server stopped (each
    in-process server of a test run would stay resident, ~1.3 GB apiece)."""
    import gc
    import time
    import weakref

    from sglc_runtime.server.launch import Runtime, ServeConfig

    rt = Runtime(ServeConfig(model="default", port=0, http_port=0, kv_slots=1024))
    (http,) = [f for f in rt.frontends if f.kind == "http"]
    request = urllib.request.Request(f"http://{http.address}/generate", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 2}}).encode())
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert json.loads(answer.read())["meta_info"]["completion_tokens"] == 2
    engine, service = weakref.ref(rt.engine), weakref.ref(rt.service)
    rt.stop()
    del rt, http
    deadline = time.monotonic() + 10
    while (engine() is not None or service() is not None) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.1)
    assert engine() is None and service() is None, "the stopped server's engine is still referenced"
