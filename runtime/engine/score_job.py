"""ScoreJob: one select scoring (``Engine.score``) as engine requests that ``abort`` reaches.

The prompt is prefilled once (so it is cached), then every continuation runs as a prefill-only
request that shares it, at most ``window`` of them in flight: other clients' requests are
scheduled between the waves, so a score with many choices takes its share of the engine, not
all of it. Every request of a wave is an ordinary engine request, so the scheduler's per-step
prefill budget (``EngineConfig.chunked_prefill_size``) bounds each step: a long continuation is
prefilled in chunks, and a short request that arrives meanwhile runs between them.
``abort()`` may come from any thread (a client that went away, a server shutting down): it
aborts the requests in flight (each stops at its next chunk boundary) and stops submitting;
``results()`` then raises ScoreAborted. Every request the job submitted is finished and
collected before ``results()`` returns or raises, so nothing stays queued or kept in the
engine after it.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from sglc.wire.program_hint import NEVER, ProgramHint

from ..model.tokenizer import Tokenizer
from ..output.outputs import GenerateOutput, ScoreResult
from ..sampling.sampling_params import SamplingParams
from .prompt_ids import Prompt, continuation_spans, to_token_ids

if TYPE_CHECKING:  # NOTE: the torch-free engine scores with this module too
    from .engine_config import EngineConfig

#: Continuations in flight at once (one batched prefill each wave; 4-way select is one wave).
DEFAULT_WINDOW = 32


class ScoringEngine(Protocol):
    """What a ScoreJob uses of its engine (``engine.Engine`` and ``native_engine.NativeEngine``,
    whose ``score_job()`` makes jobs)."""

    config: "EngineConfig | Any"  # disable_radix_cache: no prompt prefill of its own
    vocab_size: int
    tokenizer: Tokenizer
    max_context: int

    def submit(self, prompt: Prompt, params: SamplingParams | dict | None = None, *,
               hint: ProgramHint | None = None) -> str: ...

    def wait(self, rid: str, timeout: float | None = None) -> GenerateOutput: ...

    def abort(self, rid: str, message: str = "aborted by client") -> bool: ...


class ScoreAborted(RuntimeError):
    """The score was aborted (the message says why: the client, a shutdown, an engine error)."""


class ScoreJob:
    """Scores continuations after a prompt; build it (validation raises here), then ``results()``."""

    def __init__(self, engine: ScoringEngine, prompt: Prompt, continuations: Sequence[Prompt], *,
                 window: int = DEFAULT_WINDOW, hint: ProgramHint | None = None) -> None:
        """Tokenize and validate everything (ValueError / TypeError) before any engine work.
        ``hint``: the select's place in its program; the prompt's prefill carries it, the
        choices' prefills carry the same program with next use "never" (one of them is appended
        and extended later, but its tokens are few: the prompt is what is worth keeping)."""
        assert window >= 1, f"ScoreJob window must be >= 1, got {window}"
        self._engine = engine
        self._hint = hint
        self._choice_hint = None if hint is None else ProgramHint(hint.program_id, NEVER, hint.lease_ms)
        self.window = window
        vocab = engine.vocab_size
        self.prompt_ids = to_token_ids(prompt, engine.tokenizer, vocab)
        # NOTE: checked before the continuations are tokenized with the prompt (once per choice).
        if len(self.prompt_ids) + 1 > engine.max_context:
            raise ValueError(f"prompt of {len(self.prompt_ids)} tokens exceeds the context of "
                             f"{engine.max_context} tokens")
        self.spans = continuation_spans(prompt, self.prompt_ids, continuations, engine.tokenizer, vocab)
        for i, (full, _) in enumerate(self.spans):
            if len(full) + 1 > engine.max_context:
                raise ValueError(f"prompt + choice {i} ({len(full)} tokens) exceeds the context of "
                                 f"{engine.max_context} tokens")
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._abort_message: str | None = None
        self._done = False

    @property
    def aborted(self) -> bool:
        return self._abort_message is not None

    def abort(self, message: str = "score aborted") -> bool:
        """Stop the job (any thread); True when this call stopped it (False once finished)."""
        with self._lock:
            if self._abort_message is not None or self._done:
                return False
            self._abort_message = message
            rids = list(self._in_flight)
        for rid in rids:
            self._engine.abort(rid, message)
        return True

    def results(self) -> list[ScoreResult]:
        """Run the job in this thread (it waits on the engine); one result per continuation."""
        try:
            out = self._run()
        except BaseException:
            self.abort("score failed")
            self._collect_rest()
            raise
        with self._lock:
            self._done = True
        return out

    # --- internals ---
    def _run(self) -> list[ScoreResult]:
        cached = 0
        if not self._engine.config.disable_radix_cache:
            cached = self._collect(self._submit(self.prompt_ids, SamplingParams(max_new_tokens=0), self._hint)).cached_tokens
        outs: list[GenerateOutput | None] = [None] * len(self.spans)
        pending: deque[tuple[int, str]] = deque()
        for i, (full, start) in enumerate(self.spans):
            while len(pending) >= self.window:
                j, rid = pending.popleft()
                outs[j] = self._collect(rid)
            params = SamplingParams(max_new_tokens=0, return_logprob=True, logprob_start_len=start)
            pending.append((i, self._submit(full, params, self._choice_hint)))
        while pending:
            j, rid = pending.popleft()
            outs[j] = self._collect(rid)
        return [ScoreResult(full[start:], out.input_logprobs, len(self.prompt_ids), cached)
                for (full, start), out in zip(self.spans, outs)]

    def _submit(self, ids: list[int], params: SamplingParams, hint: ProgramHint | None) -> str:
        with self._lock:  # NOTE: abort() either sees this rid in flight or makes us refuse it
            if self._abort_message is not None:
                raise ScoreAborted(self._abort_message)
            rid = self._engine.submit(ids, params, hint=hint)
            self._in_flight.add(rid)
            return rid

    def _collect(self, rid: str) -> GenerateOutput:
        out = self._engine.wait(rid)
        with self._lock:
            self._in_flight.discard(rid)
        if out.finish_reason.get("type") == "abort":
            raise ScoreAborted(str(out.finish_reason.get("message") or "aborted"))
        return out

    def _collect_rest(self) -> None:
        """Wait out the aborted requests so the engine keeps none of their outputs."""
        with self._lock:
            rids = list(self._in_flight)
            self._in_flight.clear()
        for rid in rids:
            self._engine.abort(rid, self._abort_message or "score aborted")
            try:
                self._engine.wait(rid)
            except KeyError:  # already collected
                pass
