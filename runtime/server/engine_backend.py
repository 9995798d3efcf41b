"""EngineBackend: the embedded runtime — our engine in this process, driven by its own thread.

It implements the executor's Backend interface (:mod:`sglc.wire.backend`, the contract), so the
runtime imports only sglc.wire and the executor never imports the runtime; ``sglc.backends``
(the composition root) builds it for ``make_backend("engine")``.

``sglc run --backend srt`` without ``--endpoint`` and ``sgl.Runtime()`` use it, so a program
runs with nothing else started. The engine runs in background-thread mode (``Engine.start``):
any executor thread submits a request and waits for it, with a deadline.

- generate: one engine request; constraints (a compiled FSM from the lower_constraints pass,
  a regex or a JSON schema) go to the engine's SamplingParams, which compiles them once.
- images: the model is text-only; each image becomes ``<image: NAME>`` at its marker, exactly
  as the gRPC server's default image mode (sglc.wire.prompt.resolve_prompt).
- score and model info: the gRPC server's own code (:class:`RuntimeService` over the same
  engine), so scoring (one batched prefill sharing the prompt), unconditional logprobs (the
  choice tokens after the start token: the model's BOS, else its first EOS), the start token and
  the chat template's split exist once. Its request limits (ServerLimits' defaults) apply.
- cache_prefix: a prefill-only request (max_new_tokens=0); the radix cache keeps the prefix.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from sglc.errors import BackendError
from sglc.wire import sampling_table
from sglc.wire.backend import (
    Backend,
    CallMeta,
    ChoiceLogprobs,
    GenParams,
    GenResult,
    ModelInfo,
    Prompt,
    ScoreResult,
)
from sglc.wire.prompt import IMAGE_MARKER, PromptInput, resolve_prompt

from ..engine import Engine
from ..sampling.sampling_params import SamplingParams
from .calls import CallCancelled
from .service import RuntimeService, ServiceUnavailable

#: Seconds one engine call may take before it is aborted and reported (CPU decoding is slow).
DEFAULT_CALL_TIMEOUT = 600.0

def sampling_kwargs(params: GenParams) -> dict[str, Any]:
    """The runtime SamplingParams fields a GenParams sets (constraints aside), by runtime name."""
    return sampling_table.to_runtime({key: getattr(params, key) for key in sampling_table.BY_FIELD})


class EngineBackend(Backend):
    """A Backend over an in-process ``sglc_runtime.engine.Engine`` (thread-safe).

    Pass an existing `engine` (it is started if needed and left running on close), or engine
    settings (`model`, `dtype`, `schedule_policy`, `disable_radix_cache`, ...; see EngineConfig)
    to build one that close() shuts down. ``start=False``: calls queue their requests and wait
    until ``start()`` (a measurement that needs several requests queued before the first step).
    """

    def __init__(self, engine: Any = None, *, timeout: Optional[float] = DEFAULT_CALL_TIMEOUT, start: bool = True,
                 **config: Any) -> None:
        self._owns_engine = engine is None
        self.engine = engine if engine is not None else Engine(**config)
        self._started = threading.Event()
        if start:
            self.start()
        self.timeout = timeout
        #: The transport-neutral service the gRPC and HTTP servers adapt; here, in process.
        self.service = RuntimeService(self.engine)
        self._info: Optional[ModelInfo] = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the engine's thread (done by the constructor unless start=False)."""
        self.engine.start()
        self._started.set()

    # ----- facts -----
    def model_info(self) -> ModelInfo:
        with self._lock:
            if self._info is None:
                info = self.service.model_info()  # NOTE: what the server reports, derived once
                self._info = ModelInfo(model=info.model_name, context_length=info.context_length,
                                       chat_template=info.chat_template, supports_images=info.supports_images)
            return self._info

    def metrics(self) -> dict[str, Any]:
        return self.engine.stats().to_dict()

    # ----- calls -----
    def generate(self, prompt: Prompt, params: GenParams) -> GenResult:
        sampling = self._sampling_params(params)
        t0 = time.perf_counter()
        out = self._run(self._text(prompt), sampling)
        meta = CallMeta(out.prompt_tokens, out.cached_tokens, out.completion_tokens, out.finish_reason,
                        time.perf_counter() - t0)
        return GenResult(out.text, meta)

    def generate_stream(self, prompt: Prompt, params: GenParams, on_text: Callable[[str], None]) -> GenResult:
        """`generate`, each decoded piece handed to `on_text` as the engine produces it."""
        sampling = self._sampling_params(params)
        t0 = time.perf_counter()
        rid = self.engine.submit(self._text(prompt), sampling, stream=True)
        self._wait_started()
        out = None
        for chunk in self.engine.chunks(rid):  # NOTE: leaving early (an exception) aborts the request
            if chunk.text:
                on_text(chunk.text)
            if chunk.finished:
                out = chunk.output
        if out is None or (out.finish_reason or {}).get("type") == "abort":
            reason = (out.finish_reason or {}).get("message") if out is not None else "no final output"
            raise BackendError(f"the runtime aborted the request: {reason or 'no reason given'}")
        meta = CallMeta(out.prompt_tokens, out.cached_tokens, out.completion_tokens, out.finish_reason,
                        time.perf_counter() - t0)
        return GenResult(out.text, meta)

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        if not prompt.text and not prompt.images:
            raise ValueError("select needs a non-empty prompt to score choices after")
        self._wait_started()
        t0 = time.perf_counter()
        try:
            outcome = self.service.score(self._prompt_input(prompt), list(choices), unconditional=unconditional)
        except (ServiceUnavailable, CallCancelled) as err:
            raise BackendError(f"the embedded runtime could not score: {err}") from None
        results = [ChoiceLogprobs(token_logprobs=c.token_logprobs, unconditional_logprobs=c.unconditional_logprobs)
                   for c in outcome.choices]
        meta = CallMeta(prompt_tokens=outcome.prompt_tokens, cached_tokens=outcome.cached_tokens,
                        latency_s=time.perf_counter() - t0)
        return ScoreResult(results, meta)

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        text = self._text(prompt)
        if not text:
            return CallMeta()
        t0 = time.perf_counter()
        out = self._run(text, SamplingParams(max_new_tokens=0))
        return CallMeta(out.prompt_tokens, out.cached_tokens, 0, out.finish_reason, time.perf_counter() - t0)

    def flush_cache(self) -> bool:
        return bool(self.engine.flush_cache())

    def close(self) -> None:
        if self._owns_engine:
            self.engine.shutdown()

    # ----- SGLang's Runtime API (sgl.Runtime() returns this backend) -----
    def shutdown(self) -> None:
        """SGLang's `Runtime.shutdown()`: stop the engine this backend started."""
        self.close()

    @property
    def endpoint(self) -> "EngineBackend":
        """SGLang's `Runtime.endpoint` (the backend to call); the embedded runtime is its own."""
        return self

    def get_tokenizer(self) -> Any:
        """The model's tokenizer (`encode`, `decode`, `apply_chat_template`), as SGLang's Runtime gives."""
        return self.engine.tokenizer

    # ----- helpers -----
    def _run(self, text: str, sampling: Any) -> Any:
        rid = self.engine.submit(text, sampling)
        try:
            self._wait_started()
        except BackendError:
            self.engine.abort(rid, "timed out")
            raise
        try:
            out = self.engine.wait(rid, timeout=self.timeout)
        except TimeoutError:
            self.engine.abort(rid, "timed out")
            raise BackendError(f"the embedded runtime gave no answer within {self.timeout:g} s") from None
        reason = out.finish_reason or {}
        if reason.get("type") == "abort":
            raise BackendError(f"the runtime aborted the request: {reason.get('message') or 'no reason given'}")
        return out

    @staticmethod
    def _prompt_input(prompt: Prompt) -> PromptInput:
        """The prompt as the service takes it: images become placeholders (the model is text-only)."""
        return PromptInput(text=prompt.text, images=tuple(prompt.images), image_mode="placeholder")

    def _text(self, prompt: Prompt) -> str:
        """The prompt text the model sees: each image marker becomes ``<image: NAME>`` (the model
        is text-only), exactly as the gRPC server's default image mode does."""
        if not prompt.images and IMAGE_MARKER not in prompt.text:
            return prompt.text
        text, _ = resolve_prompt(self._prompt_input(prompt))
        return text  # type: ignore[return-value]

    def _wait_started(self) -> None:
        # NOTE: never drive a not-yet-started engine from here: concurrent callers would step it at once.
        if not self._started.wait(self.timeout):
            raise BackendError(f"the embedded runtime was not started within {self.timeout:g} s")

    def _sampling_params(self, params: GenParams) -> SamplingParams:
        kwargs = sampling_kwargs(params)
        kwargs.update({k: getattr(params, k) for k in ("regex", "json_schema", "fsm") if getattr(params, k) is not None})
        return SamplingParams(**kwargs)  # NOTE: the engine compiles the constraint once (its GrammarCache)
