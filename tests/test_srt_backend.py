"""SrtBackend (the executor's gRPC backend) against an in-process runtime on the real model,
plus its behaviour with no server at all."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from grpc_helpers import runtime_fixture
from sglc.fleet import free_port
from sglc.errors import BackendError, SglcError
from sglc.executor.backends.srt import IMAGE_MARKER, SrtBackend
from sglc.wire.backend import Backend, GenParams, Prompt
from sglc_runtime.sampling.sampling_params import SamplingParams

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


runtime = runtime_fixture(4096)


@pytest.fixture(scope="module")
def backend(runtime):
    b = SrtBackend(runtime.frontends[0].address, timeout=120)
    yield b
    b.close()


def test_constructor_rejects_bad_arguments():
    """A malformed endpoint, image mode or timeout is a ValueError naming the argument."""
    with pytest.raises(ValueError, match="host:port"):
        SrtBackend("localhost")
    with pytest.raises(ValueError, match="image_mode"):
        SrtBackend("127.0.0.1:1", image_mode="pixels")
    with pytest.raises(ValueError, match="timeouts"):
        SrtBackend("127.0.0.1:1", timeout=0)


def test_no_server_raises_backend_error_naming_endpoint_and_call():
    """With nothing listening every call fails fast with a one-line BackendError (an SglcError)."""
    endpoint = f"127.0.0.1:{free_port()}"
    with SrtBackend(endpoint, timeout=30, info_timeout=30) as b:
        for call in (b.model_info, b.metrics, lambda: b.generate(Prompt("hi"), GenParams(max_new_tokens=1))):
            with pytest.raises(BackendError) as err:
                call()
            assert isinstance(err.value, SglcError)
            message = str(err.value)
            assert endpoint in message and "UNAVAILABLE" in message and "\n" not in message


def test_closed_backend_refuses_calls():
    """After close() a call raises BackendError saying the backend is closed."""
    b = SrtBackend("127.0.0.1:1")
    b.close()
    with pytest.raises(BackendError, match="closed"):
        b.metrics()


@pytest.mark.model
def test_is_a_backend_with_the_models_chat_template(backend):
    """SrtBackend implements Backend; model_info gives the ChatML template and context length."""
    assert isinstance(backend, Backend)
    info = backend.model_info()
    assert info.model == "SmolLM2-135M-Instruct" and info.context_length > 1000 and not info.supports_images
    assert info.chat_template.role_prefix["user"] == "<|im_start|>user\n"
    assert info.chat_template.role_suffix["assistant"] == "<|im_end|>\n"
    assert backend.model_info() is info  # cached


@pytest.mark.model
def test_generate_equals_the_engine_and_fills_meta(backend, runtime):
    """Greedy generate returns the engine's text; meta has token counts, finish reason, latency."""
    prompt = CHAT.format("What is the capital of Italy?")
    result = backend.generate(Prompt(prompt), GenParams(max_new_tokens=12, temperature=0))
    want = runtime.engine.generate(prompt, SamplingParams(temperature=0, max_new_tokens=12))[0]
    assert result.text == want.text
    assert result.meta.prompt_tokens == want.prompt_tokens and result.meta.completion_tokens == want.completion_tokens
    assert result.meta.finish_reason == want.finish_reason and result.meta.latency_s > 0


@pytest.mark.model
def test_stream_pieces_join_to_the_generated_text(backend):
    """stream() yields pieces whose concatenation is generate()'s text for the same greedy call."""
    prompt, params = Prompt(CHAT.format("Describe rain.")), GenParams(max_new_tokens=20, temperature=0)
    assert "".join(backend.stream(prompt, params)) == backend.generate(prompt, params).text


@pytest.mark.model
def test_stop_regex_crosses_grpc(backend, runtime):
    """stop_regex travels in runtime.proto's SamplingParams: the answer ends at the first match's
    end, and equals the in-process engine's."""
    import re

    params = GenParams(max_new_tokens=20, temperature=0, stop_regex=[r" [6-9],"])
    r = backend.generate(Prompt("1, 2, 3, 4, 5,"), params)
    match = re.search(r" [6-9],", r.text)
    assert match is not None and match.end() == len(r.text) and r.meta.finish_reason["type"] == "stop", r.text
    local = runtime.engine.generate(["1, 2, 3, 4, 5,"], [{"max_new_tokens": 20, "temperature": 0,
                                                          "stop_regex": [r" [6-9],"]}])[0]
    assert local.text == r.text


