"""The evaluation workloads (bench/suite/workloads): registry, shapes, determinism, prompt sizes, a tiny run."""
from __future__ import annotations

import re
import time
from typing import Any

import pytest

from bench.suite.workload import LATENCY_COUNT, SIZES, Workload, make_instance
from bench.suite.workloads import WORKLOADS, get_workload
from bench.suite.workloads import json_decode, multi_turn_long, multi_turn_short
from sglc.ir.graph import Graph
from sglc.ir.ops import Op
from sglc.ir.verify import verify

EVAL_SPEC_ORDER = [
    "mmlu_5shot", "hellaswag_20shot", "react_agent", "generative_agents", "tree_of_thought", "skeleton_of_thought",
    "llm_judge", "json_decode", "multi_turn_short", "multi_turn_long", "rag_shared_context",
]
SAMPLING = {"temperature": 0.0, "ignore_eos": True}
MAX_PROMPT_TOKENS = 2048

_graphs: dict[tuple[str, str], tuple[Any, Graph]] = {}


def built(name: str, size: str, seed: int = 0) -> tuple[Any, Graph]:
    """(instance, compiled graph) of one workload, cached per (name, size) for seed 0."""
    if seed != 0:
        instance = WORKLOADS[name].build(size, seed)
        return instance, instance.program.compile().graph
    if (name, size) not in _graphs:
        instance = WORKLOADS[name].build(size, 0)
        _graphs[name, size] = (instance, instance.program.compile().graph)
    return _graphs[name, size]


def ops_of(graph: Graph, op: Op) -> list[Any]:
    return [n for n in graph.nodes if n.op is op]


def constrained_gens(graph: Graph) -> list[Any]:
    return [n for n in ops_of(graph, Op.GEN) if any(n.attrs.get(k) for k in ("regex", "json_schema", "dtype"))]


ALL = [(name, size) for name in EVAL_SPEC_ORDER for size in SIZES]


def test_registry_names_and_order_match_eval_spec():
    """WORKLOADS lists exactly the EVAL_SPEC workloads, in report order, keyed by their own names."""
    assert list(WORKLOADS) == EVAL_SPEC_ORDER
    for name, workload in WORKLOADS.items():
        assert isinstance(workload, Workload) and workload.name == name
        assert workload.title and workload.shape and "\n" not in workload.shape


def test_get_workload_unknown_name_names_the_known_ones():
    """get_workload returns the registered workload and raises a KeyError listing the names otherwise."""
    assert get_workload("json_decode") is WORKLOADS["json_decode"]
    with pytest.raises(KeyError, match="mmlu_5shot"):
        get_workload("mmlu")


def test_unknown_size_is_rejected():
    """Building with a size outside SIZES raises a ValueError naming the sizes."""
    with pytest.raises(ValueError, match="quick"):
        WORKLOADS["mmlu_5shot"].build("huge", 0)


def test_make_instance_rejects_warmup_among_inputs():
    """A warm-up input that is also timed would pre-warm the batch: refused."""
    with pytest.raises(ValueError, match="warm-up"):
        make_instance(object(), "quick", {"q": "a"}, [{"q": "a"}, {"q": "b"}])


@pytest.mark.parametrize("name,size", ALL)
def test_workload_builds_a_verified_graph_with_matching_inputs(name, size):
    """Every size builds; the graph verifies; every input binds exactly the program's arguments;
    the warm-up is not timed; latency inputs are the first 2 (tiny/quick) or 3 (full) inputs."""
    instance, graph = built(name, size)
    verify(graph)
    args = set(graph.meta["arg_names"])
    assert ops_of(graph, Op.GEN) or ops_of(graph, Op.SELECT)
    for item in [instance.warmup] + instance.inputs:
        assert set(item) == args and all(isinstance(v, str) and v for v in item.values())
    assert instance.warmup not in instance.inputs
    assert len(instance.inputs) == len({repr(sorted(x.items())) for x in instance.inputs}), "duplicate inputs"
    assert instance.latency_inputs == instance.inputs[: LATENCY_COUNT[size]]
    assert len(instance.latency_inputs) == (3 if size == "full" else 2)
    if size == "tiny":
        assert len(instance.inputs) == 2


