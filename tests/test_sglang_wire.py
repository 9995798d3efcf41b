"""/generate in SGLang's wire format, field by field, over loopback HTTP on one in-process runtime
(real default model): what SGLang's client and sglang-router send is honoured, what we cannot
honour is a 400 naming the field, every limit applies before the work, and the endpoints SGLang's
tooling probes answer.
"""
from __future__ import annotations

import json
import re
import threading
import time

import pytest

from grpc_helpers import runtime_fixture

from server_helpers import call, http_base, post_json, wait_idle
from sglc_runtime.server.limits import ServerLimits

pytestmark = pytest.mark.model

LIMITS = ServerLimits(max_n=4, max_batch=6, max_top_logprobs=5, max_stop_strings=3)
PROMPT = "Q: What is the capital of France?\nA:"
#: Exactly what SGLang 0.5.23's RuntimeEndpoint.generate sends for gen(max_tokens=8, temperature=0).
SGLANG_CLIENT_PARAMS = {
    "skip_special_tokens": True, "spaces_between_special_tokens": True, "max_new_tokens": 8, "min_new_tokens": 0,
    "n": 1, "stop": [], "stop_token_ids": None, "stop_regex": None, "temperature": 0, "top_p": 1.0, "top_k": -1,
    "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "ignore_eos": False, "regex": None,
    "json_schema": None,
}
GREEDY = {"max_new_tokens": 8, "temperature": 0}


runtime = runtime_fixture(8192, http_port=0, limits=LIMITS)


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return http_base(runtime)


def generate(base: str, body: dict) -> tuple[int, object]:
    return post_json(base, "/generate", body)