@pytest.mark.model
def test_stop_and_max_tokens_are_honoured(backend):
    """stop strings cut the text; max_tokens bounds the completion."""
    r = backend.generate(Prompt("1, 2, 3, 4, 5,"), GenParams(max_new_tokens=20, temperature=0, stop=[" 8"]))
    assert " 8" not in r.text and r.meta.completion_tokens <= 20
    assert backend.generate(Prompt("Once upon a time"), GenParams(max_new_tokens=3, ignore_eos=True)).meta.completion_tokens == 3


@pytest.mark.model
def test_score_gives_aligned_logprobs_per_choice(backend, runtime):
    """score returns, per choice, its token logprobs (as Engine.score) and as many unconditional ones."""
    prompt, choices = "Q: Is fire hot?\nA:", [" yes", " no", " maybe not"]
    result = backend.score(Prompt(prompt), choices, unconditional=True)
    want = runtime.engine.score(prompt, choices)
    assert len(result.choices) == 3
    for got, w in zip(result.choices, want):
        assert got.token_logprobs == pytest.approx(w.logprobs, abs=1e-3)
        assert len(got.unconditional_logprobs) == len(got.token_logprobs)
    assert backend.score(Prompt(prompt), choices).choices[0].unconditional_logprobs is None
    assert result.meta.prompt_tokens > 0


@pytest.mark.model
def test_cache_prefix_reports_cached_tokens(backend):
    """The second cache_prefix of the same text finds (almost) all of it cached."""
    text = "Shared few-shot header: translate English to French.\n" * 2
    first = backend.cache_prefix(Prompt(text))
    second = backend.cache_prefix(Prompt(text))
    assert first.prompt_tokens == second.prompt_tokens > 10
    assert second.cached_tokens >= second.prompt_tokens - 1


@pytest.mark.model
def test_images_become_placeholders_and_meta_says_so(backend, runtime):
    """In placeholder mode an image is replaced by '<image: NAME>' and meta.warnings says so;
    in reject mode the call fails with INVALID_ARGUMENT."""
    prompt = Prompt(f"<|im_start|>user\n{IMAGE_MARKER}What is shown?<|im_end|>\n", images=["samples/assets/essay.png"])
    r = backend.generate(prompt, GenParams(max_new_tokens=2))
    assert any("<image: essay.png>" in w for w in r.meta.warnings)
    strict = SrtBackend(runtime.frontends[0].address, image_mode="reject")
    with pytest.raises(BackendError, match="INVALID_ARGUMENT.*text-only"):
        strict.generate(prompt, GenParams(max_new_tokens=2))
    strict.close()


@pytest.mark.model
def test_bad_params_raise_backend_error_with_the_engine_message(backend):
    """An invalid parameter comes back as BackendError carrying the engine's explanation."""
    with pytest.raises(BackendError, match="INVALID_ARGUMENT.*top_p"):
        backend.generate(Prompt("hi"), GenParams(top_p=1.5))


@pytest.mark.model
def test_many_threads_share_one_backend(backend):
    """32 threads calling one backend all get the greedy answer of their own prompt."""
    prompts = [CHAT.format(f"What is {i} plus {i}?") for i in range(8)]
    params = GenParams(max_new_tokens=6, temperature=0)
    reference = {p: backend.generate(Prompt(p), params).text for p in prompts}
    with ThreadPoolExecutor(32) as pool:
        got = list(pool.map(lambda i: (prompts[i % 8], backend.generate(Prompt(prompts[i % 8]), params).text), range(32)))
    assert all(text == reference[p] for p, text in got)


@pytest.mark.model
def test_metrics_and_health(backend):
    """metrics() is a plain dict of the server's counters; health() says SERVING."""
    m = backend.metrics()
    assert {"prompt_tokens", "cached_tokens", "cache_hit_rate", "num_running", "pool_usage"} <= set(m)
    assert backend.health() == ("SERVING", "ok")
