"""RuntimeService: the runtime's request API independent of the wire protocol.

The gRPC servicer (grpc_server.py) is a thin adapter over this class; the HTTP server of the
ecosystem-protocols issue adapts the same object. It owns what every transport needs:
validation errors as :class:`RequestError` (INVALID_ARGUMENT / HTTP 400), the request-size
limits (:class:`ServerLimits`, checked before tokenizing), image handling for a text-only model,
every call in flight (a :class:`GenerateCall` or a :class:`ScoreCall`: counted in ``num_active``
until the engine is done with it, cancelled by ``cancel_all``), scoring, the cache-prefix hint,
program hints (issue 28: ``hint=`` of generate / score / cache_prefix, each lease capped to
``ServerLimits.max_hint_lease_ms``; ``end_program``), model info (with the chat template split
into role prefixes/suffixes), health, and metrics (engine counters plus this server's request
counters).

Threading: every method may be called from any thread; the engine runs in its background
thread (``Engine.start()``), which the service requires unless built with ``require_running=False``
(the in-process backend: its calls may queue before it starts the engine).

The servers and the in-process backend (engine_backend.py) are all adapters over this class, so
prompt resolution, limits, sampling validation, constraint compilation, scoring and the
cache-prefix hint exist once.
"""
from __future__ import annotations

import logging
import math
import posixpath
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Sequence

from sglc.wire.program_hint import ProgramHint, check_program_id
from sglc.wire.service_results import ChoiceScore, RuntimeModelInfo, ScoreOutcome

from sglc_runtime.constrained.errors import ConstraintCompilerBusy

from .calls import CallCancelled, GenerateCall, ScoreCall
from sglc.wire.chat_template import derive_chat_template
from .limits import LimitExceeded, ServerLimits
from sglc.wire.prompt import IMAGE_MARKER, PromptInput, RequestError, image_placeholder, resolve_prompt

log = logging.getLogger(__name__)


class ServiceUnavailable(RuntimeError):
    """The server is shutting down (or its engine is not running); retry elsewhere or later."""


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


__all__ = ["IMAGE_MARKER", "PromptInput", "RequestError", "ServiceUnavailable", "ConstraintCompilerBusy",
           "RuntimeService", "GenerateCall", "ScoreCall", "CallCancelled", "LimitExceeded", "ServerLimits",
           "ChoiceScore", "ScoreOutcome", "RuntimeModelInfo", "abort_kind", "image_placeholder", "resolve_prompt",
           "HINT_METRICS"]


def _floats(values: Sequence[float | None] | None) -> list[float]:
    """Logprobs as floats; NaN where there is no value (a prompt's first position)."""
    return [math.nan if v is None else float(v) for v in values or ()]


#: The engine's program-hint counters (issue 28): always in ``metrics()`` (0 while the engine has none).
HINT_METRICS = ("hinted_tokens", "hint_evictions")


def abort_kind(message: str) -> str:
    """Classify an engine abort message: "unavailable" (shut down), "internal" or "aborted"."""
    if "shut down" in message:
        return "unavailable"
    if message.startswith("engine"):
        return "internal"
    return "aborted"


