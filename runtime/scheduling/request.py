"""Req: one generation request as the scheduler sees it, plus what the other parts keep on it.

The scheduler reads only ``max_new_tokens`` and ``ignore_eos`` from ``sampling_params``; the
rest of that object belongs to the sampler. ``sampling_state`` (the model runner's: generator,
constraint cursor, prompt logprobs), ``output`` (the engine's: text stream, output logprobs,
delivery) and ``num_forced_at_submit`` are set by the engine at submit; the scheduler never
touches them.
"""
from __future__ import annotations

import enum
from typing import Any

import torch

from ..output.request_output import RequestOutput
from ..sampling.sampling_params import SamplingParams
from ..sampling.sampling_state import SamplingState

_EMPTY = torch.empty(0, dtype=torch.int64)


class ReqStatus(enum.Enum):
    WAITING = "waiting"  # in the waiting queue (new, or retracted)
    RUNNING = "running"  # holds a table row and KV slots
    FINISHED = "finished"  # done; all its slots are back in the cache / pool


class Req:
    """A request's tokens, progress and cache handles.

    Token bookkeeping (``fill_ids = origin_input_ids + output_ids``):
        - ``kv_len``: leading tokens of ``fill_ids`` that have KV slots in the request's table
          row (already computed, or being computed by the batch in flight).
        - ``prefix_indices`` / ``last_node``: the radix-cache prefix the request holds a lock
          on; ``prefix_indices`` are the slots of ``fill_ids[:len(prefix_indices)]``.
        - ``num_pending = len(fill_ids) - kv_len``: tokens still to feed to the model. A request
          whose prefill is done (``prefill_done``) normally has exactly one pending token (its
          last sampled output).

    NOTE: ``kv_len == len(origin_input_ids) + len(output_ids) - 1`` for a decoding request: the
    last sampled token has no KV slot until the next step feeds it.
    """

    __slots__ = (
        "rid", "origin_input_ids", "output_ids", "sampling_params", "status", "req_row",
        "prefix_indices", "last_node", "kv_len", "extend_input_len", "prefill_done",
        "finished_reason", "cached_tokens", "num_retractions", "num_admissions", "arrival",
        "sampling_state", "output", "num_forced_at_submit", "hint", "program_rank", "prompt_text", "internal",
    )

    def __init__(self, rid: str, origin_input_ids: list[int], sampling_params: SamplingParams):
        if not origin_input_ids:
            raise ValueError(f"Req {rid!r}: the prompt must have at least one token")
        self.rid = rid
        self.origin_input_ids: list[int] = list(origin_input_ids)
        self.output_ids: list[int] = []
        self.sampling_params = sampling_params
        self.status = ReqStatus.WAITING
        self.req_row: int | None = None
        self.prefix_indices: torch.Tensor = _EMPTY
        self.last_node: Any = None
        self.kv_len = 0
        self.extend_input_len = 0  # tokens fed in the latest scheduled step
        self.prefill_done = False
        self.finished_reason: Any = None  # "length" / "stop" / "abort", or what the engine passed
        self.cached_tokens = 0  # prompt tokens served from the cache at first admission
        self.num_retractions = 0
        self.num_admissions = 0
        self.arrival = -1  # set by the scheduler: admission order, larger = younger
        # Set by the engine at submit (None for requests that only the scheduler sees, in tests):
        self.sampling_state: SamplingState | None = None  # read and updated by the model runner
        self.output: RequestOutput | None = None  # the request's text, logprobs and delivery
        self.num_forced_at_submit = 0  # output tokens a constraint forced before it was queued
        #: Its place in its program (sglc.wire.program_hint.ProgramHint), or None: read by the
        #: scheduler's program-aware admission and by the cache's retention when it finishes.
        self.hint: Any = None
        self.program_rank = 0  # its program's start order (set at admission by the ProgramTable)
        self.prompt_text: str | None = None  # the prompt as sent, when text (what a precompute extends)
        #: the runtime's own request (a precompute), not a client's: left out of the prompt and
        #: cache-hit counts
        self.internal = False

    @property
    def max_new_tokens(self) -> int:
        return int(self.sampling_params.max_new_tokens)

    @property
    def ignore_eos(self) -> bool:
        return bool(self.sampling_params.ignore_eos)

    @property
    def fill_ids(self) -> list[int]:
        """Prompt plus generated tokens (a new list)."""
        return self.origin_input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        """Tokens of ``fill_ids`` without KV yet."""
        return self.seq_len - self.kv_len

    def token_slice(self, start: int, end: int) -> list[int]:
        """``fill_ids[start:end]`` without building ``fill_ids``."""
        p = len(self.origin_input_ids)
        if end <= p:
            return self.origin_input_ids[start:end]
        if start >= p:
            return self.output_ids[start - p : end - p]
        return self.origin_input_ids[start:] + self.output_ids[: end - p]

    @property
    def finished(self) -> bool:
        return self.status is ReqStatus.FINISHED

    def reset_for_requeue(self) -> None:
        """Forget cache handles and KV progress; ``output_ids`` are kept and re-prefilled."""
        self.status = ReqStatus.WAITING
        self.req_row = None
        self.prefix_indices = _EMPTY
        self.last_node = None
        self.kv_len = 0
        self.extend_input_len = 0
        self.prefill_done = False

    def __repr__(self) -> str:
        return (
            f"Req({self.rid!r}, {self.status.value}, prompt={len(self.origin_input_ids)}, "
            f"out={len(self.output_ids)}, kv={self.kv_len})"
        )
