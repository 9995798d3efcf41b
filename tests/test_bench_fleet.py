"""bench/bench_fleet.py's workload: groups share one context each, are interleaved, and the program
compiles to a verified graph (no model, no router needed)."""
from __future__ import annotations

from bench.bench_fleet import compiled_graph, workload
from sglc.ir.verify import verify


def test_workload_interleaves_groups_that_share_a_context():
    """Input k belongs to group k % G; inputs of a group share their context, groups differ."""
    inputs = workload(groups=3, per_group=4, context_words=50)
    assert len(inputs) == 12
    contexts = [inputs[k]["context"] for k in range(3)]
    assert len(set(contexts)) == 3
    for k, item in enumerate(inputs):
        assert item["context"] == contexts[k % 3]
    assert len({item["question"] for item in inputs}) == 12
    assert workload(3, 4, 50) == inputs  # seeded: the same workload every run


def test_the_bench_program_compiles():
    """The RAG-like program traces and passes verify (two gens after the shared context)."""
    graph = compiled_graph()
    verify(graph)
    assert "gen" in str(graph)