@pytest.mark.parametrize("name", EVAL_SPEC_ORDER)
def test_flags_agree_with_the_compiled_graph(name):
    """has_forks <=> the graph forks (beyond hoisting); has_constraints <=> a regex/json/dtype gen."""
    workload = WORKLOADS[name]
    for size in SIZES:
        _, graph = built(name, size)
        forks = [n for n in ops_of(graph, Op.FORK) if not n.attrs.get("hoisted")]
        assert bool(forks) == workload.has_forks, size
        if workload.has_forks:
            assert len(ops_of(graph, Op.JOIN)) >= len(forks), size
        assert bool(constrained_gens(graph)) == workload.has_constraints, size


@pytest.mark.parametrize("name", EVAL_SPEC_ORDER)
def test_inputs_are_deterministic_per_seed_and_differ_between_seeds(name):
    """build(size, seed) is a pure function of its arguments; another seed gives other data."""
    for size in ("tiny", "quick"):
        a, b, c = (WORKLOADS[name].build(size, s) for s in (7, 7, 8))
        assert a.inputs == b.inputs and a.warmup == b.warmup
        assert str(a.program.trace()) == str(b.program.trace())
        assert a.inputs != c.inputs


def _select_choices(graph: Graph) -> list[list[str]]:
    return [list(n.attrs["choices"]) for n in ops_of(graph, Op.SELECT)]


def test_op_mix_matches_the_paper_shapes():
    """Each workload has the calls of its paper shape (selects, step gens, forks, constraints)."""
    _, g = built("mmlu_5shot", "quick")
    assert _select_choices(g) == [["A", "B", "C", "D"]] and not ops_of(g, Op.GEN)
    _, g = built("hellaswag_20shot", "quick")
    (choices,) = _select_choices(g)
    assert len(choices) == 4 and all(len(c.split()) >= 5 for c in choices), "endings are sentences"
    assert sum(n.attrs["text"].count("Passage:") for n in ops_of(g, Op.CONSTANT_TEXT)) == 21  # 20 shots + question
    _, g = built("react_agent", "quick")
    gens = ops_of(g, Op.GEN)
    assert len(gens) == 3 and all(n.attrs["stop"] == ["Observation"] for n in gens)
    _, g = built("generative_agents", "quick")
    assert [n.attrs["name"] for n in ops_of(g, Op.GEN)] == ["reaction", "plan", "dialogue"]
    _, g = built("tree_of_thought", "quick")
    assert len(ops_of(g, Op.SELECT)) == 6 and len(ops_of(g, Op.GEN)) == 3 + 6 + 1
    _, g = built("skeleton_of_thought", "quick")
    assert [n.attrs["n"] for n in ops_of(g, Op.FORK) if not n.attrs.get("hoisted")] == [3]
    assert len(ops_of(g, Op.GEN)) == 1 + 3 + 1
    _, g = built("llm_judge", "quick")
    assert len(ops_of(g, Op.GEN)) == 3 + 1 and _select_choices(g) == [["1", "2", "3", "4", "5"]]
    _, g = built("json_decode", "quick")
    (gen,) = ops_of(g, Op.GEN)
    assert gen.attrs["regex"] and gen.attrs.get("fsm") is not None, "regex lowered to an FSM at compile time"
    for name in ("multi_turn_short", "multi_turn_long", "rag_shared_context"):
        _, g = built(name, "quick")
        assert not ops_of(g, Op.SELECT) and not ops_of(g, Op.FORK)
    _, g = built("rag_shared_context", "quick")
    assert len(ops_of(g, Op.GEN)) == 1


@pytest.mark.parametrize("module,size", [(m, s) for m in (multi_turn_short, multi_turn_long) for s in SIZES])
def test_chat_turn_lengths_stay_in_the_sizes_range(module, size):
    """Each of the 4 assistant turns generates within the size's (min, max) token range."""
    _, graph = built(module.NAME, size)
    low, high = module.SIZE[size][1]
    lengths = [n.attrs["max_new_tokens"] for n in ops_of(graph, Op.GEN)]
    assert len(lengths) == 4 and all(low <= x <= high for x in lengths)


def test_tiny_gens_are_short():
    """Tiny is a smoke test: unconstrained gens are 2-4 tokens at most."""
    for name in EVAL_SPEC_ORDER:
        _, graph = built(name, "tiny")
        for gen in ops_of(graph, Op.GEN):
            if gen not in constrained_gens(graph):
                assert gen.attrs["max_new_tokens"] <= 4, (name, gen.attrs["name"])


