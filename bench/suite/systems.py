"""The systems the evaluation compares (issue #7): sglc all on, one feature off at a time, HF per call.

A :class:`System` says how to compile a workload's program (which passes) and how to run it
(which engine settings, how many fork branches at once, or the Hugging Face baseline). A
feature-off system is "n/a" on a workload where that feature cannot change anything:
:meth:`System.applies_to` says so, with the reason the report prints.

What each feature-off system turns off:

- ``no-cache``: the engine's radix cache (no prefix reuse between requests at all).
- ``no-cache-aware-order``: longest-prefix-match scheduling; first-come-first-served instead.
- ``no-fork-hints``: the CACHE_PREFIX hints the fork_hints pass puts before each FORK. NOTE: the
  pass also adds one batch-scoped hint (the constant prefix every input shares, sent once before
  a batch); that one is kept, so on a workload without forks this system would run exactly the
  same requests as ``sglc`` (hence n/a there).
- ``no-parallelism``: intra-program parallelism; a program's fork branches run one after
  another (max_parallel=1). Inputs still run concurrently.
- ``no-jump-forward``: the engine's jump-forward over constrained text (``EngineConfig.
  disable_jump_forward``); constrained masking stays on, so outputs are unchanged.
- ``hf-per-call``: Hugging Face transformers, one model call per LM call, one call at a time,
  no KV reuse between calls (bench.suite.hf_backend.HFPerCallBackend).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

ENGINE = "engine"
HF = "hf"


@dataclass(frozen=True)
class System:
    """One configuration under test.

    - kind: ``"engine"`` (our embedded runtime) or ``"hf"`` (the transformers baseline).
    - engine_options: EngineConfig overrides for a fresh engine sharing the base weights.
    - fork_hints: keep the fork-scoped CACHE_PREFIX hints in the compiled graph.
    - max_parallel: fork branches of one program running at once.
    - measures_latency: also time programs alone (the report compares sglc with HF, and with
      no-jump-forward; the other feature-off variants skip it to keep the quick report short).
    - needs: the workload flag (``"has_forks"`` / ``"has_constraints"``) without which the
      turned-off feature cannot change anything; None = applies to every workload.
    """

    name: str
    title: str
    description: str
    kind: str = ENGINE
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    fork_hints: bool = True
    max_parallel: int = 16
    needs: str | None = None
    na_reason: str = ""
    measures_latency: bool = False

    @property
    def is_ablation(self) -> bool:
        """A feature-off variant of sglc (not sglc itself, not the HF baseline)."""
        return self.kind == ENGINE and self.name != "sglc"

    def applies_to(self, workload: Any) -> tuple[bool, str]:
        """(True, "") when this system is run on `workload`; else (False, why it is n/a)."""
        if self.needs is None:
            return True, ""
        if not hasattr(workload, self.needs):
            raise AttributeError(f"workload {getattr(workload, 'name', workload)!r} has no flag {self.needs!r} "
                                 f"(needed to decide whether system {self.name!r} applies)")
        if getattr(workload, self.needs):
            return True, ""
        return False, self.na_reason


SYSTEMS: dict[str, System] = {s.name: s for s in (
    System("sglc", "sglc", "everything on: radix cache, cache-aware (lpm) order, fork hints, "
           "intra-program parallelism, jump-forward", measures_latency=True),
    System("no-cache", "no cache", "the radix cache disabled: no prefix reuse between requests",
           engine_options={"disable_radix_cache": True}),
    System("no-cache-aware-order", "no cache-aware order", "first-come-first-served scheduling instead of "
           "longest-prefix-match", engine_options={"schedule_policy": "fcfs"}),
    System("no-fork-hints", "no fork hints", "no CACHE_PREFIX hint before forks (the batch prefix hint stays)",
           fork_hints=False, needs="has_forks", na_reason="no forks"),
    System("no-parallelism", "no parallelism", "a program's fork branches run one after another "
           "(max_parallel=1)", max_parallel=1, needs="has_forks", na_reason="no forks"),
    System("no-jump-forward", "no jump-forward", "constrained decoding token by token (no jump-forward)",
           engine_options={"disable_jump_forward": True}, needs="has_constraints", measures_latency=True,
           na_reason="no regex/JSON constraints"),
    System("hf-per-call", "HF per call", "Hugging Face transformers, one model call per LM call, one at a "
           "time, no KV reuse", kind=HF, max_parallel=1, measures_latency=True),
)}

#: The feature-off systems, in report order (the ablation table's columns).
ABLATIONS: tuple[str, ...] = tuple(name for name, s in SYSTEMS.items() if s.is_ablation)


def get_system(name: str) -> System:
    """The system called `name`; KeyError naming the known systems otherwise."""
    try:
        return SYSTEMS[name]
    except KeyError:
        raise KeyError(f"unknown system {name!r}; known systems: {', '.join(SYSTEMS)}") from None


def compile_graph(program: Any, system: System) -> Any:
    """The workload's program compiled for `system`: the default pipeline, minus fork hints if off."""
    from sglc.passes.pipeline import default_pipeline

    passes = list(default_pipeline().passes)
    if not system.fork_hints:
        passes.append(drop_fork_hints)
    return program.compile(passes=passes).graph


def drop_fork_hints(graph: Any) -> Any:
    """A pass: remove every fork-scoped CACHE_PREFIX (the batch-scoped one stays).

    Runs after the default pipeline, so constant texts around a removed hint are not re-merged;
    the text of every stream is unchanged (a hint appends nothing).
    """
    from sglc.ir.ops import Op
    from sglc.passes.pass_result import PassResult

    def is_fork_hint(node: Any) -> bool:
        return node.op is Op.CACHE_PREFIX and node.attrs.get("scope") == "fork"

    if not any(is_fork_hint(n) for n in graph.nodes):
        return PassResult(graph, False)
    graph = graph.copy()
    for node in [n for n in graph.nodes if is_fork_hint(n)]:
        graph.erase_node(node)  # NOTE: a hint has no users (it produces no value anyone reads)
    return PassResult(graph, True)
