"""Issue #31: every constraint compile (regex, json_schema, stop_regex) goes through the one compile
pool, and floods of distinct constraints keep the server's caches bounded.

A flood of concurrent distinct constraints that run into the compile budget is answered 400 (the
compile refused it, naming the pattern or the limit) or 429 (the pool's max_pending) for each kind,
while /health and a plain request still answer; the compiles ran in the pool (its counters) and
none in the server process (sglc.fsm's in-process regex cache saw no compile). Then the caches the
flood fills stay within their bounds after hundreds of distinct patterns.
"""
from __future__ import annotations

import json
import threading

import pytest

from grpc_helpers import runtime_fixture
from server_helpers import call, http_base, post_json

from sglc import fsm
from sglc_runtime.constrained import ConstraintCompilerConfig, ConstraintSpec, GrammarCache
from sglc_runtime.engine import Engine
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.server.launch import Runtime, ServeConfig

runtime = runtime_fixture(2048, http_port=0)

#: Needs 2^26 DFA states; with the structural limits raised below it compiles until the time limit.
SLOW = "(a|b)*a(a|b){25}"
FLOOD = 6


def over_budget(kind: str, i: int) -> dict:
    """The sampling fields of the i-th distinct over-budget constraint of ``kind``."""
    pattern = f"z{i}{SLOW}"
    if kind == "json_schema":
        return {"json_schema": json.dumps({"type": "string", "pattern": pattern})}
    return {kind: [pattern] if kind == "stop_regex" else pattern}


@pytest.fixture(scope="module")
def slow_server(runtime):
    """A server whose compile pool admits one compile at a time and lets (a|b)*a(a|b){25} run for
    its time limit, so a flood overlaps one running compile. Shares the module runtime's weights."""
    slow = ConstraintCompilerConfig(max_pending=1, budget=fsm.CompileBudget(
        max_dfa_states=10**8, max_dfa_cells=10**9, max_subset_states=10**10, max_compile_seconds=3.0))
    engine = Engine(EngineConfig(num_kv_slots=2048, constraint_compiler=slow), share_model_with=runtime.engine)
    rt = Runtime(ServeConfig(port=0, http_port=0), engine=engine)
    yield rt
    rt.stop(1.0)


@pytest.mark.model
@pytest.mark.parametrize("kind", ["regex", "json_schema", "stop_regex"])
def test_a_flood_of_over_budget_constraints_is_answered_by_the_compile_pool(slow_server, kind):
    """FLOOD distinct over-budget constraints at once: each is a 400 naming the limit (and, for
    stop_regex, the pattern) or a 429 naming max_pending, at least one of each; /health and a plain
    request answer meanwhile; the pool ran the compiles, the server process compiled nothing."""
    base = http_base(slow_server)
    grammars = slow_server.engine.grammars
    before = dict(getattr(grammars, "num_compiles", {}))
    in_process = fsm.compile_regex.cache_info()
    answers: list = [None] * FLOOD

    def ask(i: int) -> None:
        params = {"max_new_tokens": 2, "temperature": 0, **over_budget(kind, i + 100 * len(kind))}
        answers[i] = post_json(base, "/generate", {"text": "Say:", "sampling_params": params})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(FLOOD)]
    for t in threads:
        t.start()
    health = call(base, "GET", "/health")[0]
    plain = post_json(base, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
    for t in threads:
        t.join()
    assert health == 200 and plain[0] == 200, (health, plain)
    statuses = sorted(status for status, _ in answers)
    assert set(statuses) == {400, 429}, answers
    for status, answer in answers:
        message = json.dumps(answer)
        if status == 429:
            assert "ConstraintCompilerConfig.max_pending" in message
        else:
            assert "max_compile_seconds" in message
            if kind == "stop_regex":
                assert "stop_regex 'z" in message  # names the pattern
    assert fsm.compile_regex.cache_info() == in_process, "a pattern was compiled in the server process"
    assert grammars.worker_pids, "the compiles ran in a worker process"
    assert grammars.num_compiles.get(kind, 0) - before.get(kind, 0) == statuses.count(400)


@pytest.mark.model
def test_a_valid_stop_regex_is_compiled_once_in_the_pool_and_still_stops(runtime):
    """A stop_regex request ends at its match as before; its DFA came from the pool and is cached:
    a second request with the same pattern compiles nothing."""
    base = http_base(runtime)
    grammars = runtime.engine.grammars
    body = {"text": "Count: 1, 2, 3,", "sampling_params": {"max_new_tokens": 16, "temperature": 0,
                                                          "stop_regex": [r" [5-9],"]}}
    before = grammars.num_compiles.get("stop_regex", 0)
    first = post_json(base, "/generate", body)
    second = post_json(base, "/generate", body)
    assert first[0] == second[0] == 200 and first[1]["text"] == second[1]["text"]
    assert grammars.num_compiles.get("stop_regex", 0) == before + 1
    assert grammars.num_stop_regexes >= 1


class LetterTokenizer:
    """What vocabulary_for reads from a tokenizer: every byte a token; token 0 is EOS."""

    def __init__(self) -> None:
        self.all_token_bytes = [b"<eos>"] + [bytes([b]) for b in range(1, 256)]
        self.special_token_ids = [0]
        self.stop_token_ids = [0]


def test_caches_stay_within_their_bounds_under_hundreds_of_distinct_patterns():
    """300 distinct stop_regex, regex and refused patterns through one worker: the stop_regex DFAs
    never exceed stop_regex_cache_bytes, the grammars never exceed cache_bytes, the refusals stay
    at 256, and no pattern was compiled (or cached) in this process."""
    config = ConstraintCompilerConfig(cache_bytes=256 * 2**10, stop_regex_cache_bytes=32 * 2**10,
                                      budget=fsm.CompileBudget(max_dfa_states=40))
    cache = GrammarCache(LetterTokenizer(), config=config)
    in_process = fsm.compile_regex.cache_info()
    try:
        for i in range(300):
            cache.get_stop_regex(f"q{i}[0-9]+;")
            assert cache.stop_regex_nbytes <= config.stop_regex_cache_bytes
            cache.get(ConstraintSpec.of(regex=f"r{i}[a-c]{{1,3}}"))
            assert cache.nbytes <= config.cache_bytes
            with pytest.raises(fsm.CompileBudgetError, match="max_dfa_states"):
                cache.get_stop_regex(f"x{i}a.{{40}}")
        assert 1 < cache.num_stop_regexes < 300 and 1 < len(cache) < 300
        assert cache.num_refusals == 256
        # the remembered errors hold no traceback (its frames would keep each refused request alive)
        assert all(err.__traceback__ is None for err in cache._refusals.values())
        assert cache.num_compiles == {"stop_regex": 600, "regex": 300}
    finally:
        cache.close()
    assert fsm.compile_regex.cache_info() == in_process
