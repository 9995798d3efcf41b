"""The runtime's gRPC service on the real default model, served in-process on 127.0.0.1:0.

Every RPC answers; what travels over gRPC is exactly what the engine computes (greedy text and
tokens, score logprobs); the cache-prefix hint shows up as cached tokens.
"""
from __future__ import annotations

import math

import grpc
import pytest

from grpc_helpers import runtime_fixture, stub  # noqa: F401 (fixtures)
from sglc.wire.proto import runtime_pb2 as pb
from sglc_runtime.sampling.sampling_params import SamplingParams

pytestmark = pytest.mark.model

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
QUESTIONS = ["What is 2+2?", "Name a color.", "Where is Rome?", "Who wrote Hamlet?"]


runtime = runtime_fixture(4096)


def greedy(n: int, **extra) -> pb.SamplingParams:
    return pb.SamplingParams(max_new_tokens=n, temperature=0.0, **extra)


def generate(stub, text: str, sampling: pb.SamplingParams, *, stream: bool = False, **fields) -> list[pb.GenerateResponse]:
    req = pb.GenerateRequest(prompt=pb.Prompt(text=text), sampling=sampling, stream=stream, **fields)
    return list(stub.Generate(req, timeout=120))


def complete_of(responses: list[pb.GenerateResponse]) -> pb.GenerateComplete:
    assert responses[-1].WhichOneof("response") == "complete", responses[-1]
    return responses[-1].complete


def test_model_info_reports_the_model_and_its_chatml_roles(stub, runtime):
    """ModelInfo names the model and gives ChatML role prefixes/suffixes split from its template."""
    info = stub.ModelInfo(pb.ModelInfoRequest(), timeout=30)
    assert info.model_name == "SmolLM2-135M-Instruct"
    assert info.vocab_size == 49152 and info.context_length == runtime.engine.max_context
    assert 2 in info.eos_token_ids and info.dtype == "float32" and not info.supports_images
    t = info.chat_template
    for role in ("system", "user", "assistant"):
        assert t.role_prefix[role] == f"<|im_start|>{role}\n"
        assert t.role_suffix[role] == "<|im_end|>\n"
    assert t.generation_prefix == "<|im_start|>assistant\n"
    assert "im_start" in info.jinja_chat_template
    assert info.model_path == "SmolLM2-135M-Instruct", "ModelInfo shows the model's name, not its absolute path"


def test_model_info_shows_the_path_when_asked(runtime):
    """`sglc serve --expose-paths` shows the absolute path over gRPC too."""
    from sglc_runtime.server.grpc_server import RuntimeServicer

    class Context:
        def abort(self, code, message):
            raise AssertionError(message)

    info = RuntimeServicer(runtime.service, expose_paths=True).ModelInfo(pb.ModelInfoRequest(), Context())
    assert info.model_path.startswith("/") and info.model_path == runtime.service.model_info().model_path


def test_health_serving_with_a_generation_check(stub):
    """Health says SERVING, also when it runs a one-token generation through the engine."""
    assert stub.Health(pb.HealthRequest(), timeout=30).status == pb.HealthResponse.SERVING
    deep = stub.Health(pb.HealthRequest(check_generate=True), timeout=60)
    assert deep.status == pb.HealthResponse.SERVING, deep.message


def test_greedy_generate_over_grpc_equals_the_engine(stub, runtime):
    """For each prompt, greedy Generate over gRPC returns the engine's own tokens and text."""
    for q in QUESTIONS:
        got = complete_of(generate(stub, CHAT.format(q), greedy(16)))
        want = runtime.engine.generate(CHAT.format(q), SamplingParams(temperature=0.0, max_new_tokens=16))[0]
        assert list(got.output_ids) == want.token_ids
        assert got.text == want.text
        assert got.prompt_tokens == want.prompt_tokens and got.completion_tokens == len(want.token_ids)
        assert got.finish_reason.type in (pb.FinishReason.STOP, pb.FinishReason.LENGTH)


def test_stream_chunks_concatenate_to_the_final_text(stub):
    """With stream=true the chunks' texts and token ids concatenate to the complete message's."""
    responses = generate(stub, CHAT.format("Tell me a short story."), greedy(40), stream=True, rid="story-1")
    chunks = [r.chunk for r in responses[:-1]]
    done = complete_of(responses)
    assert len(chunks) >= 2 and all(r.WhichOneof("response") == "chunk" for r in responses[:-1])
    assert "".join(c.text for c in chunks) == done.text
    assert [t for c in chunks for t in c.token_ids] == list(done.output_ids)
    assert {r.rid for r in responses} == {"story-1"}


def test_stop_string_ends_the_output_and_is_reported(stub):
    """A stop string cuts the text before it and is the finish reason's matched text."""
    done = complete_of(generate(stub, "Count: 1, 2, 3, 4, 5, 6, 7,", greedy(30, stop=[" 9"])))
    assert " 9" not in done.text
    if done.finish_reason.type == pb.FinishReason.STOP:
        assert done.finish_reason.matched_text == " 9"