def sse_events(base: str, body: dict) -> list:
    status, data = call(base, "POST", "/generate", {**body, "stream": True})
    assert status == 200, data
    events = [line[len("data: "):] for line in data.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_the_full_sampling_params_sglangs_client_sends_are_accepted(base):
    """Every field SGLang's client sends on every call (nulls, [] stops, n=1): 200, and the same greedy
    answer as the minimal request."""
    status, full = generate(base, {"text": PROMPT, "sampling_params": SGLANG_CLIENT_PARAMS})
    assert status == 200, full
    _, minimal = generate(base, {"text": PROMPT, "sampling_params": GREEDY})
    assert full["text"] == minimal["text"] and full["text"]
    meta = full["meta_info"]
    assert {"id", "prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason", "e2e_latency"} <= set(meta)
    assert meta["finish_reason"] == {"type": "length", "length": 8}


@pytest.mark.parametrize("body, field", [
    ({"text": "x", "bogus": 1}, "'bogus'"),
    ({"text": "x", "sampling_params": {"bogus": 1}}, "'sampling_params.bogus'"),
    ({"text": ["x", "y"], "sampling_params": [{}, {"bogus": 1}]}, "'sampling_params[1].bogus'"),
    ({"text": "x", "sampling_params": {"temperature": "0.5"}}, "'sampling_params.temperature'"),
    ({"text": "x", "sampling_params": {"ignore_eos": 1}}, "'sampling_params.ignore_eos'"),
    ({"text": "x", "sampling_params": {"ebnf": 5}}, "'sampling_params.ebnf'"),
    ({"text": "x", "sampling_params": {"structural_tag": {"begin": "<"}}}, "'sampling_params.structural_tag'"),
    ({"text": "x", "sampling_params": {"logit_bias": {"5": 1.0}}}, "'sampling_params.logit_bias'"),
    ({"text": "x", "sampling_params": {"max_new_tokens": None}}, "'sampling_params.max_new_tokens'"),
    ({"text": "x", "sampling_params": {"n": 0}}, "'sampling_params.n'"),
    ({"text": "x", "sampling_params": {"skip_special_tokens": False, "spaces_between_special_tokens": False}},
     "'sampling_params.spaces_between_special_tokens'"),
    ({"text": "x", "sampling_params": {"stop_regex": "(("}}, "stop_regex"),
    ({"text": "x", "lora_path": "adapter"}, "'lora_path'"),
    ({"text": "x", "session_params": {"id": "s"}}, "'session_params'"),
    ({"text": "x", "image_data": "cat.png"}, "'image_data'"),
    ({"text": "x", "return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": 0}, "input_top_logprobs"),
    ({"text": "x", "rid": ["a", "b"]}, "'rid'"),
    ({"text": ["x", "y"], "return_logprob": [True]}, "'return_logprob'"),
])
def test_a_field_we_cannot_honour_is_a_400_naming_it(base, runtime, body, field):
    """Unknown fields, wrong types and values this server cannot honour: 400 whose message names the
    field (never a Python error text); nothing stays running; the next request is served."""
    status, out = generate(base, body)
    assert status == 400, out
    assert field in out["error"]["message"], out
    assert "Traceback" not in out["error"]["message"]
    if field.startswith("'"):  # the error body's param names the field too
        assert out["error"]["param"] == field.strip("'"), out
    assert runtime.service.num_active == 0
    assert generate(base, {"text": "Hi", "sampling_params": {"max_new_tokens": 1}})[0] == 200


def test_unsupported_fields_at_their_defaults_are_accepted(base):
    """What the router and clients send unset (null / false) is not refused."""
    status, out = generate(base, {"text": PROMPT, "sampling_params": {**GREEDY, "ebnf": None, "stream_interval": 4},
                                  "lora_path": None, "session_params": None, "return_hidden_states": False,
                                  "log_metrics": True, "image_data": None, "routing_key": "k"})
    assert status == 200, out


def test_the_fields_sglang_router_adds_are_accepted(base):
    """sglang-router 0.3.2 forwards its own GenerateRequest, which adds model, no_logs, custom_labels,
    extra_key, return_bytes, return_entropy (null when unset): 200 and the plain greedy answer."""
    _, plain = generate(base, {"text": PROMPT, "sampling_params": GREEDY})
    status, routed = generate(base, {"text": PROMPT, "sampling_params": GREEDY, "model": "SmolLM2-135M-Instruct",
                                     "no_logs": None, "custom_labels": None, "extra_key": None,
                                     "return_bytes": None, "return_entropy": None, "priority": None})
    assert status == 200 and routed["text"] == plain["text"]
    status, out = generate(base, {"text": PROMPT, "extra_key": "tenant-a"})
    assert status == 400 and out["error"]["param"] == "extra_key"


def test_n_samples_answer_a_list_in_sglangs_order(base):
    """n=2 on a batch of two: four answers, prompt-major (p0 s0, p0 s1, p1 s0, p1 s1), each greedy
    sample equal to the single call; a single prompt with n>1 answers a list too."""
    prompts = [PROMPT, "Q: What is 3 + 4?\nA:"]
    status, out = generate(base, {"text": prompts, "sampling_params": {**GREEDY, "n": 2}})
    assert status == 200 and len(out) == 4
    singles = [generate(base, {"text": p, "sampling_params": GREEDY})[1]["text"] for p in prompts]
    assert [o["text"] for o in out] == [singles[0], singles[0], singles[1], singles[1]]
    assert len({o["meta_info"]["id"] for o in out}) == 4
    status, one = generate(base, {"text": PROMPT, "rid": "mine", "sampling_params": {**GREEDY, "n": 3}})
    assert status == 200 and [o["meta_info"]["id"] for o in one] == ["mine_0", "mine_1", "mine_2"]


def test_sampled_n_gives_different_samples(base):
    """n=4 at temperature 1 with no seed: not all four samples are equal (each is its own request)."""
    status, out = generate(base, {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 12, "n": 4}})
    assert status == 200 and len({o["text"] for o in out}) > 1


