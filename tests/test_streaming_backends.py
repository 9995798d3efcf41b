"""Streaming on the real model: `run(stream=True)` + `text_iter(var)` over the embedded runtime and
over the gRPC backend of a `sglc serve` subprocess, eager and compiled — several pieces, which add
up to the value a non-streamed greedy run gives. The same server's HTTP side is driven through
`sgl.OpenAI(...)` (SGLang's constructor) and agrees with gRPC under greedy sampling."""
from __future__ import annotations


import pytest
from grpc_helpers import serve_http_fixture

import sglc as sgl

pytestmark = pytest.mark.model

MODEL = "SmolLM2-135M-Instruct"


@sgl.function
def haiku(s, topic):
    s += "Write a short poem about " + topic + ".\nPoem:" + sgl.gen("poem", max_tokens=16, stop="\n\n")
    s += "\nTitle:" + sgl.gen("title", max_tokens=6, stop="\n")


server = serve_http_fixture(8192)


def _check_streams_like_a_plain_run(backend) -> None:
    plain = haiku.run(topic="the sea", temperature=0, backend=backend)
    for prog in (haiku, haiku.compile()):
        state = prog.run(topic="the sea", temperature=0, backend=backend, stream=True)
        pieces = list(state.text_iter("poem"))
        assert len(pieces) > 1, f"{prog}: the poem came in one piece"
        assert "".join(pieces) == state["poem"] == plain["poem"]
        assert "".join(state.text_iter()) == state.text() == plain.text()
        assert state.error() is None


def test_embedded_runtime_streams_eager_and_compiled():
    """sgl.Runtime(): pieces of the poem arrive one by one and equal the non-streamed greedy run."""
    runtime = sgl.Runtime()
    try:
        _check_streams_like_a_plain_run(runtime)
    finally:
        runtime.shutdown()


def test_grpc_backend_streams_eager_and_compiled(server):
    """sgl.RuntimeEndpoint(serve address): the same, over gRPC's streaming Generate."""
    backend = sgl.RuntimeEndpoint(server.address)
    try:
        _check_streams_like_a_plain_run(backend)
        assert sgl.get_server_info(backend)["model_path"]
    finally:
        backend.close()


def test_sgl_openai_builds_the_openai_backend_and_matches_grpc(server, monkeypatch):
    """sgl.OpenAI(model, is_chat_model=False, base_url=..., api_key=...) runs the program over
    /v1/completions; greedy variables equal those of the gRPC backend on the same server."""
    backend = sgl.OpenAI(MODEL, is_chat_model=False, base_url=server.http, api_key="sk-local")
    grpc_backend = sgl.RuntimeEndpoint(server.address)
    try:
        assert backend.model_type == "completion" and backend.model == MODEL
        over_http = haiku.run(topic="the sea", temperature=0, backend=backend)
        over_grpc = haiku.run(topic="the sea", temperature=0, backend=grpc_backend)
        assert over_http.result.variables == over_grpc.result.variables
    finally:
        backend.close()
        grpc_backend.close()
