"""`sglc serve --model some.gguf` for a Qwen3, a Gemma-3, a Phi-3 and an MoE (Qwen3-MoE) GGUF answers
SGLang's real frontend and the real `openai` client with the model's OWN chat template (the file's
``tokenizer.chat_template``), one server subprocess per fixture on loopback.

The oracle is transformers' own GGUF reader: ``AutoTokenizer.from_pretrained(gguf_file=)`` and its
``apply_chat_template`` render and tokenize the conversation. What the server built is observed
exactly where the API allows: SGLang's ``/generate`` returns the prompt's token ids
(``input_token_logprobs`` from position 0); the chat API reports ``usage.prompt_tokens``, and its
greedy answer must equal the one SGLang's client got for the oracle's token ids.

SGLang's ``RuntimeEndpoint`` picks its template on the client by model path (``default`` here);
`sglc.sglang_chat_template.use_server_chat_template` gives it the server's own (docs/models.md).
"""
from __future__ import annotations

from pathlib import Path

import openai
import pytest
import sglang as sgl
from grpc_helpers import ServeProcess

from sglc.fleet import free_port
from sglc.sglang_chat_template import sglang_chat_template, use_server_chat_template

pytestmark = pytest.mark.model

GGUF_DIR = Path(__file__).resolve().parent / "data" / "gguf"
FIXTURES = {"qwen3": "qwen3_wide-Q4_K_M.gguf", "gemma3": "gemma3-Q8_0.gguf", "phi3": "phi3-Q4_0.gguf",
            "qwen3moe": "qwen3moe-Q4_0.gguf"}
SYSTEM, QUESTION = "You are terse.", "Name a color."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
MAX_TOKENS = 4


@pytest.fixture(scope="module", params=list(FIXTURES))
def server(request):
    """`sglc serve --model <fixture>` with HTTP on a free loopback port (small KV pool)."""
    port = free_port()
    with ServeProcess("--model", str(GGUF_DIR / FIXTURES[request.param]), "--kv-slots", "256",
                      "--http-port", str(port)) as proc:
        proc.http = f"http://127.0.0.1:{port}"
        proc.gguf = FIXTURES[request.param]
        yield proc


@pytest.fixture(scope="module")
def oracle(server):
    """(text, token ids) of MESSAGES + the generation prompt, and the text without it, rendered by
    transformers from the GGUF's own template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(GGUF_DIR), gguf_file=server.gguf)
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == list(tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=True)
                       ["input_ids"])
    return text, ids, tok.apply_chat_template(MESSAGES, tokenize=False)


@pytest.fixture(scope="module")
def sglang_run(server):
    """SGLang's frontend (its RuntimeEndpoint, given the server's template) runs a system/user/assistant
    program once; greedy, with the prompt's token ids returned."""
    backend = use_server_chat_template(sgl.RuntimeEndpoint(server.http))
    sgl.set_default_backend(backend)

    @sgl.function
    def chat(s, question):
        s += sgl.system(SYSTEM)
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=MAX_TOKENS, temperature=0, return_logprob=True,
                                   logprob_start_len=0, return_text_in_logprobs=True))

    try:
        state = chat.run(question=QUESTION)
    finally:
        sgl.set_default_backend(None)
    return backend, state


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.http + "/v1", api_key="sk-test", max_retries=0, timeout=120)
    (model,) = [m.id for m in c.models.list().data]
    return c, model


def test_sglang_path_matching_alone_misses_the_models_template(server, oracle):
    """SGLang's client on its own picks a template by model path, which renders these roles otherwise
    than the file's template: why the server's template is handed to it."""
    plain = sgl.RuntimeEndpoint(server.http)
    assert plain.chat_template.get_prompt(MESSAGES) != oracle[2]


def test_the_servers_template_is_registered_by_name(server, sglang_run, oracle):
    """use_server_chat_template registers the template as 'sglc:<model name>' for chat_template_name=."""
    name = sglang_run[0].chat_template.name
    assert name == "sglc:" + Path(server.gguf).stem
    assert sgl.RuntimeEndpoint(server.http, chat_template_name=name).chat_template.get_prompt(MESSAGES) == oracle[2]


def test_no_published_template_is_a_clear_error():
    """Model info without role prefixes/suffixes (another server, a template that does not split) is a
    ValueError that points to the chat API."""
    with pytest.raises(ValueError, match="/v1/chat/completions"):
        sglang_chat_template({"model_path": "/models/x", "chat_template": None})


def test_sglang_frontend_prompt_is_the_models_own_template(sglang_run, oracle):
    """The prompt SGLang's frontend sent is exactly the GGUF template's rendering: the server tokenized
    the oracle's token ids, and the program's text is that rendering plus the answer and the suffix."""
    backend, state = sglang_run
    text, ids, _ = oracle
    meta = state.get_meta_info("answer")
    assert [t[1] for t in meta["input_token_logprobs"]] == ids
    assert meta["prompt_tokens"] == len(ids)
    answer = state["answer"]
    assert isinstance(answer, str) and answer and 1 <= meta["completion_tokens"] <= MAX_TOKENS
    _, suffix = backend.chat_template.get_prefix_and_suffix("assistant", [])
    assert state.text() == text + answer + suffix


def test_openai_chat_uses_the_models_own_template(client, sglang_run, oracle):
    """/v1/chat/completions renders the GGUF's template on the server: prompt_tokens is the oracle's
    count and the greedy answer is the one generated from the oracle's token ids."""
    c, model = client
    out = c.chat.completions.create(model=model, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0)
    assert out.usage.prompt_tokens == len(oracle[1])
    assert out.choices[0].message.content == sglang_run[1]["answer"]
    assert out.usage.completion_tokens == sglang_run[1].get_meta_info("answer")["completion_tokens"]


def test_openai_chat_stream_adds_up_to_the_answer(client, sglang_run, oracle):
    """Streamed chat: the deltas add up to the same greedy answer; the usage chunk has the oracle's count."""
    c, model = client
    chunks = list(c.chat.completions.create(model=model, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == sglang_run[1]["answer"]
    assert chunks[-1].usage.prompt_tokens == len(oracle[1])
