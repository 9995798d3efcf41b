"""API speculative execution (`@sgl.function(num_api_spec_tokens=N)`) on the `openai` backend.

The paper's case: a few-shot program extracting three fields from a page makes ONE API call
instead of three when the model's surplus follows the template, and the server's metrics count
about 3x fewer input tokens. A template the model does not produce falls back to a call per gen.
"""
from __future__ import annotations

import pytest

import sglc as sgl
from sglc.backends import make_backend
from sglc.executor.backends.api_speculative import SpeculativeCache
from sglc.wire.backend import CallMeta, GenParams, GenResult

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
    s += "ZQX-7 field => " + sgl.gen("age", stop="\n", temperature=0, max_tokens=16) + "\n"
    s += "QWV-9 field => " + sgl.gen("city", stop="\n", temperature=0, max_tokens=16) + "\n"


def scripted(outputs: list[str], tokens: list[list[str]] | None = None):
    """A call function returning the given texts in order (finish by length; token texts if given)."""
    calls: list[GenParams] = []

    def call(params: GenParams, want_tokens: bool) -> tuple[GenResult, list[str] | None]:
        calls.append(params)
        k = len(calls) - 1
        return (GenResult(outputs[k], CallMeta(finish_reason={"type": "length"})),
                tokens[k] if tokens is not None and want_tokens else None)
    return call, calls


def test_surplus_answers_the_next_gen_when_the_prompt_continues_it():
    """The first gen calls once without its stop; a next prompt that is a prefix of prompt+surplus is
    answered from the surplus (up to its stop) with no call."""
    cache = SpeculativeCache(32)
    call, calls = scripted(["Ann\nAge: 29\nCity: Rome\nPage"])
    first = cache.generate("Name: ", GenParams(stop=["\n"]), call)
    assert first.text == "Ann" and calls[0].stop is None and calls[0].max_new_tokens == 32
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


TOKENS = ["Ann", "\n", "Age", ":", " 2", "9", "\n", "City", ":", " Ro", "me", " Italy", "\n"]


def test_a_surplus_value_longer_than_max_tokens_is_cut_to_it_and_finishes_by_length():
    """A later gen's value is cut after its own max_tokens-th token (token texts from the speculative
    call, which asks for them) and reports finish_reason length, as a separate call would."""
    cache = SpeculativeCache(32)
    call, calls = scripted(["".join(TOKENS)], [TOKENS])
    assert cache.generate("Name: ", GenParams(stop=["\n"], max_new_tokens=16), call).text == "Ann"
    age = cache.generate("Name: Ann\nAge: ", GenParams(stop=["\n"], max_new_tokens=1), call)
    assert (age.text, age.meta.finish_reason["type"]) == ("2", "length")
    age = cache.generate("Name: Ann\nAge: ", GenParams(stop=["\n"], max_new_tokens=2), call)
    assert (age.text, age.meta.finish_reason["type"]) == ("29", "stop")
    city = cache.generate("Name: Ann\nAge: 29\nCity: ", GenParams(stop=["\n"], max_new_tokens=2), call)
    assert (city.text, city.meta.finish_reason["type"]) == ("Rome", "length")
    assert len(calls) == 1 and cache.stats.hits == 3


def test_the_later_gens_own_stop_strings_cut_the_surplus_value():
    """Each gen's stop applies to its surplus value (not the first gen's stop)."""
    cache = SpeculativeCache(32)
    call, calls = scripted(["".join(TOKENS)], [TOKENS])
    cache.generate("Name: ", GenParams(stop=["\n"], max_new_tokens=16), call)
    city = cache.generate("Name: Ann\nAge: 29\nCity: ", GenParams(stop=[" It", "\n"], max_new_tokens=16), call)
    assert (city.text, city.meta.finish_reason["type"]) == ("Rome", "stop") and len(calls) == 1


def test_without_token_texts_a_value_that_may_exceed_max_tokens_makes_a_call():
    """When the endpoint lists no tokens, a surplus value is used only if it cannot exceed max_tokens
    (at most max_tokens characters); otherwise the gen makes its own call."""
    cache = SpeculativeCache(32)
    call, calls = scripted(["Ann\nAge: 29\nCity: Rome\n", "Ro\n"])
    cache.generate("Name: ", GenParams(stop=["\n"], max_new_tokens=16), call)
    assert cache.generate("Name: Ann\nAge: ", GenParams(stop=["\n"], max_new_tokens=2), call).text == "29"
    assert cache.generate("Name: Ann\nAge: 29\nCity: ", GenParams(stop=["\n"], max_new_tokens=2), call).text == "Ro"
    assert len(calls) == 2 and cache.stats.misses == 1


def test_each_run_gets_its_own_state_and_the_programs_setting_beats_the_backend_default(monkeypatch):
    """new_speculation: a fresh state per call; N from the program, else the backend default
    (constructor or enable_api_speculation), else none."""
    from sglc.executor.backends.openai_backend import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    backend = OpenAIBackend("127.0.0.1:9", model="m", model_type="completion")  # NOTE: no call is made
    assert backend.new_speculation(None) is None
    a, b = backend.new_speculation(16), backend.new_speculation(16)
    assert a is not b and a.num_spec_tokens == 16
    backend.enable_api_speculation(8)
    assert backend.new_speculation(None).num_spec_tokens == 8 and backend.new_speculation(4).num_spec_tokens == 4
    with pytest.raises(ValueError, match="num_api_spec_tokens"):
        backend.enable_api_speculation(0)
    backend.close()


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
    backend = make_backend("openai", address)  # NOTE: no backend-level setting: the program's travels per run
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