# ----- the service -----
class RuntimeService:
    """The runtime API over one Engine running in its background thread."""

    def __init__(self, engine: Any, *, model_name: str | None = None, limits: ServerLimits | None = None,
                 require_running: bool = True) -> None:
        self.engine = engine
        self._require_running = require_running
        self.limits = limits if limits is not None else ServerLimits()
        self._model_name = model_name
        self._lock = threading.Lock()
        self._draining = False
        self._started = time.monotonic()
        self._counts = {"num_requests": 0, "num_cancelled": 0, "num_invalid": 0, "num_errors": 0}
        self._active: dict[str, GenerateCall | ScoreCall] = {}
        self._info: RuntimeModelInfo | None = None

    # --- lifecycle ---
    @property
    def engine_running(self) -> bool:
        thread = getattr(self.engine, "_thread", None)  # NOTE: Engine has no public is_running yet
        return thread is not None and thread.is_alive()

    def drain(self) -> None:
        """Refuse new requests from now on (ServiceUnavailable); in-flight ones continue."""
        with self._lock:
            self._draining = True

    @property
    def num_active(self) -> int:
        with self._lock:
            return len(self._active)

    def cancel_all(self, reason: str) -> int:
        """Abort every call still in flight (Generate, Score, CachePrefix); returns how many."""
        with self._lock:
            calls = list(self._active.values())
        return sum(call.cancel(reason) for call in calls)

    def abort(self, rid: str) -> int:
        """Abort the call with request id `rid` and the samples ``rid_0``, ``rid_1``, ... one
        /generate with n > 1 started under it; returns how many were still running."""
        with self._lock:
            calls = [c for r, c in self._active.items() if r == rid or (r.startswith(rid + "_") and r[len(rid) + 1:].isdigit())]
        return sum(call.cancel("aborted by /abort_request") for call in calls)

    def _check_open(self) -> None:
        if self._draining:
            raise ServiceUnavailable("the server is shutting down")
        if self._require_running and not self.engine_running:
            raise ServiceUnavailable("the engine is not running")

    def _count(self, name: str | None, n: int = 1) -> None:
        if name is not None:
            with self._lock:
                self._counts[name] += n

    def _invalid(self, err: BaseException) -> RequestError:
        self._count("num_invalid")
        return err if isinstance(err, RequestError) else RequestError(one_line(err))

    def _register(self, call: GenerateCall | ScoreCall) -> None:
        with self._lock:
            if call.rid in self._active:
                self._counts["num_invalid"] += 1
                raise RequestError(f"request id {call.rid!r} is already in flight")
            self._active[call.rid] = call
            self._counts["num_requests"] += 1

    def _mark_ended(self, call: GenerateCall | ScoreCall) -> bool:
        with self._lock:
            if call._ended:
                return False
            call._ended = True
            self._active.pop(call.rid, None)
            return True

    def _end_call(self, call: GenerateCall, output: Any) -> None:
        if self._mark_ended(call) and output is not None and output.finish_reason.get("type") == "abort":
            if abort_kind(str(output.finish_reason.get("message", ""))) != "aborted":
                self._count("num_errors")

    # --- requests ---
    def sampling_params(self, **fields: Any) -> Any:
        """SamplingParams from keyword fields; RequestError (one line) when they are invalid.

        A constraint is given as ``regex=`` / ``json_schema=`` / ``fsm=`` (the compiler's dict);
        the engine compiles it at submit, once per distinct constraint (its GrammarCache).
        """
        from sglc_runtime.sampling.sampling_params import SamplingParams

        try:
            self.limits.check_sampling(fields)
            return SamplingParams(**fields)
        except (ValueError, TypeError) as err:
            raise self._invalid(err) from err

    def resolve(self, prompt: PromptInput) -> tuple[str | list[int], list[str]]:
        """The engine's prompt and warnings, within the limits (checked before anything
        tokenizes it); RequestError otherwise. Callers may resolve early, before compiling a
        constraint, so that an oversized prompt costs nothing."""
        try:
            engine_prompt, warnings = resolve_prompt(prompt, supports_images=self.model_info().supports_images)
            self.check_prompt(engine_prompt)
            return engine_prompt, warnings
        except RequestError as err:
            raise self._invalid(err) from err

    def check_prompt(self, prompt: str | Sequence[int], what: str = "the prompt") -> None:
        """Text: at most max_prompt_bytes of valid Unicode; token ids: at most the context."""
        if isinstance(prompt, str):
            self.limits.check_text("max_prompt_bytes", what, prompt)
        elif len(prompt) > self.model_info().context_length:
            raise RequestError(f"{what} has {len(prompt)} tokens, more than the context of "
                               f"{self.model_info().context_length} tokens")

    def check_rid(self, rid: str) -> None:
        if rid:  # NOTE: behind sglang-router a hinted id carries a continuation, bounded on its own
            self.limits.check_text("max_rid_bytes", "the request id", ProgramHint.rid_head(rid))

    def capped_hint(self, hint: ProgramHint | None) -> ProgramHint | None:
        """`hint` with its lease capped to ``limits.max_hint_lease_ms`` (a longer lease is not an
        error: the hint is advice, so it is shortened, never refused); 0 (the engine's default)
        stays 0."""
        if hint is None:
            return None
        if not isinstance(hint, ProgramHint):
            raise TypeError(f"hint must be a ProgramHint, got {type(hint).__name__}")
        cap = self.limits.max_hint_lease_ms
        return replace(hint, lease_ms=cap) if hint.lease_ms > cap else hint

    def generate(self, prompt: PromptInput, params: Any, *, rid: str | None = None,
                 hint: ProgramHint | None = None) -> GenerateCall:
        """Submit a generation; iterate the returned call's chunks. Raises RequestError now for
        a bad request (the engine validates everything at submit). `hint`: the call's place in
        its program (its lease capped); it never changes the output."""
        hint = self.capped_hint(hint)
        self._check_open()
        if rid:
            try:
                self.check_rid(rid)
            except RequestError as err:
                raise self._invalid(err) from err
        engine_prompt, warnings = self.resolve(prompt)
        call = GenerateCall(self, rid or uuid.uuid4().hex, warnings)
        self._register(call)
        try:
            # NOTE: hint= only when given: an engine stand-in without the keyword still serves plain calls
            extra = {} if hint is None else {"hint": hint}
            self.engine.submit(engine_prompt, params, rid=call.rid, callback=call._deliver, **extra)
        except Exception as err:
            self._mark_ended(call)
            if isinstance(err, (ValueError, TypeError)):
                raise self._invalid(err) from err
            if not isinstance(err, ConstraintCompilerBusy):  # busy is load, not a server error
                self._count("num_errors")
            raise
        return call

    def score(self, prompt: PromptInput, choices: Sequence[str], *, unconditional: bool = False,
              started: Callable[[ScoreCall], Any] | None = None, hint: ProgramHint | None = None) -> ScoreOutcome:
        """Logprobs of each choice after the prompt (Engine.score: batched prefills sharing the
        prompt's cached prefix), plus unconditional logprobs when asked. Blocks until done;
        `started(call)` gets the ScoreCall first, whose ``cancel`` aborts the engine work
        (CallCancelled is raised here then; ServiceUnavailable when the server shuts down).
        `hint` goes with the prompt's scoring (its lease capped); the unconditional scores, which
        condition on the start token alone, carry none."""
        hint = self.capped_hint(hint)
        self._check_open()
        engine_prompt, warnings = self.resolve(prompt)
        choices = self._choices(choices)
        call = ScoreCall(self, uuid.uuid4().hex)
        self._register(call)
        try:
            if started is not None:
                started(call)
            try:
                job = self.engine.score_job(engine_prompt, choices, **({} if hint is None else {"hint": hint}))
            except (ValueError, TypeError) as err:
                raise self._invalid(err) from err
            results = self._run_score(call, job)
            out = [ChoiceScore(list(r.token_ids), _floats(r.logprobs)) for r in results]
            if unconditional:
                alone = self._run_score(call, self.engine.score_job([self._start_token()], [c.token_ids for c in out]))
                for c, r in zip(out, alone):
                    c.unconditional_logprobs = _floats(r.logprobs)
        finally:
            call.finish()
        cached = int(getattr(results[0], "cached_tokens", 0) or 0) if results else 0
        return ScoreOutcome(out, len(job.prompt_ids), cached, warnings)

    def _choices(self, choices: Sequence[str]) -> list[str]:
        if not isinstance(choices, (list, tuple)) or not choices or not all(isinstance(c, str) and c for c in choices):
            raise self._invalid(RequestError("score needs a non-empty list of non-empty choice strings"))
        try:
            self.limits.check_count("max_choices", "the number of choices", choices)
            for i, c in enumerate(choices):
                self.limits.check_text("max_choice_bytes", f"choice {i}", c)
        except RequestError as err:
            raise self._invalid(err) from err
        return list(choices)

    def _run_score(self, call: ScoreCall, job: Any) -> Any:
        try:
            return call.run(job)
        except CallCancelled as err:
            kind = abort_kind(str(err))
            if kind == "unavailable":
                raise ServiceUnavailable(one_line(err)) from None
            if kind == "internal":
                self._count("num_errors")
                raise RuntimeError(f"score aborted: {one_line(err)}") from None
            raise

    def _start_token(self) -> int:
        """What unconditional scores condition on: the model's BOS, else its first EOS."""
        info = self.model_info()
        return info.bos_token_id if info.bos_token_id is not None else info.eos_token_ids[0]

    def cache_prefix(self, prompt: PromptInput, *, started: Callable[[GenerateCall], Any] | None = None,
                     is_active: Callable[[], bool] = lambda: True,
                     hint: ProgramHint | None = None) -> tuple[int, int, list[str]]:
        """Prefill the prompt and keep it cached: (prompt_tokens, cached_tokens before, warnings).
        Blocks until done; `started(call)` gets the GenerateCall first (its cancel aborts it);
        when `is_active()` turns False (a deadline) the call is cancelled (CallCancelled).
        `hint`: the prefix's place in its program (its lease capped)."""
        from sglc_runtime.sampling.sampling_params import SamplingParams

        call = self.generate(prompt, SamplingParams(max_new_tokens=0), hint=hint)
        if started is not None:
            started(call)
        out = self.final_output(call, is_active=is_active)
        if out is None:
            raise CallCancelled("the cache-prefix request was cancelled")
        if out.finish_reason.get("type") == "abort":
            message = str(out.finish_reason.get("message", "aborted"))
            kind = abort_kind(message)
            if kind == "unavailable":
                raise ServiceUnavailable(message)
            if kind == "internal":
                raise RuntimeError(f"cache prefix aborted: {message}")
            raise CallCancelled(message)
        return out.prompt_tokens, out.cached_tokens, call.warnings

    @staticmethod
    def final_output(call: GenerateCall, on_chunk: Callable[[Any], None] | None = None,
                     is_active: Callable[[], bool] = lambda: True) -> Any:
        """Read `call` to its end: its final GenerateOutput, each chunk handed to `on_chunk` first;
        None when `is_active()` turned False before (the call is then cancelled)."""
        for chunk in call.chunks(is_active=is_active, poll_s=0.05):
            if on_chunk is not None:
                on_chunk(chunk)
            if chunk.finished:
                return chunk.output
        return None

    def end_program(self, program_id: str) -> int:
        """A program run ended: the engine releases what it keeps for the program's hints (its
        prefixes are evicted first from then on). Returns the cached tokens released (0 for a
        program the engine holds nothing for). RequestError naming the problem for an invalid id.
        Served while draining too: it only gives memory back."""
        try:
            check_program_id(program_id)
        except (ValueError, TypeError) as err:
            raise self._invalid(err) from err
        return int(self.engine.end_program(program_id))

    def flush(self) -> tuple[bool, str]:
        """Empty the prefix cache if idle: (flushed, reason when not)."""
        if self.engine.flush_cache():
            return True, ""
        return False, "requests are in flight; the cache can only be flushed while the engine is idle"

    def health(self, check_generate: bool = False, timeout_s: float = 30.0) -> tuple[str, str]:
        """("serving" | "not_serving" | "draining", message)."""
        if self._draining:
            return "draining", "shutting down: finishing in-flight requests"
        if not self.engine_running:
            return "not_serving", "the engine thread is not running"
        if check_generate:
            from sglc_runtime.sampling.sampling_params import SamplingParams

            deadline = time.monotonic() + timeout_s
            try:  # NOTE: a tracked call: cancelled at the deadline, never left running
                call = self.generate(PromptInput(token_ids=[self._start_token()]),
                                     SamplingParams(max_new_tokens=1, temperature=0.0))
                out = self.final_output(call, is_active=lambda: time.monotonic() < deadline)
            except Exception as err:
                return "not_serving", f"generation check failed: {one_line(err)}"
            if out is None:
                return "not_serving", f"generation check did not finish in {timeout_s:g} s"
            if out.finish_reason.get("type") == "abort":
                return "not_serving", f"generation check aborted: {out.finish_reason.get('message')}"
        return "serving", "ok"

    def model_info(self) -> RuntimeModelInfo:
        if self._info is None:
            eng, tok = self.engine, self.engine.tokenizer
            path = str(getattr(tok, "path", "") or "")

            def render(messages: list[dict], add_generation_prompt: bool = False) -> str:
                return tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)

            template = derive_chat_template(render) if tok.chat_template else None
            self._info = RuntimeModelInfo(
                model_name=self._model_name or (posixpath.basename(path.rstrip("/")) or str(eng.config.model)),
                model_path=path, context_length=int(eng.max_context), vocab_size=int(eng.model.config.vocab_size),
                eos_token_ids=tuple(int(t) for t in eng.eos_token_ids), bos_token_id=tok.bos_token_id,
                dtype=str(eng.config.dtype), supports_images=False, chat_template=template,
                jinja_chat_template=tok.chat_template or "",
            )
        return self._info

    def metrics(self) -> dict[str, Any]:
        """Engine counters (EngineStats) plus this server's request counters and uptime."""
        stats = self.engine.stats().to_dict()
        for name in HINT_METRICS:  # NOTE: from the engine when it counts them
            stats.setdefault(name, 0)
        with self._lock:
            stats.update(self._counts)
            stats["num_active"] = len(self._active)
        stats["uptime_s"] = time.monotonic() - self._started
        return stats
