"""The torch-free engine (runtime/engine/native_engine.py) and `sglc serve --engine native`.

Oracle for tokens: the torch engine's model fed one token at a time (tests/test_native_model.py
shows the native model equals it bit for bit), so a greedy request must give its tokens however
the engine batches and chunks it. The server is a real `sglc serve` subprocess on loopback,
driven by the real `openai` client and SGLang's /generate; that it never imported torch is read
from the process's own memory map (libtorch_python is loaded by `import torch` and nothing else).
The radix cache over numpy slots is the torch engine's own (tests/test_slot_arrays.py); here,
that it serves repeated prefixes with the same tokens.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import openai
import pytest
from grpc_helpers import ServeProcess
from test_native_model import DATA, torch_model, torch_token_by_token

import sglc
from sglc.fleet import free_port
from sglc_runtime.engine.native_engine import NativeEngine
from sglc_runtime.sampling.numpy_sampling import log_softmax, sample_token
from sglc_runtime.model.native_model import NativeGGUFModel
from sglc_runtime.model.models.tiled_linear import native_tile_kernels
from sglc_runtime.sampling.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(not native_tile_kernels(), reason="no native GGUF kernels on this machine")

FIXTURE = "qwen2-Q5_0"
PROMPTS = [[3, 17, 30, 5, 9, 11, 60, 2, 44], [7, 8, 9], list(range(20, 45)), [100]]
GREEDY = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def oracle():
    model = torch_model(FIXTURE)
    return [torch_token_by_token(model, p, GREEDY["max_new_tokens"])[1] for p in PROMPTS]


def engine(**kw) -> NativeEngine:
    return NativeEngine(model=str(DATA / f"{FIXTURE}.gguf"), num_kv_slots=kw.pop("num_kv_slots", 256), **kw)


@pytest.mark.parametrize("chunk", [256, 4])
def test_greedy_requests_batched_and_chunked_give_the_torch_models_tokens(oracle, chunk):
    outs = engine(chunked_prefill_size=chunk).generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == oracle
    assert all(o.finish_reason["type"] == "length" and o.prompt_tokens == len(p) for o, p in zip(outs, PROMPTS))


def test_requests_beyond_the_slots_and_rows_wait_their_turn(oracle):
    """Slots for two requests at a time and one row: all still finish, with the same tokens."""
    e = engine(num_kv_slots=40, max_running_requests=1)
    assert [o.token_ids for o in e.generate(PROMPTS, GREEDY)] == oracle
    stats = e.stats()
    assert stats.num_finished == len(PROMPTS) and stats.num_used_slots == stats.cached_slots  # NOTE: the rest is cached
    assert e.tree.protected_size() == 0
    e.tree.check_integrity()
    e.pool.check_integrity()


def test_the_radix_cache_serves_repeated_prefixes_with_the_same_tokens(oracle):
    """A prompt seen before is served from the cache (all but its last token), a longer one that
    extends it too; the tokens are the uncached ones' (the same K/V); under a pool too small for
    everything, unlocked prefixes are evicted and requests still finish with their tokens."""
    e = engine(chunked_prefill_size=4)
    first = e.generate(PROMPTS, GREEDY)
    again = e.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in again] == [o.token_ids for o in first] == oracle
    assert [o.cached_tokens for o in first] == [0, 0, 0, 0]
    assert [o.cached_tokens for o in again] == [len(p) - 1 for p in PROMPTS]
    longer = PROMPTS[2] + [7, 8, 9]
    (extended,) = e.generate([longer], GREEDY)
    assert extended.cached_tokens >= len(PROMPTS[2])
    (cold,) = engine(disable_radix_cache=True).generate([longer], GREEDY)
    assert extended.token_ids == cold.token_ids and cold.cached_tokens == 0
    tight = engine(num_kv_slots=48, max_running_requests=2)
    for _ in range(3):
        assert [o.token_ids for o in tight.generate(PROMPTS, GREEDY)] == oracle
    tight.tree.check_integrity()
    assert tight.flush_cache() and tight.stats().num_used_slots == 0


def test_stops_lengths_and_logprobs():
    e = engine()
    (first,) = e.generate([PROMPTS[0]], GREEDY)
    stop_at = first.token_ids[3]
    (stopped,) = e.generate([PROMPTS[0]], {**GREEDY, "stop_token_ids": [stop_at]})
    assert stopped.token_ids == first.token_ids[:first.token_ids.index(stop_at) + 1]
    assert stopped.finish_reason["type"] == "stop"
    (late,) = e.generate([PROMPTS[0]], {**GREEDY, "stop_token_ids": [stop_at], "min_new_tokens": 6})
    assert stop_at not in late.token_ids[:6]
    (lp,) = e.generate([PROMPTS[0]], {**GREEDY, "return_logprob": True, "top_logprobs_num": 3})
    assert lp.token_ids == first.token_ids and len(lp.output_logprobs) == 8
    for token, value, top in zip(lp.token_ids, lp.output_logprobs, lp.output_top_logprobs):
        assert value <= 0 and top[0][0] == token and abs(top[0][1] - value) < 1e-6  # greedy: the best token
        assert top[0][1] >= top[1][1] >= top[2][1]


def test_seeded_sampling_repeats_and_top_k_one_is_greedy():
    e = engine()
    params = {"max_new_tokens": 8, "temperature": 0.9, "top_p": 0.95, "seed": 7, "ignore_eos": True}
    a, b = e.generate([PROMPTS[1], PROMPTS[1]], params)
    assert a.token_ids == b.token_ids
    (c,) = e.generate([PROMPTS[1]], {**params, "seed": 8, "temperature": 5.0})
    assert c.token_ids != a.token_ids
    (greedy,) = e.generate([PROMPTS[1]], GREEDY)
    (k1,) = e.generate([PROMPTS[1]], {**params, "top_k": 1})
    assert k1.token_ids == greedy.token_ids


def test_penalties_follow_the_torch_engines_rule():
    """The torch sampler's PenaltyBatch on the same logits and outputs gives the same values."""
    import torch

    from sglc_runtime.sampling.numpy_sampling import apply_penalties
    from sglc_runtime.sampling.penalties import PenaltyBatch

    rng = np.random.default_rng(1)
    logits = rng.standard_normal(50).astype(np.float32)
    outputs = [3, 7, 7, 20, 3, 3]
    for kw in ({"frequency_penalty": 0.4}, {"presence_penalty": 0.7}, {"repetition_penalty": 1.3},
               {"frequency_penalty": -0.2, "presence_penalty": 0.5, "repetition_penalty": 0.8}):
        p = SamplingParams(**kw)
        want = torch.from_numpy(logits.copy())[None]
        PenaltyBatch.build([p], [outputs], 50).apply(want)
        np.testing.assert_allclose(apply_penalties(logits, p, outputs), want[0].numpy(), rtol=0, atol=1e-6)
    (plain,) = engine().generate([PROMPTS[1]], GREEDY)
    (penalized,) = engine().generate([PROMPTS[1]], {**GREEDY, "frequency_penalty": 2.0, "presence_penalty": 2.0})
    assert len(set(penalized.token_ids)) > len(set(plain.token_ids))  # NOTE: the fixture repeats itself greedily