def test_token_id_prompt_and_logprobs(stub, runtime):
    """A token-id prompt works; logprobs come back per output token, prompt logprobs start with NaN."""
    ids = runtime.engine.tokenizer.encode("The capital of France is")
    req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=ids)), sampling=greedy(4),
                             logprobs=pb.LogprobOptions(return_logprob=True, top_logprobs_num=3, logprob_start_len=0))
    done = complete_of(list(stub.Generate(req, timeout=60)))
    assert len(done.output_logprobs) == len(done.output_ids) == 4
    assert all(lp <= 0 for lp in done.output_logprobs)
    assert [len(t.token_ids) for t in done.output_top_logprobs] == [3] * 4
    # greedy: the chosen token is the most likely one
    assert [t.token_ids[0] for t in done.output_top_logprobs] == list(done.output_ids)
    assert len(done.input_logprobs) == len(ids) and math.isnan(done.input_logprobs[0])
    assert all(lp <= 0 for lp in done.input_logprobs[1:])


def test_score_matches_the_engine(stub, runtime):
    """Score returns, per choice, the same tokens and logprobs as Engine.score."""
    prompt, choices = "The capital of France is", [" Paris", " London", " a big city"]
    got = stub.Score(pb.ScoreRequest(prompt=pb.Prompt(text=prompt), choices=choices, unconditional=True), timeout=60)
    want = runtime.engine.score(prompt, choices)
    assert len(got.choices) == 3 and got.prompt_tokens == len(runtime.engine.tokenizer.encode(prompt))
    for g, w in zip(got.choices, want):
        assert list(g.token_ids) == w.token_ids
        assert list(g.token_logprobs) == pytest.approx(w.logprobs, abs=1e-3)
        assert len(g.unconditional_logprobs) == len(g.token_ids)
    paris, london = (sum(c.token_logprobs) for c in got.choices[:2])
    assert paris > london


def test_cache_prefix_then_generate_reuses_the_prefix(stub):
    """After Flush and CachePrefix(prefix), a Generate continuing the prefix reports it cached,
    and Metrics' cached tokens grow by as much."""
    assert stub.Flush(pb.FlushRequest(), timeout=30).flushed
    prefix = "You are a careful assistant. Answer in one short sentence.\n" * 3
    hint = stub.CachePrefix(pb.CachePrefixRequest(prompt=pb.Prompt(text=prefix)), timeout=60)
    assert hint.prompt_tokens > 30 and hint.cached_tokens == 0
    before = stub.Metrics(pb.MetricsRequest(), timeout=30)
    done = complete_of(generate(stub, prefix + "What is the sky's color?", greedy(4)))
    after = stub.Metrics(pb.MetricsRequest(), timeout=30)
    assert done.cached_tokens >= hint.prompt_tokens - 1
    assert after.cached_tokens - before.cached_tokens == done.cached_tokens
    assert after.prompt_tokens - before.prompt_tokens == done.prompt_tokens
    again = stub.CachePrefix(pb.CachePrefixRequest(prompt=pb.Prompt(text=prefix)), timeout=60)
    assert again.cached_tokens >= hint.prompt_tokens - 1


def test_flush_refuses_while_busy_and_empties_the_cache_when_idle(stub, runtime):
    """Flush succeeds when idle and leaves no cached slot behind."""
    generate(stub, "Hello there", greedy(2))
    resp = stub.Flush(pb.FlushRequest(), timeout=30)
    assert resp.flushed, resp.message
    assert stub.Metrics(pb.MetricsRequest(), timeout=30).cached_slots == 0


def test_metrics_count_requests_tokens_and_pool(stub):
    """Metrics carry token counters, hit rate, queue lengths, pool and request counts."""
    m = stub.Metrics(pb.MetricsRequest(), timeout=30)
    assert m.num_requests > 0 and m.prompt_tokens > 0 and m.completion_tokens > 0
    assert m.num_kv_slots == 4096 and 0 <= m.pool_usage <= 1
    assert m.cache_hit_rate == pytest.approx(m.cached_tokens / m.prompt_tokens)
    assert m.num_waiting == 0 and m.num_running == 0 and m.num_active == 0
    assert m.uptime_s > 0


def test_images_are_refused_or_replaced_by_placeholders(stub):
    """A text-only model refuses images by default and replaces them with '<image: NAME>' on request."""
    text = "<|sglc_image|>What is in the picture?"
    req = pb.GenerateRequest(prompt=pb.Prompt(text=text, images=["samples/assets/essay.png"]), sampling=greedy(2))
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(req, timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "text-only" in err.value.details()
    req.prompt.image_mode = pb.IMAGE_MODE_PLACEHOLDER
    done = complete_of(list(stub.Generate(req, timeout=60)))
    assert any("<image: essay.png>" in w for w in done.warnings)


def test_regex_constraint_output_matches(stub, runtime):
    """A regex-constrained Generate returns text that fully matches the regex."""
    import re

    pattern = r"(yes|no), because [a-z ]{3,20}\."
    done = complete_of(generate(stub, CHAT.format("Is the sea salty?"), greedy(40, regex=pattern)))
    assert re.fullmatch(pattern, done.text), done.text


def test_fsm_and_json_schema_constraints_are_accepted(stub):
    """A compiled FSM (the typed FSM message, as `sglc compile` lowers it) and a JSON schema both constrain the output."""
    import json
    import re

    from sglc import fsm
    from sglc.wire.fsm_message import fsm_to_pb

    pattern = r"[0-9]{2}-[0-9]{2}"
    f = fsm.compile_regex(pattern)
    done = complete_of(generate(stub, "Pick a date:", greedy(12, fsm=fsm_to_pb(fsm.fsm_to_dict(f)))))
    assert re.fullmatch(pattern, done.text), done.text
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    done = complete_of(generate(stub, "Answer in JSON:", greedy(20, json_schema=json.dumps(schema))))
    assert isinstance(json.loads(done.text)["ok"], bool), done.text