def test_logprob_triples_for_prompt_and_output(base, runtime):
    """return_logprob + return_text_in_logprobs + logprob_start_len=k: input_token_logprobs are
    [logprob, id, text] for prompt tokens k.. (a real logprob at k > 0), output_token_logprobs one
    per generated token; top logprobs rows of top_logprobs_num triples; no text unless asked."""
    ids = runtime.engine.tokenizer.encode(PROMPT)
    k = len(ids) - 3
    status, out = generate(base, {"text": PROMPT, "sampling_params": GREEDY, "return_logprob": True,
                                  "return_text_in_logprobs": True, "logprob_start_len": k})
    assert status == 200
    meta = out["meta_info"]
    inputs = meta["input_token_logprobs"]
    assert [t[1] for t in inputs] == ids[k:] and all(isinstance(t[0], float) and t[0] <= 0 for t in inputs)
    assert [t[2] for t in inputs] == [runtime.engine.tokenizer.decode([i]) for i in ids[k:]]
    outputs = meta["output_token_logprobs"]
    assert [t[1] for t in outputs] == out["output_ids"] and len(outputs) == meta["completion_tokens"]
    assert "".join(t[2] for t in outputs) == out["text"]
    _, from0 = generate(base, {"text": PROMPT, "sampling_params": GREEDY, "return_logprob": True,
                               "logprob_start_len": 0})
    first = from0["meta_info"]["input_token_logprobs"]
    assert first[0] == [None, ids[0], None] and len(first) == len(ids)
    assert first[k][0] == pytest.approx(inputs[0][0], abs=1e-4)
    _, top = generate(base, {"text": PROMPT, "sampling_params": GREEDY, "return_logprob": True,
                             "top_logprobs_num": 3})
    rows = top["meta_info"]["output_top_logprobs"]
    assert len(rows) == 8 and all(len(r) == 3 and r[0][2] is None for r in rows)
    assert [r[0][1] for r in rows] == top["output_ids"]  # greedy: the top token is the chosen one


def test_stop_regex_no_stop_trim_and_min_new_tokens_over_http(base):
    """stop_regex ends at the match (kept, finish_reason names the pattern); no_stop_trim keeps a stop
    string; min_new_tokens makes a prompt that would end at once produce tokens."""
    status, out = generate(base, {"text": "Q: What is 3 + 4?\nA:", "sampling_params": {
        "max_new_tokens": 20, "temperature": 0, "stop_regex": [r"\d"]}})
    assert status == 200 and out["meta_info"]["finish_reason"] == {"type": "stop", "matched": r"\d"}
    assert re.search(r"\d", out["text"]) and not re.search(r"\d", out["text"][:-1])
    _, trimmed = generate(base, {"text": PROMPT, "sampling_params": {**GREEDY, "max_new_tokens": 20, "stop": "France"}})
    _, kept = generate(base, {"text": PROMPT, "sampling_params": {**GREEDY, "max_new_tokens": 20, "stop": "France",
                                                                  "no_stop_trim": True}})
    assert kept["text"] == trimmed["text"] + "France"
    quiet = "Question: What is the capital of France?\nAnswer:"  # the model ends this at once
    _, none = generate(base, {"text": quiet, "sampling_params": GREEDY})
    _, forced = generate(base, {"text": quiet, "sampling_params": {**GREEDY, "min_new_tokens": 4}})
    assert none["meta_info"]["completion_tokens"] < 4 <= forced["meta_info"]["completion_tokens"]


def test_penalties_and_min_p_change_the_greedy_answer_as_asked(base):
    """frequency/presence penalties are applied (a repetitive greedy answer changes); min_p=1 keeps only
    the top token, so sampling equals greedy."""
    plain = generate(base, {"text": PROMPT, "sampling_params": {"max_new_tokens": 20, "temperature": 0}})[1]["text"]
    for name in ("frequency_penalty", "presence_penalty"):
        penalized = generate(base, {"text": PROMPT, "sampling_params": {"max_new_tokens": 20, "temperature": 0,
                                                                         name: 2.0}})[1]["text"]
        assert penalized != plain, name
    top_only = generate(base, {"text": PROMPT, "sampling_params": {"max_new_tokens": 20, "min_p": 1.0}})[1]["text"]
    assert top_only == plain