def test_sample_token_keeps_to_top_k_top_p_and_min_p():
    rng = np.random.default_rng(0)
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], np.float32))
    draw = lambda **kw: {sample_token(logits, SamplingParams(**kw), rng) for _ in range(300)}  # noqa: E731
    assert draw(temperature=1.0, top_k=2) == {0, 1}
    assert draw(temperature=1.0, top_p=0.6) == {0, 1}  # 0.5 < 0.6 <= 0.7
    assert draw(temperature=1.0, min_p=0.35) == {0, 1}  # p >= 0.35 * 0.5
    assert draw(temperature=1.0) == {0, 1, 2, 3, 4}
    assert draw(temperature=0.0) == {0}


def test_what_it_does_not_run_is_refused_at_submit_by_name():
    e = engine()
    for params, name in [({"regex": "a+"}, "constraints"), ({"stop_regex": ["x"]}, "stop_regex")]:
        with pytest.raises(ValueError, match=name):
            e.submit(PROMPTS[0], params)
    with pytest.raises(ValueError, match="context"):
        e.submit(PROMPTS[0], {"max_new_tokens": 10**6})
    assert e.stats().num_waiting == 0


@pytest.mark.parametrize("chunk", [256, 4])
def test_prompt_logprobs_are_the_models_rows_across_chunks(chunk):
    """input_logprobs from logprob_start_len on: log_softmax of the model's row p at token p + 1
    (position 0: None), also where the prompt is prefilled in chunks of 4; a prefill-only request
    (max_new_tokens 0) ends with its prompt."""
    prompt = PROMPTS[2]
    model = NativeGGUFModel(DATA / f"{FIXTURE}.gguf", kv_slots=64, dtype="bfloat16")
    n = len(prompt)
    rows = np.arange(n)
    logits = model.forward(np.array(prompt), rows, rows, np.tril(np.broadcast_to(rows, (n, n))), rows + 1)
    want = [None] + [float(log_softmax(logits[p - 1])[prompt[p]]) for p in range(1, n)]
    e = engine(chunked_prefill_size=chunk)
    (all_of_it,) = e.generate([prompt], {"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 0})
    assert all_of_it.input_logprobs == want and all_of_it.token_ids == [] and all_of_it.finish_reason["type"] == "length"
    (tail,) = e.generate([prompt], {**GREEDY, "return_logprob": True, "logprob_start_len": 5})
    assert tail.input_logprobs == want[5:] and tail.input_token_ids == prompt[5:] and len(tail.token_ids) == 8


def test_select_scores_are_the_prompt_logprobs_of_each_choice():
    """score_job (what select runs) over the torch engine's ScoreJob: each choice's logprobs are
    the prompt logprobs of prompt + choice, and near the torch engine's own scores (its prefill
    computes otherwise: SDPA, bf16 copies of the weights at prefill)."""
    from sglc_runtime.engine import Engine

    e = engine(chunked_prefill_size=4)
    prompt, choices = "The capital of France is", [" Paris", " London", " a"]
    got = e.score_job(prompt, choices).results()
    ref = Engine(model=str(DATA / f"{FIXTURE}.gguf"))
    try:
        want = ref.score(prompt, choices)
    finally:
        ref.shutdown()
    assert e.stats().cached_tokens >= len(choices) * (got[0].prompt_tokens - 1)  # NOTE: the prompt prefilled once
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids and g.prompt_tokens == w.prompt_tokens
        assert g.logprobs == pytest.approx(w.logprobs, abs=0.25)
        full = e.tokenizer.encode(prompt + choices[got.index(g)])
        (direct,) = e.generate([full], {"max_new_tokens": 0, "return_logprob": True,
                                        "logprob_start_len": len(full) - len(g.token_ids)})
        assert direct.input_logprobs == g.logprobs


def test_abort_and_shutdown_free_everything():
    e = engine(num_kv_slots=128)
    e.start()
    try:
        # NOTE: the tiny fixture decodes 100 tokens in ~30 ms, so the abort follows the first chunk
        # at once; where the request still wins the race, another one is tried
        for _ in range(5):
            started, done = threading.Event(), threading.Event()

            def chunks(chunk, started=started, done=done):
                started.set()
                if chunk.finished:
                    done.set()

            rid = e.submit(PROMPTS[2], {"max_new_tokens": 100, "ignore_eos": True}, callback=chunks)
            assert started.wait(30)
            if e.abort(rid):
                break
            assert done.wait(30)
        else:
            pytest.fail("every request finished before its abort")
        assert done.wait(30)
        assert not e.abort(rid)
        deadline = time.monotonic() + 10
        while e.stats().num_running and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = e.stats()  # NOTE: what it computed is cached, nothing else held, nothing locked
        assert stats.num_running == 0 and stats.num_used_slots == stats.cached_slots and e.tree.protected_size() == 0
        e.submit(PROMPTS[2], {"max_new_tokens": 100, "ignore_eos": True})
    finally:
        assert e.shutdown()
    assert e.stats().num_running == 0 and e.stats().num_waiting == 0
    assert e.flush_cache() and e.stats().num_used_slots == 0
    e.pool.check_integrity()


# --- program hints (issue 28): the cache keeps a program's texts ---------------------------

def test_a_hinted_text_outlives_unhinted_ones_and_goes_first_once_its_program_ends(oracle):
    """Under eviction pressure the text a hinted call ended with stays cached while unhinted ones
    go (cache/retention.py, as in the torch engine); ``end_program`` releases it; outputs are the
    same with and without hints."""
    from sglc.wire.program_hint import ProgramHint

    e = engine(num_kv_slots=80, max_running_requests=1)
    hinted = PROMPTS[2]  # 25 prompt tokens + 8 new
    out = e.wait(e.submit(hinted, GREEDY, hint=ProgramHint("agent-1", next_use=1, lease_ms=60_000)))
    assert out.token_ids == oracle[2]
    assert e.stats().hinted_tokens == len(hinted) + GREEDY["max_new_tokens"] - 1
    fillers = [[200 + 40 * i + k for k in range(20)] for i in range(4)]  # unhinted, 27 slots each, no shared prefix
    for f in fillers:
        e.wait(e.submit(f, GREEDY))
    assert e.tree.peek_prefix_len(hinted) == len(hinted)  # NOTE: evicted around it
    assert e.tree.peek_prefix_len(fillers[0]) < len(fillers[0])
    assert e.stats().hint_evictions == 0
    assert e.end_program("agent-1") == len(hinted) + GREEDY["max_new_tokens"] - 1
    assert e.end_program("agent-1") == 0 and e.stats().hinted_tokens == 0
    e.wait(e.submit(fillers[0], GREEDY))
    e.wait(e.submit(fillers[1], GREEDY))
    assert e.tree.peek_prefix_len(hinted) < len(hinted)  # NOTE: its program ended: it went first
    e.tree.check_integrity()
    e.pool.check_integrity()
    with pytest.raises(TypeError, match="ProgramHint"):
        e.submit(PROMPTS[0], GREEDY, hint={"program_id": "x"})
    with pytest.raises(ValueError, match="program"):
        e.end_program("")


def test_hints_never_change_outputs(oracle):
    from sglc.wire.program_hint import NEVER, ProgramHint

    e = engine(num_kv_slots=64, max_running_requests=2)
    hints = [ProgramHint(f"p{i}", next_use=NEVER if i % 2 else i) for i in range(len(PROMPTS))]
    rids = [e.submit(p, GREEDY, hint=h) for p, h in zip(PROMPTS, hints)]
    assert [e.wait(r).token_ids for r in rids] == oracle



# --- program hints (issue 28): admission by program, as the torch scheduler's ----------------

def _hinted(e, tokens, program_id, max_new=2, next_use=0):
    from sglc.wire.program_hint import ProgramHint

    return e.submit(tokens, {**GREEDY, "max_new_tokens": max_new}, hint=ProgramHint(program_id, next_use=next_use))


def _running(e) -> list[str]:
    return [r.rid for r in e._running]


def test_a_program_in_flight_goes_before_new_programs(oracle):
    e = engine(num_kv_slots=256, max_running_requests=1)
    e.wait(_hinted(e, PROMPTS[0], "A", max_new=8))
    b1 = _hinted(e, PROMPTS[1], "B", max_new=8)  # queued first, but B has not started
    a2 = _hinted(e, PROMPTS[0] + oracle[0][:3], "A", max_new=8)
    e.step()
    assert _running(e) == [a2]
    assert e.wait(b1).token_ids == oracle[1]
    e.wait(a2)


def test_new_programs_wait_while_the_families_footprints_fill_the_pool():
    """A family's ended run grew 64 tokens after its first call: a pool of 200 runs two such
    programs at once (2 x (26 + 64) <= 0.9 x 200); a third waits while they run, and starts once
    one has ended."""
    e = engine(num_kv_slots=200, max_running_requests=8)
    e.wait(_hinted(e, [50 + k for k in range(20)], "agent:warm", max_new=6))
    e.wait(_hinted(e, [50 + k for k in range(80)], "agent:warm", max_new=10))
    e.end_program("agent:warm")
    assert e.programs.family_growth("agent:x") == 64
    rids = {p: _hinted(e, [ord(p) + k for k in range(20)], f"agent:{p}", max_new=6) for p in "abc"}
    e.step()
    assert sorted(_running(e)) == sorted([rids["a"], rids["b"]])
    while e._running:
        assert rids["c"] not in _running(e)
        e.step()
    e.end_program("agent:a")
    e.wait(rids["c"])
    assert e.stats().num_programs == 2  # b and c have not ended
    e.tree.check_integrity()
    e.pool.check_integrity()


def test_an_idle_engine_starts_a_held_program_provisional_and_keeps_committed_texts():
    """Programs a and b wait (texts cached and hinted); c's first call would pass the memory
    rule but nothing runs: it starts provisional. When a's next call needs memory, c's text goes
    before b's; once a and b end, c is promoted."""
    e = engine(num_kv_slots=100, max_running_requests=8)
    e.wait(_hinted(e, [50 + k for k in range(10)], "agent:warm"))
    e.wait(_hinted(e, [50 + k for k in range(40)], "agent:warm", max_new=5))
    e.end_program("agent:warm")  # 12 tokens, then 33 more: two such runs fit 0.9 x 100, three do not
    e.tree.evict(e.tree.evictable_size())
    texts = {p: [ord(p) + k for k in range(10)] for p in "abc"}
    for rid in [_hinted(e, texts[p], f"agent:{p}") for p in "ab"]:
        e.wait(rid)
    c1 = _hinted(e, texts["c"], "agent:c")
    e.step()  # nothing else would run: c starts, provisional
    assert _running(e) == [c1] and e.programs.provisional_ids == {"agent:c"}
    e.wait(c1)
    assert e.stats().provisional_programs == 1
    e.wait(_hinted(e, texts["a"] + [5, 6] + [200 + k for k in range(70)], "agent:a"))  # 84 of 100 slots
    assert e.tree.peek_prefix_len(texts["c"]) == 0 and e.tree.peek_prefix_len(texts["b"]) == 10
    e.end_program("agent:a")
    e.end_program("agent:b")
    assert not e.step() and not e.programs.provisional_ids
    assert e.stats().promoted_programs == 1


def test_admission_by_program_never_changes_outputs(oracle):
    """Six programs of two calls each over a pool that holds about two of them at once."""
    e = engine(num_kv_slots=90, max_running_requests=4)
    firsts = [_hinted(e, p, f"prog:{i}", max_new=8) for i, p in enumerate(PROMPTS)]
    seconds = []
    for i, (rid, p) in enumerate(zip(firsts, PROMPTS)):
        assert e.wait(rid).token_ids == oracle[i]
        seconds.append(_hinted(e, p, f"prog:{i}", max_new=8, next_use=-1))
    assert [e.wait(r).token_ids for r in seconds] == oracle
    assert e.stats().num_programs == len(PROMPTS)
    for i in range(len(PROMPTS)):
        e.end_program(f"prog:{i}")
    assert e.stats().num_programs == 0


def test_a_trace_records_what_finished():
    e = engine()
    with pytest.raises(RuntimeError, match="no trace"):
        e.stop_trace()
    trace = e.start_trace()
    with pytest.raises(RuntimeError, match="already on"):
        e.start_trace()
    outs = e.generate(PROMPTS[:2], GREEDY)
    e.wait(e.submit(PROMPTS[0], GREEDY))
    assert e.stop_trace() is trace and not trace.active
    got = sorted((r.prompt_ids, r.output_ids) for r in trace.requests)
    want = sorted([(tuple(p), tuple(o.token_ids)) for p, o in zip(PROMPTS, outs)] + [(tuple(PROMPTS[0]), tuple(outs[0].token_ids))])
    assert got == want
    assert trace.cached_tokens == len(PROMPTS[0]) - 1  # NOTE: the repeat: all but its last prompt token


# --- `sglc serve --engine native` ------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    port = free_port()
    with ServeProcess("--engine", "native", "--model", str(DATA / f"{FIXTURE}.gguf"), "--dtype", "bfloat16",
                      "--kv-slots", "512", "--threads", "2", "--http-port", str(port)) as proc:
        proc.http = f"http://127.0.0.1:{port}"
        yield proc


def post(base: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_server_never_imports_torch(server):
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert "libtorch_cpu" in maps and "libtorch_python" not in maps


def test_the_server_answers_sglang_generate_with_the_engines_tokens(server, oracle):
    for prompt, want in zip(PROMPTS, oracle):
        status, body = post(server.http, "/generate", {"input_ids": prompt, "sampling_params": GREEDY})
        assert status == 200 and body["output_ids"] == want


def test_sglangs_client_and_ours_run_gen_and_select_alike(server):
    """SGLang's real frontend (HTTP /generate, its own select scoring from logprobs) and ours (gRPC
    Score) drive the native server to the same answers."""
    import sglang

    def make(m):
        @m.function
        def prog(s, question):
            s += "Q: " + question + "\nA:"
            s += m.gen("answer", max_tokens=6, temperature=0)
            s += "\nSo the answer is"
            s += m.select("pick", choices=[" yes", " no", " maybe"])
        return prog

    theirs = make(sglang).run(backend=sglang.RuntimeEndpoint(server.http), question="Is it blue?")
    ours_backend = sglc.RuntimeEndpoint(server.address)
    try:
        ours = make(sglc).run(backend=ours_backend, question="Is it blue?")
    finally:
        ours_backend.close()
    assert theirs["answer"] == ours["answer"]
    assert theirs["pick"] == ours["pick"] and theirs["pick"] in (" yes", " no", " maybe")


def test_the_server_answers_the_openai_client(server):
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="sk-test", max_retries=0, timeout=120)
    (model,) = [m.id for m in client.models.list().data]
    done = client.completions.create(model=model, prompt="Hello", max_tokens=6, temperature=0)
    parts = client.completions.create(model=model, prompt="Hello", max_tokens=6, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in parts) == done.choices[0].text
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                          temperature=0)
    assert chat.usage.completion_tokens == 5 and chat.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError, match="constraints"):
        client.completions.create(model=model, prompt="Hello", max_tokens=4, extra_body={"regex": "[ab]+"})


def test_an_engine_shut_down_is_freed_without_the_cycle_collector():
    """Nothing the engine owns points back at it (a reference cycle kept every engine's KV pool,
    gigabytes, alive until the cyclic GC ran: benchmarks that build an engine per run ran out of
    memory)."""
    import gc
    import weakref

    gc.disable()
    try:
        e = engine()
        e.start()
        e.wait(e.submit(PROMPTS[0], GREEDY))
        e.shutdown()
        ref = weakref.ref(e)
        del e
        assert ref() is None
    finally:
        gc.enable()
