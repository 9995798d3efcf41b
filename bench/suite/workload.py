"""A benchmark workload: an sglc program in one of the SGLang paper's shapes plus generated inputs.

A :class:`Workload` is a named recipe; ``workload.build(size, seed)`` returns a
:class:`WorkloadInstance` holding the program (an ``@sgl.function`` whose generation lengths
are fixed for that size), one warm-up input and the timed inputs. Every instance is
deterministic per ``(size, seed)``: the same pair always gives the same program text and
inputs, so every system in a report runs exactly the same model work.

Sizes:

- ``tiny``: a smoke test (2 programs, 2-4 token generations, short prefixes; seconds on CPU);
- ``quick``: the committed report (a few seconds of model work per workload on a 2-core CPU);
- ``full``: closer to the paper (more programs, longer generations).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

SIZES = ("tiny", "quick", "full")

T = TypeVar("T")

#: Inputs timed one program at a time, per size (taken from the head of ``inputs``).
LATENCY_COUNT = {"tiny": 2, "quick": 2, "full": 3}


@dataclass(frozen=True)
class WorkloadInstance:
    """One built workload.

    program: an ``@sgl.function`` built for this size (generation lengths baked in at build time).
    warmup: one input NOT among ``inputs``; runs (untimed) before each measurement.
    inputs: the timed batch (all submitted at once: saturates the engine).
    latency_inputs: 1-3 inputs timed one program at a time (may overlap ``inputs``).
    """

    program: Any
    warmup: dict[str, Any]
    inputs: list[dict[str, Any]]
    latency_inputs: list[dict[str, Any]]


@dataclass(frozen=True)
class Workload:
    """A named workload of the evaluation.

    name: snake_case id, e.g. "mmlu_5shot".
    title: human title, e.g. "MMLU 5-shot".
    shape: one line: the paper shape (calls per program, what is shared).
    prefix_heavy: the >=5x HF-per-call target applies.
    has_forks: fork hints / intra-program parallelism can change anything.
    has_constraints: jump-forward can change anything (regex / json gens).
    build: (size, seed) -> WorkloadInstance; deterministic per seed.
    """

    name: str
    title: str
    shape: str
    prefix_heavy: bool
    has_forks: bool
    has_constraints: bool
    build: Callable[[str, int], WorkloadInstance]


def check_size(size: str) -> str:
    """`size` itself if it is one of SIZES; ValueError naming the known sizes otherwise."""
    if size not in SIZES:
        raise ValueError(f"unknown workload size {size!r}; expected one of {', '.join(SIZES)}")
    return size


def by_size(size: str, table: Mapping[str, T]) -> T:
    """The entry of a per-size table (every size must be present)."""
    check_size(size)
    if size not in table:
        raise KeyError(f"size {size!r} missing from the table (has {sorted(table)})")
    return table[size]


def make_instance(program: Any, size: str, warmup: dict[str, Any], inputs: list[dict[str, Any]]) -> WorkloadInstance:
    """An instance whose latency inputs are the first LATENCY_COUNT[size] timed inputs.

    Raises ValueError if the warm-up input is among the timed inputs (it would pre-warm them).
    """
    check_size(size)
    if warmup in inputs:
        raise ValueError("the warm-up input must not be one of the timed inputs")
    if len(inputs) < LATENCY_COUNT[size]:
        raise ValueError(f"{len(inputs)} inputs are fewer than the {LATENCY_COUNT[size]} latency inputs of {size!r}")
    return WorkloadInstance(program=program, warmup=dict(warmup), inputs=[dict(x) for x in inputs],
                            latency_inputs=[dict(x) for x in inputs[: LATENCY_COUNT[size]]])
