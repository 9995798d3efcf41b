"""SGLang's /generate with a batch: `text: [str]` or `input_ids: [[int]]`, shared or per-prompt
`sampling_params`, streamed or not — on one in-process runtime (real default model, loopback HTTP).

A batch answers a JSON list with one SGLang response per prompt, equal to the single calls
(greedy); bad batches get a 400 naming the problem and the server keeps serving.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from grpc_helpers import runtime_fixture


pytestmark = pytest.mark.model

PROMPTS = ["The sky is", "One, two, three,", "My favourite fruit is"]
GREEDY = {"max_new_tokens": 6, "temperature": 0}


runtime = runtime_fixture(4096, http_port=0)


@pytest.fixture(scope="module")
def base(runtime) -> str:
    return "http://" + [f for f in runtime.frontends if f.kind == "http"][0].address


def post(base: str, body: dict | bytes, raw: bool = False) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + "/generate", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            payload = r.read().decode()
            return r.status, payload if raw else json.loads(payload)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_text_batch_answers_a_list_equal_to_single_calls(base):
    """text: [3 strings] -> a list of 3 {text, output_ids, meta_info}, each equal to its single call."""
    status, batch = post(base, {"text": PROMPTS, "sampling_params": GREEDY})
    assert status == 200 and isinstance(batch, list) and len(batch) == 3
    singles = [post(base, {"text": p, "sampling_params": GREEDY})[1] for p in PROMPTS]
    assert [b["text"] for b in batch] == [s["text"] for s in singles]
    assert [b["output_ids"] for b in batch] == [s["output_ids"] for s in singles]
    for b in batch:
        meta = b["meta_info"]
        assert meta["completion_tokens"] == 6 and meta["prompt_tokens"] > 0
        assert {"cached_tokens", "finish_reason", "id"} <= set(meta)


def test_input_ids_batch_with_one_sampling_params_per_prompt(base, runtime):
    """input_ids: [[ids], [ids]] with a sampling_params list: each prompt gets its own parameters."""
    ids = [runtime.engine.tokenizer.encode(p) for p in PROMPTS[:2]]
    params = [{"max_new_tokens": 2, "temperature": 0}, {"max_new_tokens": 5, "temperature": 0}]
    status, batch = post(base, {"input_ids": ids, "sampling_params": params})
    assert status == 200
    assert [b["meta_info"]["completion_tokens"] for b in batch] == [2, 5]
    assert [b["meta_info"]["prompt_tokens"] for b in batch] == [len(i) for i in ids]


def test_a_streamed_batch_tags_every_event_with_its_prompt_index(base):
    """stream with a batch: SSE events carry `index`; each prompt's last event has the full text."""
    status, raw = post(base, {"text": PROMPTS, "sampling_params": GREEDY, "stream": True}, raw=True)
    events = [line[len("data: "):] for line in str(raw).splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert {p["index"] for p in parsed} == {0, 1, 2}
    last = {p["index"]: p for p in parsed if p["meta_info"].get("finish_reason")}
    _, batch = post(base, {"text": PROMPTS, "sampling_params": GREEDY})
    assert [last[i]["text"] for i in range(3)] == [b["text"] for b in batch]


@pytest.mark.parametrize("body, words", [
    ({"text": []}, "non-empty list"),
    ({"text": ["a", 7]}, "item 1"),
    ({"input_ids": [1, [2, 3]]}, "mixes"),
    ({"input_ids": [[1, 2], []]}, "input_ids[1]"),
    ({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 1}]}, "1 entries for 2 prompts"),
    ({"text": "a", "sampling_params": [{"max_new_tokens": 1}]}, "needs a batch"),
    ({"text": ["a", "b"], "sampling_params": [{}, 3]}, "sampling_params[1]"),
    ({"text": ["a", "x " * 20000], "sampling_params": {"max_new_tokens": 1}}, "batch prompt 1"),
    ({"text": ["a"], "sampling_params": {"max_new_tokens": -1}}, "batch prompt 0"),
])
def test_bad_batches_get_400_naming_the_problem_and_the_server_keeps_serving(base, runtime, body, words):
    """Each bad batch -> 400 with an error message naming the problem; nothing stays running and a
    good batch right after it succeeds."""
    status, out = post(base, body)
    assert status == 400, out
    assert words in out["error"]["message"], out
    assert runtime.service.num_active == 0
    status, ok = post(base, {"text": ["Hi", "Yo"], "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    assert status == 200 and len(ok) == 2