def short_extract_body(s, page, age_tokens=16):
    s += SHOTS + "Page: " + page + "\n"
    s += "Name: " + sgl.gen("name", stop="\n", temperature=0, max_tokens=16) + "\n"
    s += "Age: " + sgl.gen("age", stop="\n", temperature=0, max_tokens=age_tokens) + "\n"
    s += "City: " + sgl.gen("city", stop="\n", temperature=0, max_tokens=16) + "\n"


def api_calls(state) -> int:
    """Gens of one run that made an API call (the others were answered from a speculative surplus)."""
    return sum(1 for c in state.result.calls if c.op == "gen" and not (c.finish_reason or {}).get("speculative"))


@pytest.mark.model
def test_programs_with_different_spec_settings_share_one_backend_concurrently(http_address, monkeypatch):
    """One OpenAIBackend, three programs at once: eager run with N=24 (1 call), compiled run without
    speculation (3 calls), compiled run with N=32 through the default backend (1 call); the
    backend counts exactly their sum; both speculative runs read the same fields (greedy)."""
    import threading

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    backend = make_backend("openai", http_address)
    eager_spec = sgl.function(num_api_spec_tokens=24)(short_extract_body)
    plain = sgl.function(short_extract_body).compile(age_tokens=16)
    compiled_spec = sgl.function(num_api_spec_tokens=32)(short_extract_body).compile(age_tokens=16)
    states: dict[str, object] = {}
    sgl.set_default_backend(backend)
    try:
        jobs = {"eager_spec": lambda: eager_spec.run(page=PAGE, backend=backend),
                "plain": lambda: plain.run(page=PAGE, backend=backend),
                "compiled_spec": lambda: compiled_spec.run(page=PAGE)}
        threads = [threading.Thread(target=lambda k=k, f=f: states.__setitem__(k, f())) for k, f in jobs.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        sgl.set_default_backend(None)
        backend.close()
    calls = {k: api_calls(st) for k, st in states.items()}
    print(f"\nconcurrent programs on one backend: API calls {calls}, backend total {backend.num_api_calls}")
    assert calls == {"eager_spec": 1, "plain": 3, "compiled_spec": 1}
    assert backend.num_api_calls == 5
    fields = {k: [st[f] for f in ("name", "age", "city")] for k, st in states.items()}
    assert fields["eager_spec"] == fields["compiled_spec"]  # one greedy continuation, read the same way


@pytest.mark.model
def test_a_surplus_value_is_cut_to_the_later_gens_max_tokens(http_address, monkeypatch):
    """With age max_tokens=1, the age read from the surplus is its first token only (finish by length,
    no call), a proper prefix of the age the same program reads with max_tokens=16."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    backend = make_backend("openai", http_address)
    full = sgl.function(num_api_spec_tokens=24)(short_extract_body).run(page=PAGE, backend=backend)
    cut = sgl.function(num_api_spec_tokens=24)(short_extract_body).run(page=PAGE, age_tokens=1, backend=backend)
    backend.close()
    meta = cut.get_meta_info("age")
    print(f"\nsurplus age {full['age']!r} -> max_tokens=1: {cut['age']!r} ({meta['finish_reason']})")
    assert meta["finish_reason"] == {"type": "length", "speculative": True}
    assert cut["age"] and len(cut["age"]) < len(full["age"]) and full["age"].startswith(cut["age"])


def colors_body(s):
    s += sgl.user("List three colors, one per line, nothing else.")
    s += sgl.assistant_begin()
    s += sgl.gen("first", stop="\n", temperature=0, max_tokens=16) + "\n"
    s += sgl.gen("second", stop="\n", temperature=0, max_tokens=16) + "\n"
    s += sgl.gen("third", stop="\n", temperature=0, max_tokens=16)
    s += sgl.assistant_end()


@pytest.mark.model
def test_chat_model_answers_later_gens_of_an_assistant_turn_from_one_call(http_address, monkeypatch):
    """A chat model cannot continue a partial assistant message, so without speculation the second gen
    of a turn fails; with num_api_spec_tokens the turn's three gens are answered by one chat call."""
    from sglc.errors import SglcError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    backend = make_backend("openai", http_address, model_type="chat")
    with pytest.raises(SglcError, match="cannot continue the partial assistant message"):
        sgl.function(colors_body).run(backend=backend)
    before = backend.num_api_calls
    state = sgl.function(num_api_spec_tokens=32)(colors_body).run(backend=backend)
    backend.close()
    values = [state[k] for k in ("first", "second", "third")]
    print(f"\nchat speculation: {values}, API calls {backend.num_api_calls - before}")
    assert backend.num_api_calls - before == 1 and api_calls(state) == 1
    assert all(v and "\n" not in v for v in values)


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
