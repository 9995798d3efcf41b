"""The executor's `openai` backend against ONE `sglc serve --http-port` subprocess on loopback.

The backend speaks only OpenAI's protocol (the real `openai` package); the same server's gRPC
(srt backend) is the reference: greedy text and select scores agree. Samples compiled by
`sglc compile` run through `sglc run --backend openai --endpoint URL --model NAME`.
"""
from __future__ import annotations

import json

import pytest

from grpc_helpers import ROOT, serve_http_fixture
from sglc.backends import make_backend
from sglc.cli import main as sglc_main
from sglc.errors import BackendError
from sglc.executor.backends.srt import SrtBackend
from sglc.wire.backend import GenParams, Prompt

pytestmark = pytest.mark.model

MODEL = "SmolLM2-135M-Instruct"
SAMPLES = {"few_shot_qa": "samples/few_shot_qa.py", "json_extraction": "samples/json_extraction.py",
           "react_agent": "samples/react_agent.py", "multi_turn_chat": "samples/multi_turn_chat.py",
           "essay_judge": "samples/essay_judge.py", "tree_of_thought": "samples/tree_of_thought.py",
           "call_other_program": "samples/call_other_program.py:research_brief"}


server = serve_http_fixture(16384)


@pytest.fixture(scope="module")
def backend(server, monkeypatch_module):
    b = make_backend("openai", server.http, model=MODEL)
    yield b
    b.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", "sk-local")
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def srt(server):
    b = SrtBackend(server.address)
    yield b
    b.close()


def test_completion_model_matches_srt_greedy_and_chat_template(backend, srt):
    """Greedy text over OpenAI completions equals the srt backend's; the chat template is the server's."""
    assert backend.model_type == "completion" and backend.is_sglc
    assert backend.model_info().chat_template == srt.model_info().chat_template
    p = Prompt("The capital of France is")
    got = backend.generate(p, GenParams(max_new_tokens=8, temperature=0))
    assert got.text == srt.generate(p, GenParams(max_new_tokens=8, temperature=0)).text
    assert got.meta.completion_tokens == 8 and got.meta.prompt_tokens > 0


def test_select_scores_match_srt(backend, srt):
    """score via echo logprobs gives the same per-token logprobs as the runtime's Score RPC."""
    p, choices = Prompt("The capital of France is"), [" Paris", " London", " a big city"]
    ours, ref = backend.score(p, choices), srt.score(p, choices)
    for a, b in zip(ours.choices, ref.choices):
        assert len(a.token_logprobs) == len(b.token_logprobs)
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-3)


def test_constraints_are_sent(backend):
    """A regex and a JSON schema constrain the output through the OpenAI protocol."""
    import re
    r = backend.generate(Prompt("Phone:"), GenParams(max_new_tokens=20, temperature=0, regex=r"\d{3}-\d{4}"))
    assert re.fullmatch(r"\d{3}-\d{4}", r.text)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = backend.generate(Prompt("JSON:"), GenParams(max_new_tokens=20, temperature=0, json_schema=json.dumps(schema)))
    assert isinstance(json.loads(r.text)["ok"], bool)


def test_extensions_are_refused_by_a_plain_openai_endpoint_never_dropped(server, monkeypatch_module):
    """An endpoint that is not an sglc/SGLang server (here: the same server seen as a plain OpenAI
    one) gets the standard fields; a set extension (top_k, stop_regex, ...) is an error naming it,
    not silently left out (the answer would change); an extension at its default is fine."""
    plain = make_backend("openai", server.http, model=MODEL)
    plain._sglc_info = None
    assert plain.request_fields(GenParams(max_new_tokens=4, temperature=0, top_k=-1)) == {"max_tokens": 4,
                                                                                          "temperature": 0}
    with pytest.raises(BackendError, match="takes no 'top_k'"):
        plain.request_fields(GenParams(max_new_tokens=4, top_k=5))
    plain.close()


def test_chat_model_maps_roles_and_refuses_select(server, monkeypatch_module):
    """model_type=chat sends the messages (open assistant turn dropped); select names why it cannot run."""
    chat = make_backend("openai", server.http, model=MODEL, model_type="chat")
    msgs = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": ""}]
    assert chat.generate(Prompt("", messages=msgs), GenParams(max_new_tokens=6, temperature=0)).text
    with pytest.raises(BackendError, match="chat endpoint does not return them"):
        chat.score(Prompt("x", messages=msgs), ["a", "b"])
    with pytest.raises(BackendError, match="HTTP 404"):
        make_backend("openai", server.http, model="no-such-model").generate(Prompt("x"), GenParams(max_new_tokens=1))
    chat.close()


def test_samples_run_through_backend_openai(server, srt, tmp_path, monkeypatch_module, capsys):
    """Samples compiled by `sglc compile` run via `sglc run --backend openai --endpoint URL --model NAME`:
    exit 0, one error-free result per input, constraints respected; the greedy few-shot answers
    equal the srt backend's on the same server."""
    from test_run_against_serve import check_constraints

    outputs = {}
    for name, target in SAMPLES.items():
        graph = tmp_path / f"{name}.pb"
        assert sglc_main(["compile", str(ROOT / target), "-o", str(graph)]) == 0
        # NOTE: the first input of each sample: the path is what is under test here (every input of
        # every sample runs in test_run_against_serve and test_run_cli).
        args = tmp_path / f"{name}.args.jsonl"
        args.write_text((ROOT / "samples" / f"{name}.args.jsonl").read_text().splitlines()[0] + "\n")
        for kind, endpoint in (("openai", server.http), ("srt", server.address)):
            if kind == "srt" and name != "few_shot_qa":
                continue
            out = tmp_path / f"{name}.{kind}.jsonl"
            # NOTE: in process (the CLI's own subprocess runs are tests/test_run_cli.py's)
            code = sglc_main(["run", str(graph), "--backend", kind, "--endpoint", endpoint, "--input", str(args),
                              "--output", str(out), "--no-progress"] + (["--model", MODEL] if kind == "openai" else []))
            assert code == 0, (name, kind, capsys.readouterr().err[-2000:])
            outputs[name, kind] = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
        results = outputs[name, "openai"]
        assert [r["index"] for r in results] == [0]
        for r in results:
            assert r["error"] is None, (name, r["error"])
            assert r["calls"] and r["text"]
            check_constraints(name, r["variables"])
    assert [r["variables"] for r in outputs["few_shot_qa", "openai"]] == \
        [r["variables"] for r in outputs["few_shot_qa", "srt"]]
