"""Backend registry and the embedded runtime backend (EngineBackend) on the real model."""
from __future__ import annotations

import pytest

import sglc as sgl
from sglc.backends import make_backend, normalize_endpoint
from sglc.errors import BackendError
from sglc.executor.stream_state import IMAGE_MARKER
from sglc.wire.backend import GenParams, Prompt


@pytest.mark.parametrize("given,target", [("127.0.0.1:30000", "127.0.0.1:30000"),
                                          ("http://127.0.0.1:30000/", "127.0.0.1:30000"),
                                          ("grpc://localhost:5", "localhost:5")])
def test_endpoints_are_normalized_to_host_port(given, target):
    """SGLang-style URLs and bare host:port give the same gRPC target."""
    assert normalize_endpoint(given) == target


@pytest.mark.parametrize("bad", ["", "localhost", "http://host:port", ":80"])
def test_malformed_endpoints_are_rejected_with_the_expected_form(bad):
    """An endpoint without a numeric port is a ValueError showing host:port."""
    with pytest.raises(ValueError, match="host:port"):
        normalize_endpoint(bad)


def test_an_unknown_backend_name_lists_the_known_ones():
    """make_backend with a name it does not know raises ValueError naming srt, engine and openai."""
    with pytest.raises(ValueError, match="srt, engine, openai"):
        make_backend("vllm")


@pytest.fixture(scope="module")
def backend():
    b = sgl.Runtime()
    yield b
    b.close()


@pytest.mark.model
def test_embedded_runtime_reports_the_chatml_template(backend):
    """SmolLM2's jinja template becomes per-role ChatML prefixes/suffixes (no default system prompt)."""
    info = backend.model_info()
    assert info.chat_template.role_prefix["user"] == "<|im_start|>user\n"
    assert info.chat_template.role_suffix["assistant"] == "<|im_end|>\n"
    assert info.context_length > 1000 and not info.supports_images


@pytest.mark.model
def test_cache_prefix_makes_the_next_request_hit_the_cache(backend):
    """After cache_prefix(P), a request for P + more reports at least len(P) - 1 cached tokens."""
    prefix = "The museum opens at nine and closes at five. Tickets cost twelve euros for adults. " * 3
    hint = backend.cache_prefix(Prompt(prefix))
    out = backend.generate(Prompt(prefix + "Question: when does it open?"), GenParams(max_new_tokens=1, temperature=0))
    assert hint.prompt_tokens > 40 and out.meta.cached_tokens >= hint.prompt_tokens - 1


@pytest.mark.model
def test_score_gives_each_choice_its_token_logprobs_and_unconditional_ones(backend):
    """The likely continuation scores higher; unconditional logprobs have one value per token."""
    result = backend.score(Prompt("The capital of France is"), [" Paris", " a banana"], unconditional=True)
    paris, banana = result.choices
    assert sum(paris.token_logprobs) / len(paris.token_logprobs) > sum(banana.token_logprobs) / len(banana.token_logprobs)
    assert len(banana.unconditional_logprobs) == len(banana.token_logprobs) >= 2


@pytest.mark.model
def test_images_become_text_placeholders_for_the_text_only_model(backend, tmp_path):
    """A marker + image path is prefilled as '<image: NAME>' (what the gRPC server does by default):
    the same greedy answer and prompt length as that text."""
    params = GenParams(max_new_tokens=4, temperature=0)
    with_image = backend.generate(Prompt("Look: " + IMAGE_MARKER + " What is it?", images=["samples/assets/essay.png"]),
                                  params)
    as_text = backend.generate(Prompt("Look: <image: essay.png> What is it?"), params)
    assert (with_image.text, with_image.meta.prompt_tokens) == (as_text.text, as_text.meta.prompt_tokens)


@pytest.mark.model
def test_a_backend_that_never_starts_fails_calls_by_deadline_instead_of_hanging(backend):
    """start=False and nobody starts it: the call raises BackendError after its timeout."""
    from sglc_runtime.server.engine_backend import EngineBackend
    from sglc_runtime.engine import Engine

    idle = EngineBackend(Engine(share_model_with=backend.engine), start=False, timeout=0.2)
    with pytest.raises(BackendError, match="not started within 0.2 s"):
        idle.generate(Prompt("Hello"), GenParams(max_new_tokens=1))


@pytest.mark.model
def test_in_process_calls_go_through_the_servers_service(backend):
    """The embedded backend is a client of RuntimeService, like the gRPC and HTTP servers: its
    calls are the service's requests, and the service's limits and validation apply to them."""
    before = backend.service.metrics()["num_requests"]
    backend.generate(Prompt("Hello"), GenParams(max_new_tokens=1, temperature=0))
    backend.cache_prefix(Prompt("A shared prefix for later calls."))
    assert backend.service.metrics()["num_requests"] == before + 2
    with pytest.raises(ValueError, match="max_prompt_bytes"):
        backend.generate(Prompt("x" * (backend.service.limits.max_prompt_bytes + 1)), GenParams(max_new_tokens=1))
    with pytest.raises(ValueError, match="max_stop_strings"):
        backend.generate(Prompt("Hello"), GenParams(max_new_tokens=1, stop=[f"s{i}" for i in range(33)]))
    assert backend.service.num_active == 0


@pytest.mark.model
def test_a_call_past_its_deadline_is_cancelled_and_reported(backend):
    """A gen still decoding at its deadline is aborted in the engine (nothing left running) and
    raises BackendError naming the deadline."""
    from sglc_runtime.server.engine_backend import EngineBackend

    hurried = EngineBackend(backend.engine, timeout=0.3)
    with pytest.raises(BackendError, match="no answer within 0.3 s"):
        hurried.generate(Prompt("Once upon a time"), GenParams(max_new_tokens=2000, ignore_eos=True))
    assert hurried.service.num_active == 0
    assert backend.generate(Prompt("Hello"), GenParams(max_new_tokens=2, temperature=0)).text  # still serving
