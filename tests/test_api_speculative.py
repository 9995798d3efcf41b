"""API speculative execution (`@sgl.function(num_api_spec_tokens=N)`) on the `openai` backend.

The paper's case: a few-shot program extracting three fields from a page makes ONE API call
instead of three when the model's surplus follows the template, and the server's metrics count
about 3x fewer input tokens. A template the model does not produce falls back to a call per gen.
"""
from __future__ import annotations

import pytest

import sglc as sgl
from sglc.executor.backend import CallMeta, GenParams, GenResult
from sglc.executor.backends import make_backend
from sglc.executor.backends.api_speculative import SpeculativeCache

SHOTS = ("Extract the person's name, age and city from each page.\n\n"
         "Page: Maria Lopez, 34, moved to Madrid last spring.\nName: Maria Lopez\nAge: 34\nCity: Madrid\n\n"
         "Page: Tom Becker (52) runs a bakery in Berlin.\nName: Tom Becker\nAge: 52\nCity: Berlin\n\n")
PAGE = "Anna Schmidt is 29 years old and works as a nurse in Hamburg."


def extract_body(s, page):
    s += SHOTS + "Page: " + page + "\n"
    s += "Name: " + sgl.gen("name", stop="\n", temperature=0) + "\n"
    s += "Age: " + sgl.gen("age", stop="\n", temperature=0) + "\n"
    s += "City: " + sgl.gen("city", stop="\n", temperature=0) + "\n"


def odd_template_body(s, page):
    s += SHOTS + "Page: " + page + "\n"
    s += "Name: " + sgl.gen("name", stop="\n", temperature=0) + "\n"
    s += "ZQX-7 field => " + sgl.gen("age", stop="\n", temperature=0) + "\n"
    s += "QWV-9 field => " + sgl.gen("city", stop="\n", temperature=0) + "\n"


def scripted(outputs: list[str]):
    """A call function returning the given texts in order (for the cache's own logic)."""
    calls: list[GenParams] = []

    def call(params: GenParams) -> GenResult:
        calls.append(params)
        return GenResult(outputs[len(calls) - 1], CallMeta(finish_reason={"type": "length"}))
    return call, calls


def test_surplus_answers_the_next_gen_when_the_prompt_continues_it():
    """The first gen calls once without its stop; a next prompt that is a prefix of prompt+surplus is
    answered from the surplus (up to its stop) with no call."""
    cache = SpeculativeCache(32)
    call, calls = scripted(["Ann\nAge: 29\nCity: Rome\nPage"])
    first = cache.generate("Name: ", GenParams(stop=["\n"]), call)
    assert first.text == "Ann" and calls[0].stop is None and calls[0].max_tokens == 32
    assert cache.generate("Name: Ann\nAge: ", GenParams(stop=["\n"]), call).text == "29"
    assert cache.generate("Name: Ann\nAge: 29\nCity: ", GenParams(stop=["\n"]), call).text == "Rome"
    assert len(calls) == 1 and cache.stats.hits == 2


def test_a_prompt_off_the_surplus_or_a_surplus_without_stop_falls_back_to_a_call():
    """No prefix match, or a matching surplus with no stop in it (cut by length), makes a new call."""
    cache = SpeculativeCache(8)
    call, calls = scripted(["Ann\nAge: 2", "29\n", "x"])
    cache.generate("Name: ", GenParams(stop=["\n"]), call)
    assert cache.generate("Name: Ann\nAge: ", GenParams(stop=["\n"]), call).text == "29"  # "2" had no stop
    assert cache.generate("Other: ", GenParams(stop=["\n"]), call).text == "x"
    assert len(calls) == 3 and cache.stats.hits == 0


@pytest.fixture(scope="module")
def http_address():
    from sglc_runtime.server.launch import Runtime, ServeConfig

    rt = Runtime(ServeConfig(port=0, http_port=0, kv_slots=8192))
    yield [f for f in rt.frontends if f.kind == "http"][0].address
    rt.stop(1.0)


def run_counted(body, spec: int | None, address: str, monkeypatch) -> tuple[int, int, dict]:
    """(API calls, input tokens the server counted, variables) for one run of the program."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    program = sgl.function(num_api_spec_tokens=spec)(body) if spec else sgl.function(body)
    backend = make_backend("openai", address, num_api_spec_tokens=program.num_api_spec_tokens)
    before = backend.metrics()["prompt_tokens"]
    state = program.run(page=PAGE, backend=backend)
    used = backend.metrics()["prompt_tokens"] - before
    backend.close()
    return backend.num_api_calls, used, {k: state[k] for k in ("name", "age", "city")}


@pytest.mark.model
def test_three_field_extraction_makes_one_call_instead_of_three(http_address, monkeypatch):
    """With num_api_spec_tokens the three gens cost 1 API call (vs 3) and about 3x fewer input
    tokens on the server; the fields come from the one continuation."""
    calls_plain, tokens_plain, _ = run_counted(extract_body, None, http_address, monkeypatch)
    calls_spec, tokens_spec, fields = run_counted(extract_body, 64, http_address, monkeypatch)
    print(f"\napi speculative: calls {calls_plain} -> {calls_spec}; input tokens {tokens_plain} -> {tokens_spec} "
          f"({tokens_plain / tokens_spec:.2f}x fewer); fields {fields}")
    assert (calls_plain, calls_spec) == (3, 1)
    assert tokens_plain / tokens_spec > 2.5
    assert all(v and "\n" not in v for v in fields.values())


@pytest.mark.model
def test_template_the_model_does_not_follow_falls_back_to_one_call_per_gen(http_address, monkeypatch):
    """When the surplus does not match the program's template, every gen makes its own call."""
    calls, _, fields = run_counted(odd_template_body, 64, http_address, monkeypatch)
    assert calls == 3 and all("\n" not in v for v in fields.values())


@pytest.mark.model
def test_sglc_run_backend_openai_speculates_for_a_compiled_program(http_address, tmp_path):
    """`sglc compile` keeps num_api_spec_tokens in the graph; `sglc run --backend openai` then answers
    the later gens of the template from the first call's surplus (no input tokens for them)."""
    import json
    import os
    import subprocess
    import sys

    from grpc_helpers import ROOT
    from sglc.cli import main as sglc_main

    source = tmp_path / "extract.py"
    source.write_text("import sglc as sgl\n\nSHOTS = " + repr(SHOTS) + "\n\n\n@sgl.function(num_api_spec_tokens=64)\n"
                      "def extract(s, page):\n" + "".join(
                          "    " + line.strip() + "\n" for line in [
                              's += SHOTS + "Page: " + page + "\\n"',
                              's += "Name: " + sgl.gen("name", stop="\\n", temperature=0) + "\\n"',
                              's += "Age: " + sgl.gen("age", stop="\\n", temperature=0) + "\\n"',
                              's += "City: " + sgl.gen("city", stop="\\n", temperature=0) + "\\n"']))
    graph, inputs, out = tmp_path / "extract.pb", tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    assert sglc_main(["compile", str(source), "-o", str(graph)]) == 0
    inputs.write_text(json.dumps({"page": PAGE}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-local"}
    proc = subprocess.run([sys.executable, "-m", "sglc.cli", "run", str(graph), "--backend", "openai", "--endpoint",
                           f"http://{http_address}", "--input", str(inputs), "--output", str(out), "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text().splitlines()[0])
    gens = [c for c in result["calls"] if c["op"] == "gen"]
    assert len(gens) == 3 and result["error"] is None
    assert [c["prompt_tokens"] > 0 for c in gens] == [True, False, False]
