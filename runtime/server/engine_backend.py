"""EngineBackend: the embedded runtime — our engine in this process, driven by its own thread.

It implements the executor's Backend interface (:mod:`sglc.wire.backend`, the contract), so the
runtime imports only sglc.wire and the executor never imports the runtime; ``sglc.backends``
(the composition root) builds it for ``make_backend("engine")``.

``sglc run --backend srt`` without ``--endpoint`` and ``sgl.Runtime()`` use it, so a program
runs with nothing else started. The engine runs in background-thread mode (``Engine.start``):
any executor thread submits a request and waits for it, with a deadline.

Every call goes through the servers' own code, :class:`RuntimeService` over the same engine (a
thin client of it, as the gRPC and HTTP servers are thin adapters), so these exist once:

- generate: the service's prompt resolution (images: the model is text-only, so each becomes
  ``<image: NAME>`` at its marker, as the gRPC server's default image mode), request limits
  (ServerLimits' defaults), sampling validation and constraint compilation (a compiled FSM from
  the lower_constraints pass, a regex or a JSON schema: the engine compiles each once);
- score: one batched prefill sharing the prompt, unconditional logprobs (the choice tokens after
  the start token: the model's BOS, else its first EOS);
- cache_prefix: the service's prefill-only request (max_new_tokens=0); the radix cache keeps it;
- program hints (issue 28): each call passes ``prompt.hint`` on (its lease capped to
  ServerLimits.max_hint_lease_ms, as a server does); ``end_program`` releases a program's prefixes;
- model info, with the chat template's split.

What the backend adds: a deadline per call (the call is cancelled when it passes) and
``start=False`` (calls queue until ``start()``).
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
    logprob_meta,
)
from sglc.wire.prompt import PromptInput

from ..engine import Engine
from .calls import CallCancelled, GenerateCall
from .service import RuntimeService, ServiceUnavailable

#: Seconds one engine call may take before it is aborted and reported (CPU decoding is slow).
DEFAULT_CALL_TIMEOUT = 600.0

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
        #: The transport-neutral service the gRPC and HTTP servers adapt; here, in process (calls
        #: may queue before the engine starts: start=False).
        self.service = RuntimeService(self.engine, require_running=False)
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
        return self._generate(prompt, params, None)

    def generate_stream(self, prompt: Prompt, params: GenParams, on_text: Callable[..., None]) -> GenResult:
        """`generate`, each decoded piece and its meta (tokens so far, logprobs when asked) handed
        to `on_text` as the engine produces it."""
        return self._generate(prompt, params, on_text)

    def _generate(self, prompt: Prompt, params: GenParams, on_text: Optional[Callable[..., None]]) -> GenResult:
        t0 = time.perf_counter()
        sampling = self.service.sampling_params(**self._sampling_fields(params))
        call = self._once_started(self.service.generate(self._prompt_input(prompt), sampling, hint=prompt.hint))
        produced = [0]
        top = params.logprobs.top_logprobs_num if params.logprobs is not None else 0

        def on_chunk(chunk: Any) -> None:
            produced[0] += len(chunk.token_ids)
            meta: dict[str, Any] = {"completion_tokens": produced[0]}
            if params.logprobs is not None:
                lp = logprob_meta(chunk.token_ids, chunk.logprobs, chunk.top_logprobs, top_logprobs_num=top)
                meta.update({k: v for k, v in lp.items() if not k.startswith("input_")},
                            output_token_logprobs_length=produced[0])
            on_text(chunk.text, meta)

        out = self.service.final_output(call, None if on_text is None else on_chunk, self._deadline())
        if out is None:
            raise BackendError(f"the embedded runtime gave no answer within {self.timeout:g} s")
        reason = out.finish_reason or {}
        if reason.get("type") == "abort":
            raise BackendError(f"the runtime aborted the request: {reason.get('message') or 'no reason given'}")
        meta = CallMeta(out.prompt_tokens, out.cached_tokens, out.completion_tokens, out.finish_reason,
                        time.perf_counter() - t0)
        if params.logprobs is not None:
            meta.logprobs = logprob_meta(out.token_ids, out.output_logprobs, out.output_top_logprobs, out.input_logprobs,
                                         out.input_token_ids, top)
        return GenResult(out.text, meta)

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        if not prompt.text and not prompt.images:
            raise ValueError("select needs a non-empty prompt to score choices after")
        self._wait_started()
        t0 = time.perf_counter()
        try:
            outcome = self.service.score(self._prompt_input(prompt), list(choices), unconditional=unconditional,
                                         hint=prompt.hint)
        except (ServiceUnavailable, CallCancelled) as err:
            raise BackendError(f"the embedded runtime could not score: {err}") from None
        results = [ChoiceLogprobs(token_logprobs=c.token_logprobs, unconditional_logprobs=c.unconditional_logprobs)
                   for c in outcome.choices]
        meta = CallMeta(prompt_tokens=outcome.prompt_tokens, cached_tokens=outcome.cached_tokens,
                        latency_s=time.perf_counter() - t0)
        return ScoreResult(results, meta)

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        if not prompt.text and not prompt.images:
            return CallMeta()
        t0 = time.perf_counter()
        try:
            prompt_tokens, cached, _ = self.service.cache_prefix(self._prompt_input(prompt), started=self._once_started,
                                                                 is_active=self._deadline(), hint=prompt.hint)
        except CallCancelled:
            raise BackendError(f"the embedded runtime gave no answer within {self.timeout:g} s") from None
        except (ServiceUnavailable, RuntimeError) as err:
            raise BackendError(f"the embedded runtime could not cache the prefix: {err}") from None
        # NOTE: a prefill-only request always finishes so: by length, nothing generated
        return CallMeta(prompt_tokens, cached, 0, {"type": "length", "length": 0}, time.perf_counter() - t0)

    def end_program(self, program_id: str) -> int:
        """The program run ended: the engine releases its hinted prefixes; returns the cached
        tokens released. An invalid id (the caller's bug) raises RequestError naming it."""
        return self.service.end_program(program_id)

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

    def get_model_name(self) -> str:
        """The model's path (SGLang's ``RuntimeEndpoint.get_model_name()``: what its tokenizer loads from)."""
        return self.service.model_info().model_path or self.model_info().model

    def get_tokenizer(self) -> Any:
        """The model's tokenizer (`encode`, `decode`, `apply_chat_template`), as SGLang's Runtime gives."""
        return self.engine.tokenizer

    # ----- helpers -----
    def _once_started(self, call: GenerateCall) -> GenerateCall:
        """`call` (just submitted), once the engine runs (start=False: it waits queued); cancelled
        when the engine does not start in time."""
        try:
            self._wait_started()
        except BackendError:
            call.cancel("timed out")
            raise
        return call

    def _deadline(self) -> Callable[[], bool]:
        """is_active for one call: True until the call's timeout has passed."""
        if self.timeout is None:
            return lambda: True
        deadline = time.monotonic() + self.timeout
        return lambda: time.monotonic() < deadline

    @staticmethod
    def _prompt_input(prompt: Prompt) -> PromptInput:
        """The prompt as the service takes it: images become placeholders (the model is text-only)."""
        return PromptInput(text=prompt.text, images=tuple(prompt.images), image_mode="placeholder")

    def _wait_started(self) -> None:
        # NOTE: never drive a not-yet-started engine from here: concurrent callers would step it at once.
        if not self._started.wait(self.timeout):
            raise BackendError(f"the embedded runtime was not started within {self.timeout:g} s")

    @staticmethod
    def _sampling_fields(params: GenParams) -> dict[str, Any]:
        """The runtime SamplingParams fields of a gen, its constraint included (the engine compiles
        a constraint once: its GrammarCache)."""
        fields = sampling_table.set_fields(params)
        fields.update({k: getattr(params, k) for k in ("regex", "json_schema", "fsm", "ebnf") if getattr(params, k) is not None})
        if params.logprobs is not None:  # NOTE: the SamplingParams fields of a gen's logprob request
            fields.update(return_logprob=True, top_logprobs_num=params.logprobs.top_logprobs_num,
                          logprob_start_len=params.logprobs.logprob_start_len)
        return fields
