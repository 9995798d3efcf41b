"""What one step of the torch-free engine (``native_engine.py``) runs: its requests' state
(``NativeRequest``) and the rows of a step as the native model takes them (``StepRows``: each row's
token, position, the KV slot it writes and the slots it attends; which rows' logits are read).
The engine decides which requests and how many prompt tokens; this turns that into arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sglc.wire.program_hint import ProgramHint

from ..cache.radix_cache import TreeNode
from ..output.request_output import RequestOutput
from ..sampling.sampling_params import SamplingParams


@dataclass(eq=False)
class NativeRequest:
    """One request of the torch-free engine, from submit to its end."""

    rid: str
    tokens: list[int]  # prompt, then each sampled token
    num_prompt: int
    params: SamplingParams
    output: RequestOutput
    rng: np.random.Generator
    slots: list[int] = field(default_factory=list)  # KV slot of each token position (reserved whole)
    computed: int = 0  # positions whose K/V are written
    cached: int = 0  # leading prompt positions the radix cache served at admission
    locked: int = 0  # leading positions whose slots are the tree's (locked while it runs)
    last_node: TreeNode | None = None  # where that locked prefix ends
    aborted: bool = False
    logprob_rows: tuple[int, int] = (0, 0)  # prompt positions [next, end) whose rows give prompt logprobs
    prompt_logprobs: list[float | None] | None = None
    hint: ProgramHint | None = None  # its place in its program: the cache keeps its final text by it
    program_rank: int = 0  # its program's start order (set at admission by the ProgramTable)
    prompt_text: str | None = None  # the prompt as sent, when text (what a precompute extends)
    internal: bool = False  # the runtime's own (a precompute): left out of prompt / cache-hit counts

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.num_prompt


class StepRows(NamedTuple):
    """A step: ``picked`` (request, first position, rows) chunks; ``inputs`` the model's
    (ids, positions, loc, index, lens); ``samplers`` (request, row) whose logits it samples from;
    ``prompt_rows`` (request, row, position) whose logits give prompt logprobs."""

    picked: list[tuple[NativeRequest, int, int]]
    inputs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    samplers: list[tuple[NativeRequest, int]]
    prompt_rows: list[tuple[NativeRequest, int, int]]

    @classmethod
    def build(cls, picked: list[tuple[NativeRequest, int, int]]) -> StepRows:
        """Row k of a chunk at ``start`` is position start + k: it writes its own slot and attends
        its request's slots of positions 0 .. start + k (its own last)."""
        total = sum(n for _, _, n in picked)
        width = max(start + n for _, start, n in picked)
        ids = np.empty(total, np.int64)
        positions = np.empty(total, np.int64)
        index = np.zeros((total, width), np.int64)
        samplers: list[tuple[NativeRequest, int]] = []
        prompt_rows: list[tuple[NativeRequest, int, int]] = []
        row = 0
        for req, start, n in picked:
            slots = np.asarray(req.slots[:start + n], np.int64)
            ids[row:row + n] = req.tokens[start:start + n]
            positions[row:row + n] = np.arange(start, start + n)
            own = np.arange(start + n)[None, :] <= positions[row:row + n, None]
            index[row:row + n, :start + n] = np.where(own, slots[None, :], 0)
            lo, hi = max(req.logprob_rows[0], start), min(req.logprob_rows[1], start + n)
            prompt_rows += [(req, row + p - start, p) for p in range(lo, hi)]
            if start + n >= req.num_prompt and req.params.max_new_tokens > 0:  # it samples from its last row
                samplers.append((req, row + n - 1))
            row += n
        loc = index[np.arange(total), positions]
        return cls(picked, (ids, positions, loc, index, positions + 1), samplers, prompt_rows)