@pytest.mark.parametrize("size", SIZES)
def test_json_examples_and_regex_agree(size):
    """The solved examples in the prefix match the record regex (Python re as the oracle)."""
    instance, graph = built("json_decode", size)
    (gen,) = ops_of(graph, Op.GEN)
    pattern = re.compile(gen.attrs["regex"])
    prefix = "".join(n.attrs["text"] for n in ops_of(graph, Op.CONSTANT_TEXT))
    examples = re.findall(r"JSON: (\{.*?\n\})", prefix, re.S)
    assert len(examples) == json_decode.SIZE[size][2]
    assert all(pattern.fullmatch(e) for e in examples), examples


def prompt_token_bound(graph: Graph, item: dict[str, str], count) -> int:
    """An upper bound on any prompt of the program: every node's text once (a prompt never holds
    one node's text twice), arguments and variable reads at their size, each gen at max_new_tokens."""
    total = 0
    for node in graph.nodes:
        if node.op is Op.CONSTANT_TEXT:
            total += count(node.attrs["text"])
        elif node.op in (Op.ROLE_BEGIN, Op.ROLE_END):
            total += 6  # chat-template markers
        elif node.op is Op.GEN:
            total += node.attrs["max_new_tokens"]
        elif node.op is Op.SELECT:
            total += max(count(c) for c in node.attrs["choices"])
        elif node.op is Op.APPEND:
            (source,) = node.inputs
            if source.op is Op.ARGUMENT:
                total += count(item[source.attrs["name"]])
            else:  # a variable read of a gen's result
                gen = source.inputs[0] if source.op is Op.VARIABLE else source
                total += gen.attrs.get("max_new_tokens") or 16
    return total


@pytest.fixture(scope="module")
def token_count():
    """Token counts with the default model's tokenizer (no model weights are loaded)."""
    from sglc_runtime.model.default_model import resolve_model_path
    from sglc_runtime.model.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_pretrained(resolve_model_path("default"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("name", EVAL_SPEC_ORDER)
def test_quick_prompts_stay_under_2048_tokens(name, token_count):
    """Every prompt of the quick size (bounded from the graph) fits in 2048 tokens."""
    instance, graph = built(name, "quick")
    worst = max(prompt_token_bound(graph, item, token_count) for item in [instance.warmup] + instance.inputs)
    assert worst < MAX_PROMPT_TOKENS, worst


def root_variables(graph: Graph) -> set[str]:
    """Variables a program result holds: the root stream's gens/selects and gathered fork variables."""
    names = {n.attrs["name"] for n in graph.nodes if n.op in (Op.GEN, Op.SELECT) and n.stream == 0}
    for join in ops_of(graph, Op.JOIN):
        if join.attrs["mode"] == "gather_variable":
            names |= set(join.attrs["variables"])
    return names


@pytest.mark.model
def test_tiny_size_of_every_workload_runs_on_the_embedded_engine():
    """Every tiny program finishes without error on the real engine with all its variables set."""
    from sglc_runtime.server.engine_backend import EngineBackend
    from sglc.executor.batch import run_graph_batch

    backend = EngineBackend(dtype="float32")
    try:
        for name in EVAL_SPEC_ORDER:
            instance, graph = built(name, "tiny")
            start = time.perf_counter()
            results = run_graph_batch(graph, backend, instance.inputs, concurrency=len(instance.inputs),
                                      sampling=SAMPLING)
            print(f"{name}: {time.perf_counter() - start:.2f}s")
            calls = {n.name for n in graph.nodes if n.op in (Op.GEN, Op.SELECT)}
            root = root_variables(graph)
            for result in results:
                assert result.error is None, (name, result.error)
                assert {c.node for c in result.calls if c.op in ("gen", "select")} == calls, (name, "every call ran")
                assert root <= set(result.variables), (name, sorted(result.variables))
                for variable in root:
                    assert result.variables[variable] not in (None, []), (name, variable)
            if name == "json_decode":
                (gen,) = ops_of(graph, Op.GEN)
                assert all(re.fullmatch(gen.attrs["regex"], r.variables["record"]) for r in results)
    finally:
        backend.close()