def test_stream_chunks_carry_cumulative_text_and_interleave_with_index(base):
    """Streamed: each event has text, output_ids and meta_info, text cumulative per request; a
    single prompt has no index; with n=2 every event has its index and each index's last event is
    the full answer with its finish_reason."""
    single = sse_events(base, {"text": PROMPT, "sampling_params": GREEDY})
    texts = [e["text"] for e in single]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])) and "index" not in single[0]
    assert set(single[-1]) >= {"text", "output_ids", "meta_info"}
    assert single[-1]["meta_info"]["finish_reason"] is not None
    assert all(e["meta_info"]["finish_reason"] is None for e in single[:-1])
    full = generate(base, {"text": PROMPT, "sampling_params": GREEDY})[1]
    assert single[-1]["text"] == full["text"]
    two = sse_events(base, {"text": [PROMPT, "Q: What is 3 + 4?\nA:"], "sampling_params": GREEDY})
    assert {e["index"] for e in two} == {0, 1}
    last = {e["index"]: e for e in two}
    answers = generate(base, {"text": [PROMPT, "Q: What is 3 + 4?\nA:"], "sampling_params": GREEDY})[1]
    assert [last[i]["text"] for i in (0, 1)] == [a["text"] for a in answers]


@pytest.mark.parametrize("body, limit", [
    ({"text": "x", "sampling_params": {"n": 5}}, "max_n"),
    ({"text": ["a", "b", "c", "d"], "sampling_params": {"n": 2}}, "max_batch"),
    ({"text": ["a"] * 7}, "max_batch"),
    ({"text": "x", "return_logprob": True, "top_logprobs_num": 6}, "max_top_logprobs"),
    ({"text": "x", "sampling_params": {"stop_regex": ["a", "b", "c", "d"]}}, "max_stop_strings"),
    ({"text": "x", "sampling_params": {"stop": ["a", "b", "c", "d"]}}, "max_stop_strings"),
])
def test_every_limit_applies_before_any_work(base, runtime, body, limit):
    """Over a ServerLimits limit: 400 naming it, and no engine request was started."""
    before = runtime.service.metrics()["num_requests"]
    status, out = generate(base, body)
    assert status == 400 and out["error"]["param"] == limit and limit in out["error"]["message"], out
    assert runtime.service.metrics()["num_requests"] == before


def test_abort_request_by_rid_ends_every_sample_of_it(base, runtime):
    """POST /abort_request {"rid"} aborts a running /generate (all its n samples): the answer comes
    back with finish_reason abort, and nothing keeps running."""
    answer = {}
    body = {"text": "Once upon a time", "rid": "long-one",
            "sampling_params": {"max_new_tokens": 400, "ignore_eos": True, "n": 2}}
    worker = threading.Thread(target=lambda: answer.update(out=generate(base, body)))
    worker.start()
    deadline = time.monotonic() + 60
    while runtime.service.num_active < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, aborted = post_json(base, "/abort_request", {"rid": "long-one"})
    assert status == 200 and aborted["aborted"] == 2
    worker.join(60)
    status, out = answer["out"]
    assert status == 200 and [o["meta_info"]["finish_reason"]["type"] for o in out] == ["abort", "abort"]
    wait_idle(runtime)
    assert post_json(base, "/abort_request", {"rid": 5})[0] == 400


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info", "/model_info", "/get_model_info",
                                  "/get_load", "/v1/models", "/health", "/health_generate"])
def test_the_endpoints_sglang_tooling_probes_answer(base, path):
    """GET of each endpoint SGLang's client and sglang-router 0.3.2 probe: 200 with JSON."""
    status, data = call(base, "GET", path)
    assert status == 200, data
    info = json.loads(data)
    if path.endswith("server_info"):
        assert info["dp_size"] == 1 and info["max_total_num_tokens"] > 0
    if path.endswith("model_info"):
        assert info["model_path"] and info["is_generation"] is True
