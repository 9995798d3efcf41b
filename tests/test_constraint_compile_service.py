"""The runtime's constraint compile service: GrammarCache (in-flight sharing, max_pending, byte
bound, remembered refusals) and CompilePool (worker processes, hard deadline, memory cap).

No model: a small byte-level vocabulary stands in for the tokenizer (the FSM library only
needs token bytes and EOS ids); the real-model path is covered in test_constraint_budget_server.py.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from sglc import fsm
from sglc.fsm import CompileBudget, CompileBudgetError
from sglc_runtime.constrained import (
    CompiledGrammar,
    ConstraintCompilerBusy,
    ConstraintCompilerConfig,
    ConstraintSpec,
    GrammarCache,
)
from sglc_runtime.constrained import grammar_cache as grammar_module


class ByteTokenizer:
    """What vocabulary_for reads from a tokenizer: every byte a token, plus pairs over a-f, and
    [a-z]{3} (17,576 three-letter tokens, so an index can be made big); token 0 is EOS."""

    def __init__(self, with_triples: bool = False) -> None:
        letters = b"abcdefghijklmnopqrstuvwxyz"
        tokens = [b"<eos>"] + [bytes([b]) for b in range(1, 256)] + [bytes([a, b]) for a in b"abcdef" for b in b"abcdef"]
        if with_triples:
            tokens += [bytes([a, b, c]) for a in letters for b in letters for c in letters]
        self.all_token_bytes = tokens
        self.special_token_ids = [0]
        self.stop_token_ids = [0]


def inline(**kwargs) -> ConstraintCompilerConfig:
    return ConstraintCompilerConfig(num_workers=0, **kwargs)


def regex(pattern: str) -> ConstraintSpec:
    return ConstraintSpec.of(regex=pattern)


class BlockingCompile:
    """Stands in for compile_constraint: counts calls and holds each until ``release()``."""

    def __init__(self) -> None:
        self.calls = 0
        self.released = threading.Event()
        self._real = grammar_module.compile_constraint

    def __call__(self, spec, vocab, meter):
        self.calls += 1
        assert self.released.wait(30), "the test never released the compile"
        return self._real(spec, vocab, meter)

    def release(self) -> None:
        self.released.set()


def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def is_dead(pid: int) -> bool:
    """The process exited (a zombie until its parent reaps it, or gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def run_threads(fn, n: int) -> tuple[list[threading.Thread], list]:
    results: list = []

    def target() -> None:
        try:
            results.append(fn())
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            results.append(err)

    threads = [threading.Thread(target=target) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, results


# --- GrammarCache -------------------------------------------------------------------------

def test_identical_constraints_arriving_together_compile_once(monkeypatch):
    """Eight requests for one constraint while its compile runs: one compile, one shared grammar."""
    blocking = BlockingCompile()
    monkeypatch.setattr(grammar_module, "compile_constraint", blocking)
    cache = GrammarCache(ByteTokenizer(), config=inline())
    threads, results = run_threads(lambda: cache.get(regex("(ab|cd)+e")), 8)
    wait_until(lambda: cache.num_shared == 7)  # seven wait on the first one's compile
    blocking.release()
    for t in threads:
        t.join()
    assert blocking.calls == 1 and cache.num_misses == 1
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert isinstance(results[0], CompiledGrammar) and cache.num_pending == 0


def test_a_failed_compile_is_reported_to_every_request_waiting_on_it(monkeypatch):
    """Waiters on a compile that fails get its error too (and nothing stays pending)."""
    blocking = BlockingCompile()
    monkeypatch.setattr(grammar_module, "compile_constraint", blocking)
    cache = GrammarCache(ByteTokenizer(), config=inline(budget=CompileBudget(max_dfa_states=5)))
    threads, results = run_threads(lambda: cache.get(regex("[a-c]{10}")), 3)
    wait_until(lambda: cache.num_shared == 2)
    blocking.release()
    for t in threads:
        t.join()
    assert [type(r) for r in results] == [CompileBudgetError] * 3
    assert cache.num_pending == 0 and blocking.calls == 1


def test_distinct_compiles_past_max_pending_are_refused_at_once(monkeypatch):
    """With max_pending compiles in flight, one more distinct constraint is refused at once
    (ConstraintCompilerBusy naming the limit); identical ones still share; later ones compile."""
    blocking = BlockingCompile()
    monkeypatch.setattr(grammar_module, "compile_constraint", blocking)
    cache = GrammarCache(ByteTokenizer(), config=inline(max_pending=2))
    threads, results = run_threads(lambda: cache.get(regex("a+")), 1)
    more, more_results = run_threads(lambda: cache.get(regex("b+")), 1)
    wait_until(lambda: cache.num_pending == 2)
    started = time.monotonic()
    with pytest.raises(ConstraintCompilerBusy, match=r"too many constraint compilations in flight \(2, "
                                                     r"ConstraintCompilerConfig.max_pending\)"):
        cache.get(regex("c+"))
    assert time.monotonic() - started < 5.0 and cache.num_busy == 1
    shared, shared_results = run_threads(lambda: cache.get(regex("a+")), 1)
    wait_until(lambda: cache.num_shared == 1)
    blocking.release()
    for t in threads + more + shared:
        t.join()
    assert all(isinstance(r, CompiledGrammar) for r in results + more_results + shared_results)
    assert isinstance(cache.get(regex("c+")), CompiledGrammar)


def test_grammar_cache_is_bounded_by_bytes_including_cached_masks():
    """Cached grammars (index arrays, tables, masks) stay within cache_bytes; the oldest go first."""
    tokenizer = ByteTokenizer()
    probe = GrammarCache(tokenizer, config=inline()).get(regex("[a-f]{0,8}"))
    before = probe.nbytes
    probe.mask(0)
    assert probe.nbytes == before + probe.vocab_size  # a cached bool mask per state
    limit = 3 * before
    cache = GrammarCache(tokenizer, config=inline(cache_bytes=limit))
    patterns = [f"[a-f]{{0,8}}{c}" for c in "ghijklmn"]
    for p in patterns:
        cache.get(regex(p))
        assert cache.nbytes <= limit
    assert 1 <= len(cache) < len(patterns)
    misses = cache.num_misses
    cache.get(regex(patterns[-1]))  # the newest is still cached ...
    assert cache.num_misses == misses
    cache.get(regex(patterns[0]))  # ... the oldest was evicted and compiles again
    assert cache.num_misses == misses + 1


def test_refused_constraints_are_remembered_but_time_outs_are_not(monkeypatch):
    """A constraint refused for what it is (invalid, over a structural limit) is refused again
    without compiling; a time-limit refusal depends on the moment, so it is retried."""
    calls = []
    real = grammar_module.compile_constraint

    def counting(spec, vocab, meter):
        calls.append(spec.text)
        return real(spec, vocab, meter)

    monkeypatch.setattr(grammar_module, "compile_constraint", counting)
    cache = GrammarCache(ByteTokenizer(), config=inline(budget=CompileBudget(max_dfa_states=5)))
    for _ in range(3):
        with pytest.raises(CompileBudgetError, match="max_dfa_states"):
            cache.get(regex("[a-c]{10}"))
        with pytest.raises(fsm.InvalidRegexError, match="missing \\)"):
            cache.get(regex("(ab"))
    assert calls == ["[a-c]{10}", "(ab"]
    slow = GrammarCache(ByteTokenizer(), config=inline(budget=CompileBudget(max_compile_seconds=1e-9)))
    for _ in range(2):
        with pytest.raises(CompileBudgetError, match="max_compile_seconds"):
            slow.get(regex("(ab|cd)+"))
    assert calls.count("(ab|cd)+") == 2


# --- CompilePool (worker processes) -------------------------------------------------------

@pytest.fixture(scope="module")
def pooled():
    cache = GrammarCache(ByteTokenizer(), config=ConstraintCompilerConfig(num_workers=1, kill_grace_seconds=0.5))
    yield cache
    cache.close()


def test_compiles_run_in_a_worker_process_and_equal_inline_ones(pooled):
    """The pool's grammar comes from another process and has the inline compile's index."""
    grammar = pooled.get(regex("(ab|c)+[d-f]?"))
    assert pooled.worker_pids and os.getpid() not in pooled.worker_pids
    local = GrammarCache(ByteTokenizer(), config=inline()).get(regex("(ab|c)+[d-f]?"))
    assert grammar.fsm == local.fsm
    assert {s: (i.tolist(), n.tolist()) for s, (i, n) in grammar.index.states().items()} == \
           {s: (i.tolist(), n.tolist()) for s, (i, n) in local.index.states().items()}


def test_errors_keep_their_type_and_fields_across_the_worker(pooled):
    """An invalid regex compiled in a worker raises InvalidRegexError with its position."""
    with pytest.raises(fsm.InvalidRegexError) as info:
        pooled.get(regex("ab[c"))
    assert info.value.position == 2 and info.value.pattern == "ab[c"


def test_the_worker_imports_no_torch(pooled):
    """The worker process maps no libtorch (it starts fast and its memory cap covers compiles only)."""
    pooled.get(regex("x+"))
    pid = pooled.worker_pids[0]
    with open(f"/proc/{pid}/maps") as maps:
        assert "libtorch" not in maps.read()


def test_a_frozen_worker_is_killed_at_the_hard_deadline_and_replaced():
    """A worker that stops answering is killed at max_compile_seconds + grace: the request gets
    a CompileBudgetError naming max_compile_seconds, the next compile a fresh worker."""
    cache = GrammarCache(ByteTokenizer(), config=ConstraintCompilerConfig(
        num_workers=1, kill_grace_seconds=0.5, budget=CompileBudget(max_compile_seconds=0.5)))
    try:
        cache.get(regex("y+"))
        (pid,) = cache.worker_pids
        os.kill(pid, signal.SIGSTOP)  # NOTE: a worker stuck where no deadline check runs
        started = time.monotonic()
        with pytest.raises(CompileBudgetError) as info:
            cache.get(regex("z+"))
        assert info.value.limit == "max_compile_seconds" and "worker process was killed" in str(info.value)
        assert time.monotonic() - started < 10.0
        assert isinstance(cache.get(regex("z+")), CompiledGrammar)  # a time-out is not remembered
        assert cache.worker_pids and cache.worker_pids[0] != pid
    finally:
        cache.close()


def test_a_worker_that_died_is_replaced_on_the_next_compile(pooled):
    """Killing an idle worker costs the next compile a restart, nothing more."""
    pooled.get(regex("v+"))
    (pid,) = pooled.worker_pids
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: is_dead(pid))  # NOTE: between jobs, as a crash or the OOM killer would leave it
    assert isinstance(pooled.get(regex("u+")), CompiledGrammar)
    assert pooled.worker_pids[0] != pid


def test_a_compile_over_the_worker_memory_limit_fails_cleanly():
    """An index larger than the worker's address space (budget raised out of the way) ends in a
    CompileBudgetError naming ConstraintCompilerConfig.worker_memory_bytes; the pool goes on."""
    generous = CompileBudget(max_byte_states=10**6, max_index_cells=10**12, max_index_transitions=10**12,
                             max_compile_seconds=120)
    cache = GrammarCache(ByteTokenizer(with_triples=True), config=ConstraintCompilerConfig(
        num_workers=1, worker_memory_bytes=256 * 2**20, budget=generous))
    try:
        with pytest.raises(CompileBudgetError) as info:
            cache.get(regex(r"[a-z]{0,4000}"))  # 4,001 states x 17,868 tokens: ~0.6 GB of index
        assert info.value.limit == "worker_memory_bytes"
        assert "ConstraintCompilerConfig.worker_memory_bytes = " in str(info.value)
        assert isinstance(cache.get(regex("t+")), CompiledGrammar)
    finally:
        cache.close()
