"""What a program run produces: per-call records, the per-input result, and the JSONL writer.

One result per input, as a JSON object::

    {"index": 0, "arguments": {...}, "variables": {...}, "text": "...", "messages": [...],
     "calls": [{"node", "op", "stream", "prompt_tokens", "cached_tokens", "completion_tokens",
                "finish_reason", "latency_s"}, ...],
     "error": null}

:class:`OrderedJsonlWriter` writes results in input order, each line as soon as it and every
earlier one are done (and flushed), so completed results survive a crash of the batch.
"""
from __future__ import annotations

import dataclasses
import json
import threading
from typing import IO, Any, Optional

from sglc.wire.backend import CallMeta


@dataclasses.dataclass
class CallRecord:
    """One backend call made by a node (gen, select or cache_prefix)."""

    node: str
    op: str
    stream: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: Optional[dict] = None
    latency_s: float = 0.0
    #: SGLang's logprob keys when the gen asked for logprobs (``output_token_logprobs``, ...).
    logprobs: Optional[dict] = None

    @classmethod
    def of(cls, node: str, stream: int, op: str, meta: CallMeta, latency_s: float) -> "CallRecord":
        return cls(node, op, stream, meta.prompt_tokens, meta.cached_tokens, meta.completion_tokens,
                   meta.finish_reason, round(latency_s, 6), getattr(meta, "logprobs", None))

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["logprobs"] is None:  # NOTE: only gens that asked for logprobs carry them
            del out["logprobs"]
        return out

    def meta_info(self) -> dict[str, Any]:
        """SGLang-style meta info for `s.get_meta_info(name)` (with the logprob keys when asked)."""
        return {"prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "completion_tokens": self.completion_tokens, "finish_reason": self.finish_reason,
                "latency_s": self.latency_s, **(self.logprobs or {})}


@dataclasses.dataclass
class ProgramResult:
    """The outcome of running a program on one input."""

    index: int
    arguments: dict[str, Any]
    variables: dict[str, Any] = dataclasses.field(default_factory=dict)
    text: str = ""
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    calls: list[CallRecord] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    #: Per-variable call meta info of stream 0 (not serialized; for get_meta_info()).
    meta_info: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict, repr=False)
    #: What the program's function returned (`state.ret_value`; not serialized). RETURNS_STATE:
    #: the function returned its own state.
    ret_value: Any = dataclasses.field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "arguments": self.arguments,
            "variables": self.variables,
            "text": self.text,
            "messages": self.messages,
            "calls": [c.to_json() for c in self.calls],
            "error": self.error,
        }

    def to_line(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, default=_fallback)


class _ReturnsState:
    """The marker of a program that returned its own state (`return s`)."""

    def __repr__(self) -> str:
        return "RETURNS_STATE"


RETURNS_STATE = _ReturnsState()


def _fallback(value: Any) -> Any:
    """JSON for values json cannot encode natively (bytes, sets, objects): their str()."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class OrderedJsonlWriter:
    """Writes results to a stream in index order as they complete (thread-safe).

    ``add(result)`` may be called in any order; line i is written once results 0..i are all in.
    """

    def __init__(self, out: Optional[IO[str]], first_index: int = 0) -> None:
        self._out = out
        self._next = first_index
        self._pending: dict[int, ProgramResult] = {}
        self._lock = threading.Lock()
        self.num_written = 0

    def add(self, result: ProgramResult) -> None:
        with self._lock:
            self._pending[result.index] = result
            while self._next in self._pending:
                done = self._pending.pop(self._next)
                if self._out is not None:
                    self._out.write(done.to_line() + "\n")
                    self._out.flush()
                self._next += 1
                self.num_written += 1

    @property
    def num_pending(self) -> int:
        with self._lock:
            return len(self._pending)
