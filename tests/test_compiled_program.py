"""CompiledProgram (compile / save / sgl.load / run / run_batch), compiled-vs-eager equivalence on
the real engine with greedy sampling, and fork hints measured by the runtime's prefill counter."""
from __future__ import annotations

import threading
import time

import pytest
from test_executor_support import EQUIVALENCE_CASES, ScriptedBackend, regex_gen

import sglc as sgl
from sglc.executor.compiled import CompiledProgram
from sglc.executor.program import ProgramError
from sglc.passes.fork_hints import fork_hints
from sglc.passes.merge_constants import merge_constants
from sglc.passes.prefix_hoisting import prefix_hoisting
from sglc_runtime.server.engine_backend import EngineBackend


@sgl.function
def qa(s, q):
    s += sgl.user(q)
    s += sgl.assistant(sgl.gen("a", max_tokens=3))


def test_compile_save_load_round_trip_runs_the_same(tmp_path):
    """prog.compile().save(p); sgl.load(p) gives an equal graph and an equal run result."""
    prog = qa.compile()
    assert isinstance(prog, CompiledProgram) and prog.arg_names == ["q"]
    path = tmp_path / "qa.pb"
    prog.save(path)
    loaded = sgl.load(path)
    assert loaded.graph == prog.graph
    backend = ScriptedBackend()
    first = prog.run(q="Hello?", backend=backend)
    again = loaded.run("Hello?", backend=backend)
    assert first.result.variables == again.result.variables and first.text() == again.text()


def test_compile_with_explicit_passes_replaces_the_default_pipeline():
    """passes=[] keeps the traced graph as it is (no hints); the default adds CACHE_PREFIX."""
    bare = qa.compile(passes=[])
    assert bare.graph == qa.trace()
    assert any(n.op.value == "cache_prefix" for n in qa.compile().graph.nodes)


def test_compiled_run_raises_with_the_partial_result_and_run_batch_does_not():
    """run() raises ProgramError (holding what ran); run_batch() reports failures per state."""
    def hook(kind, prompt):
        if "fail" in prompt.text:
            raise RuntimeError("nope")

    prog = qa.compile()
    backend = ScriptedBackend(on_call=hook)
    with pytest.raises(ProgramError, match=r"while executing %a \(gen\)") as info:
        prog.run(q="please fail", backend=backend)
    assert info.value.result.arguments == {"q": "please fail"}
    states = prog.run_batch([{"q": "ok"}, {"q": "fail"}], backend=backend)
    assert states[0].error() is None and "nope" in states[1].error()


# ----- on the real model -----

@pytest.fixture(scope="module")
def engine_backend():
    backend = EngineBackend()
    yield backend
    backend.close()


@pytest.mark.model
@pytest.mark.parametrize("prog,arguments", EQUIVALENCE_CASES + [(regex_gen, {"name": "Ada Lovelace"})],
                         ids=[p.name for p, _ in EQUIVALENCE_CASES] + ["regex_gen"])
def test_compiled_and_eager_give_identical_variables_with_greedy_sampling(engine_backend, prog, arguments):
    """Greedy (temperature=0): the graph executor and the eager interpreter produce the same variables."""
    eager = prog.run(backend=engine_backend, temperature=0, **arguments)
    compiled = prog.compile().run(backend=engine_backend, temperature=0, **arguments)
    assert compiled.result.variables == eager.result.variables
    assert compiled.text() == eager.text()
    if prog is regex_gen:
        import re

        assert re.fullmatch(r"[1-9][0-9]?", eager["age"]) and re.fullmatch(r"[A-Z][a-z]+", eager["city"])


DOCUMENT = ("The Amundsen expedition reached the South Pole on 14 December 1911, five weeks before "
            "Scott's party. Amundsen used sled dogs and skis, planned depots carefully, and returned "
            "safely to his base at the Bay of Whales in late January 1912.")


@sgl.function
def three_questions(s, document):
    s += "Read the document, then answer in a few words.\nDocument: " + document + "\n"
    forks = s.fork(3)
    for f, question in zip(forks, ["Who reached the pole first?", "When did they arrive?", "How did they travel?"]):
        f += "Question: " + question + "\nAnswer:" + sgl.gen("answer", max_tokens=3, temperature=0)
    forks.join()


def _prefill_tokens(engine_backend, hints: bool) -> tuple[int, int, list]:
    """(computed prefill tokens, shared-prefix tokens hinted, answers) on a fresh engine.

    NOTE: the engine (same weights) is fresh (empty cache) and uses FCFS, which does not dedup a
    shared prefix inside one batch, so the measurement isolates the hint. The engine starts only
    once the program's first wave of requests is queued (3 children without hints, the one hint
    with), so the children arrive together as in a loaded server.
    """
    from sglc_runtime.engine import Engine

    passes = [merge_constants, prefix_hoisting] + ([fork_hints] if hints else [])
    program = three_questions.compile(passes=passes)
    engine = Engine(share_model_with=engine_backend.engine, schedule_policy="fcfs")
    backend = EngineBackend(engine, start=False)
    box: dict = {}
    runner = threading.Thread(target=lambda: box.update(state=program.run(backend=backend, document=DOCUMENT)))
    runner.start()
    first_wave = 1 if hints else 3
    deadline = time.monotonic() + 120
    while engine.stats().num_waiting < first_wave and time.monotonic() < deadline:
        time.sleep(0.01)
    backend.start()
    runner.join(300)
    engine.shutdown()
    state = box["state"]
    hinted = [c.prompt_tokens for c in state.result.calls if c.op == "cache_prefix"]
    return engine.stats().computed_prefill_tokens, (hinted[0] if hinted else 0), state["answer"]


@pytest.mark.model
def test_fork_hint_computes_the_shared_prefix_once(engine_backend):
    """A 3-way fork: with hints the prefix is prefilled once, so ~2x its length fewer prefill tokens."""
    without, _, answers_without = _prefill_tokens(engine_backend, hints=False)
    with_hints, prefix, answers_with = _prefill_tokens(engine_backend, hints=True)
    saved = without - with_hints
    print(f"\nprefill tokens computed: without hints {without}, with hints {with_hints}; "
          f"shared prefix {prefix} tokens; saved {saved} (2 x prefix = {2 * prefix})")
    assert prefix > 40
    assert abs(saved - 2 * prefix) <= max(6, 0.1 * 2 * prefix)
    assert answers_with == answers_without
