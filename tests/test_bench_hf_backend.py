"""The Hugging Face per-call baseline (bench.suite.hf_backend) against our embedded engine.

Both load the converted SmolLM2-135M in float32; every model-marked test shares one HF backend
and one engine (module fixtures). The baseline must do the same model work as the engine:
same greedy text, same select logprobs, same stop handling, valid constrained output.
"""
from __future__ import annotations

import os
import re
import time

import pytest
import torch

import sglc as sgl
from bench.suite.hf_backend import HFPerCallBackend
from sglc.executor.batch import run_graph_batch
from sglc.wire.backend import GenParams, Prompt

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPTS = [
    "The three primary colors are",
    CHAT.format("Write one sentence about the sea."),
    "def fibonacci(n):\n    ",
]


@pytest.fixture(scope="module")
def hf():
    return HFPerCallBackend(dtype="float32")


@pytest.fixture(scope="module")
def engine():
    from sglc_runtime.server.engine_backend import EngineBackend

    backend = EngineBackend(dtype="float32")
    yield backend
    backend.close()


def test_unknown_dtype_is_rejected_naming_it():
    """A dtype torch does not know fails at construction with the name in the message."""
    with pytest.raises(ValueError, match="float33"):
        HFPerCallBackend(dtype="float33")


@pytest.mark.model
def test_greedy_text_equals_the_engines(hf, engine):
    """Greedy, ignore_eos, 16 tokens: the HF output text and token count equal the engine's."""
    params = GenParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
    for prompt in PROMPTS:
        ours, theirs = engine.generate(Prompt(prompt), params), hf.generate(Prompt(prompt), params)
        assert theirs.text == ours.text, prompt
        assert theirs.meta.completion_tokens == ours.meta.completion_tokens == 16
        assert theirs.meta.prompt_tokens == ours.meta.prompt_tokens and theirs.meta.cached_tokens == 0


@pytest.mark.model
def test_eos_ends_the_output_like_the_engine_unless_ignored(hf, engine):
    """Without ignore_eos both stop at the same eos token with the same text and reason."""
    prompt = Prompt(CHAT.format("Answer with one word: is the sky blue?"))
    params = GenParams(max_new_tokens=24, temperature=0.0)
    ours, theirs = engine.generate(prompt, params), hf.generate(prompt, params)
    assert ours.meta.finish_reason["type"] == "stop", "the prompt must make the model stop early"
    assert (theirs.text, theirs.meta.finish_reason) == (ours.text, ours.meta.finish_reason)
    # NOTE: generate() would take eos from the model's generation_config if the backend let it.
    ignoring = GenParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)
    ours, theirs = engine.generate(prompt, ignoring), hf.generate(prompt, ignoring)
    assert theirs.meta.completion_tokens == ours.meta.completion_tokens == 24
    assert theirs.text == ours.text


@pytest.mark.model
def test_stop_strings_truncate_like_the_engine(hf, engine):
    """A stop string that the greedy output contains cuts both outputs at the same place."""
    prompt, free = Prompt(PROMPTS[0]), GenParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
    full = engine.generate(prompt, free).text
    stop = full.split()[2]  # a word in the middle of the output
    params = GenParams(max_new_tokens=16, temperature=0.0, ignore_eos=True, stop=[stop])
    ours, theirs = engine.generate(prompt, params), hf.generate(prompt, params)
    assert theirs.text == ours.text == full[: full.index(stop)]
    assert theirs.meta.finish_reason == ours.meta.finish_reason == {"type": "stop", "matched": stop}
    assert theirs.meta.completion_tokens < 16  # generation stopped early, not just the text


@pytest.mark.model
def test_regex_constrained_gen_fullmatches(hf):
    """Token-by-token masking with our FSM index yields text that fullmatches the regex."""
    pattern = r"(Paris|London|Rome), population [1-9][0-9]{2,6}"
    out = hf.generate(Prompt("The biggest city in France is"),
                      GenParams(max_new_tokens=24, temperature=0.0, ignore_eos=True, regex=pattern))
    assert re.fullmatch(pattern, out.text), out.text
    assert out.meta.finish_reason["type"] == "stop"


