"""RuntimeService: the runtime's request API independent of the wire protocol.

The gRPC servicer (grpc_server.py) is a thin adapter over this class; the HTTP server of the
ecosystem-protocols issue adapts the same object. It owns what every transport needs:
validation errors as :class:`RequestError` (INVALID_ARGUMENT / HTTP 400), image handling for a
text-only model, one Generate in flight as a :class:`GenerateCall` (chunks, cancel), scoring,
the cache-prefix hint, model info (with the chat template split into role prefixes/suffixes),
health, and metrics (engine counters plus this server's request counters).

Threading: every method may be called from any thread; the engine runs in its background
thread (``Engine.start()``), which the service requires.
"""
from __future__ import annotations

import logging
import posixpath
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from sglc.executor.backend import ChatTemplate

from sglc_runtime.constrained.errors import ConstraintCompilerBusy

from .chat_template import derive_chat_template
from .prompts import IMAGE_MARKER, PromptInput, RequestError, image_placeholder, resolve_prompt

log = logging.getLogger(__name__)

_CONSTRAINT_FIELDS = ("regex", "json_schema", "fsm")


class ServiceUnavailable(RuntimeError):
    """The server is shutting down (or its engine is not running); retry elsewhere or later."""


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


__all__ = ["IMAGE_MARKER", "PromptInput", "RequestError", "ServiceUnavailable", "ConstraintCompilerBusy",
           "RuntimeService", "GenerateCall",
           "ChoiceScore", "ScoreOutcome", "RuntimeModelInfo", "abort_kind", "image_placeholder", "resolve_prompt"]


# ----- results -----
@dataclass
class ChoiceScore:
    token_ids: list[int]
    token_logprobs: list[float]
    greedy_logprobs: list[float] = field(default_factory=list)
    unconditional_logprobs: list[float] | None = None


@dataclass
class ScoreOutcome:
    choices: list[ChoiceScore]
    prompt_tokens: int
    cached_tokens: int
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RuntimeModelInfo:
    model_name: str
    model_path: str
    context_length: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    dtype: str
    supports_images: bool
    chat_template: ChatTemplate | None
    jinja_chat_template: str


def abort_kind(message: str) -> str:
    """Classify an engine abort message: "unavailable" (shut down), "internal" or "aborted"."""
    if "shut down" in message:
        return "unavailable"
    if message.startswith("engine"):
        return "internal"
    return "aborted"


# ----- one Generate in flight -----
class GenerateCall:
    """One submitted Generate: iterate its chunks (the last has finished=True), or cancel it."""

    def __init__(self, service: RuntimeService, rid: str, warnings: list[str]) -> None:
        self.service = service
        self.rid = rid
        self.warnings = warnings
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._ended = False  # NOTE: guarded by service._lock; counters change exactly once

    def _deliver(self, chunk: Any) -> None:  # engine thread
        self._queue.put(chunk)

    def chunks(self, is_active: Callable[[], bool] = lambda: True, poll_s: float = 0.25) -> Iterator[Any]:
        """The request's StreamChunks until the finished one. When `is_active()` turns False
        (the client went away) the request is cancelled and iteration stops."""
        try:
            while True:
                try:
                    chunk = self._queue.get(timeout=poll_s)
                except queue.Empty:
                    if not is_active():
                        self.cancel("the client went away")
                        return
                    continue
                if chunk.finished:  # NOTE: ended before it is handed out: a late cancel is a no-op
                    self.service._end_call(self, chunk.output)
                    yield chunk
                    return
                yield chunk
        finally:
            self.cancel("the consumer stopped reading")  # no-op when already finished

    def cancel(self, reason: str = "cancelled by the client") -> bool:
        """Abort the request if it is still running; True when this call aborted it."""
        if not self.service._mark_ended(self):
            return False
        aborted = self.service.engine.abort(self.rid, reason)
        self.service._count("num_cancelled" if aborted else None)
        return aborted