@pytest.mark.model
def test_select_logprobs_equal_the_engines(hf, engine):
    """Each choice's token logprobs (conditional and unconditional) match the engine's to 1e-3."""
    prompt = Prompt("Q: What is the capital of Italy?\nA: The capital of Italy is")
    choices = [" Rome", " Milan", " a large city in the north"]
    ours, theirs = engine.score(prompt, choices, unconditional=True), hf.score(prompt, choices, unconditional=True)
    for a, b in zip(ours.choices, theirs.choices):
        assert len(a.token_logprobs) == len(b.token_logprobs) >= 1
        assert b.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-3)
        assert b.unconditional_logprobs == pytest.approx(a.unconditional_logprobs, abs=1e-3)


@sgl.function
def pick_and_explain(s, topic):
    s += "Topic: " + topic + "\nIs this topic about science or art? Answer:"
    s += sgl.select("kind", choices=[" science", " art"])
    s += "\nOne sentence about it:"
    s += sgl.gen("sentence", max_tokens=12)


@pytest.mark.model
def test_a_compiled_graph_gives_the_engines_variables(hf, engine):
    """gen + select through run_graph_batch: the same variables on HF as on the engine."""
    graph = pick_and_explain.compile().graph
    inputs = [{"topic": "black holes"}, {"topic": "oil painting"}]
    sampling = {"temperature": 0.0, "ignore_eos": True}
    ours = run_graph_batch(graph, engine, inputs, sampling=sampling)
    theirs = run_graph_batch(graph, hf, inputs, sampling=sampling)
    assert all(r.ok for r in ours + theirs), [r.error for r in ours + theirs]
    assert [r.variables for r in theirs] == [r.variables for r in ours]
    assert {r.variables["kind"] for r in theirs} <= {" science", " art"}


@pytest.mark.model
def test_metrics_count_calls_and_tokens(hf):
    """One gen and one select add 2 calls, the gen's tokens, and every scored token (no reuse)."""
    before = hf.metrics()
    gen = hf.generate(Prompt("Hello there"), GenParams(max_new_tokens=3, temperature=0.0, ignore_eos=True))
    score = hf.score(Prompt("Hello there"), [" friend", " world"])
    after = hf.metrics()
    assert after["calls"] - before["calls"] == 2
    assert after["completion_tokens"] - before["completion_tokens"] == gen.meta.completion_tokens == 3
    scored = sum(score.meta.prompt_tokens + len(c.token_logprobs) for c in score.choices)
    assert after["prompt_tokens"] - before["prompt_tokens"] == gen.meta.prompt_tokens + scored
    assert after["forward_s"] > before["forward_s"]
    assert hf.cache_prefix(Prompt("Hello there")).cached_tokens == 0 and hf.metrics()["calls"] == after["calls"]


@pytest.mark.model
def test_long_prompt_gives_the_engines_text_and_prints_both_times(hf, engine):
    """A 500-token prompt, 16 greedy tokens, one thread: same text; times are printed, not asserted."""
    words = ("the river runs past old mills and quiet farms toward the sea " * 60).split()
    text = " ".join(words)
    ids = hf.tokenizer.encode(text)
    prompt = Prompt(hf.tokenizer.decode(ids[:500]))
    params = GenParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        engine.engine.flush_cache()  # NOTE: a cold cache: the engine computes the whole prompt too
        t0 = time.perf_counter()
        ours = engine.generate(prompt, params)
        t1 = time.perf_counter()
        theirs = hf.generate(prompt, params)
        t2 = time.perf_counter()
    finally:
        torch.set_num_threads(threads)
    assert theirs.text == ours.text and ours.meta.prompt_tokens == theirs.meta.prompt_tokens
    load = os.getloadavg()[0]
    print(f"\n[hf-vs-engine] prompt {theirs.meta.prompt_tokens} tok + 16 new, 1 thread: "
          f"engine {t1 - t0:.3f} s, HF {t2 - t1:.3f} s, HF/engine {(t2 - t1) / (t1 - t0):.2f}x (load avg {load:.2f} on {os.cpu_count()} cores)")