# ----- the service -----
class RuntimeService:
    """The runtime API over one Engine running in its background thread."""

    def __init__(self, engine: Any, *, model_name: str | None = None) -> None:
        self.engine = engine
        self._model_name = model_name
        self._lock = threading.Lock()
        self._draining = False
        self._started = time.monotonic()
        self._counts = {"num_requests": 0, "num_cancelled": 0, "num_invalid": 0, "num_errors": 0}
        self._active: dict[str, GenerateCall] = {}
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
        """Abort every Generate still in flight; returns how many were aborted."""
        with self._lock:
            calls = list(self._active.values())
        return sum(call.cancel(reason) for call in calls)

    def _check_open(self) -> None:
        if self._draining:
            raise ServiceUnavailable("the server is shutting down")
        if not self.engine_running:
            raise ServiceUnavailable("the engine is not running")

    def _count(self, name: str | None, n: int = 1) -> None:
        if name is not None:
            with self._lock:
                self._counts[name] += n

    def _invalid(self, err: BaseException) -> RequestError:
        self._count("num_invalid")
        return err if isinstance(err, RequestError) else RequestError(one_line(err))

    def _mark_ended(self, call: GenerateCall) -> bool:
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
        it is compiled once per distinct constraint (GrammarCache) unless SamplingParams takes
        those fields itself.
        """
        from sglc_runtime.sampling_params import SamplingParams

        try:
            given = {k: fields.pop(k) for k in _CONSTRAINT_FIELDS if fields.get(k) is not None}
            if given and not set(given) <= set(SamplingParams.__dataclass_fields__):
                fields["constraint"] = self._grammar(given)
            else:
                fields.update(given)
            return SamplingParams(**fields)
        except (ValueError, TypeError) as err:
            raise self._invalid(err) from err

    def _grammar(self, given: dict[str, Any]) -> Any:
        from sglc_runtime.constrained import ConstraintSpec

        spec = ConstraintSpec.of(**given)
        try:  # NOTE: the engine's cache: one compile budget, one in-flight table, one byte bound
            return self.engine.grammars.get(spec)
        except ValueError as err:  # the FSM library's errors: name the constraint
            raise ValueError(f"{spec.kind}: {one_line(err)}") from err

    def _prompt(self, prompt: PromptInput) -> tuple[str | list[int], list[str]]:
        try:
            return resolve_prompt(prompt, supports_images=self.model_info().supports_images)
        except RequestError as err:
            raise self._invalid(err) from err

    def generate(self, prompt: PromptInput, params: Any, *, rid: str | None = None) -> GenerateCall:
        """Submit a generation; iterate the returned call's chunks. Raises RequestError now for
        a bad request (the engine validates everything at submit)."""
        self._check_open()
        engine_prompt, warnings = self._prompt(prompt)
        call = GenerateCall(self, rid or uuid.uuid4().hex, warnings)
        with self._lock:
            if call.rid in self._active:
                self._counts["num_invalid"] += 1
                raise RequestError(f"request id {call.rid!r} is already in flight")
            self._active[call.rid] = call
            self._counts["num_requests"] += 1
        try:
            self.engine.submit(engine_prompt, params, rid=call.rid, callback=call._deliver)
        except Exception as err:
            self._mark_ended(call)
            if isinstance(err, (ValueError, TypeError)):
                raise self._invalid(err) from err
            if not isinstance(err, ConstraintCompilerBusy):  # busy is load, not a server error
                self._count("num_errors")
            raise
        return call

    def score(self, prompt: PromptInput, choices: Sequence[str], *, unconditional: bool = False) -> ScoreOutcome:
        """Logprobs of each choice after the prompt (Engine.score: one batched prefill sharing
        the prompt's cached prefix), plus greedy and unconditional logprobs."""
        from sglc_runtime.sampling_params import SamplingParams

        self._check_open()
        engine_prompt, warnings = self._prompt(prompt)
        if not choices or not all(isinstance(c, str) and c for c in choices):
            raise self._invalid(RequestError("score needs a non-empty list of non-empty choice strings"))
        self._count("num_requests")
        try:
            results = self.engine.score(engine_prompt, list(choices))
        except (ValueError, TypeError) as err:
            raise self._invalid(err) from err
        out = [ChoiceScore(list(r.token_ids), [float(x) for x in r.logprobs],
                           [float(x) for x in getattr(r, "greedy_logprobs", None) or []]) for r in results]
        if unconditional:
            start = self._start_token()
            params = SamplingParams(max_new_tokens=0, return_logprob=True, logprob_start_len=1)
            rids = [self.engine.submit([start] + c.token_ids, params) for c in out]
            for c, rid in zip(out, rids):
                c.unconditional_logprobs = [float(x) for x in self.engine.wait(rid).input_logprobs]
        first = results[0] if results else None
        prompt_tokens = getattr(first, "prompt_tokens", 0) or (
            len(engine_prompt) if not isinstance(engine_prompt, str) else len(self.engine.tokenizer.encode(engine_prompt)))
        return ScoreOutcome(out, prompt_tokens, int(getattr(first, "cached_tokens", 0) or 0), warnings)

    def _start_token(self) -> int:
        """What unconditional scores condition on: the model's BOS, else its first EOS."""
        info = self.model_info()
        return info.bos_token_id if info.bos_token_id is not None else info.eos_token_ids[0]

    def cache_prefix(self, prompt: PromptInput) -> tuple[int, int, list[str]]:
        """Prefill the prompt and keep it cached: (prompt_tokens, cached_tokens before, warnings)."""
        from sglc_runtime.sampling_params import SamplingParams

        self._check_open()
        engine_prompt, warnings = self._prompt(prompt)
        self._count("num_requests")
        try:
            rid = self.engine.submit(engine_prompt, SamplingParams(max_new_tokens=0))
        except (ValueError, TypeError) as err:
            raise self._invalid(err) from err
        out = self.engine.wait(rid)
        return out.prompt_tokens, out.cached_tokens, warnings

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
            from sglc_runtime.sampling_params import SamplingParams

            try:
                rid = self.engine.submit([self._start_token()], SamplingParams(max_new_tokens=1, temperature=0.0))
                out = self.engine.wait(rid, timeout=timeout_s)
            except Exception as err:
                return "not_serving", f"generation check failed: {one_line(err)}"
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
        with self._lock:
            stats.update(self._counts)
            stats["num_active"] = len(self._active)
        stats["uptime_s"] = time.monotonic() - self._started
        return stats
