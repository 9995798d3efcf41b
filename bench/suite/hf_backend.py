"""HFPerCallBackend: the "Hugging Face transformers, one model call per LM call" baseline.

The SGLang paper's baseline system: every gen and every select is its own model call that
recomputes its whole prompt; nothing is reused between calls (no prefix cache, no batching,
one call at a time behind a lock). The model is transformers' own implementation
(``AutoModelForCausalLM``, a ``LlamaForCausalLM`` for SmolLM2) over the same weights and dtype our
engine loads (a GGUF's decoded to float: ``bench/hf_reference.py``), so the two systems do the
same model work.

Semantics mirror :class:`sglc_runtime.server.engine_backend.EngineBackend`:

- token ids come from our runtime Tokenizer on the same folder (identical prompts);
- GenParams become the runtime's SamplingParams (same defaults and validation); the output is
  assembled by the runtime's TextStream, so text, stop strings, stop token ids, eos /
  ignore_eos (do not stop at eos; eos is not banned) and finish reasons match the engine;
- regex / json_schema / fsm constraints mask the logits token by token with our FSM token index
  (a per-backend GrammarCache); no jump-forward;
- score: one full forward of prompt + choice per choice (tokenized together; the choice's
  tokens start where that tokenization departs from the prompt's, as ``Engine.score``);
  unconditional logprobs score the choice's tokens after one start token (BOS, else EOS);
- cache_prefix: a hint this system cannot use; it reports the prompt's tokens and runs nothing.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Optional

import torch

from bench.suite.hf_logits import CallDecoding, ConstraintAbort
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
from sglc.executor.errors import BackendError
from sglc.wire import sampling_table
from sglc_runtime.cache.token_prefix import common_prefix_len


class HFPerCallBackend(Backend):
    """A Backend over transformers' model; one call at a time, each recomputing its prompt.

    ``dtype``: torch dtype name ("float32" to compare with ``Engine(dtype="float32")``);
    ``model_path``: a model folder or name for ``resolve_model_path`` (None: the default model).
    Thread-safe: calls from many threads queue on one lock.
    """

    def __init__(self, dtype: str = "float32", model_path: Optional[str] = None, *, device: str = "cpu") -> None:
        from bench.hf_reference import hf_causal_lm
        from sglc_runtime.model.default_model import gguf_source, resolve_model_path
        from sglc_runtime.model.tokenizer import Tokenizer

        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ValueError(f"HFPerCallBackend: unknown dtype {dtype!r} (use e.g. 'float32' or 'bfloat16')")
        self.path = Path(resolve_model_path(model_path))
        self.tokenizer = Tokenizer(self.path)
        self.model = hf_causal_lm(self.path, torch_dtype, gguf=gguf_source(model_path)).to(device)
        # NOTE: generate() fills a None field of the per-call GenerationConfig from the model's own
        # generation_config, which names eos: without this, ignore_eos would still stop at eos.
        self.model.generation_config.eos_token_id = None
        self.device = torch.device(device)
        cfg = self.model.config
        hf_eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
        self.eos_token_ids = tuple(sorted(set(self.tokenizer.stop_token_ids) | {int(t) for t in hf_eos if t is not None}))
        self.max_context = int(cfg.max_position_embeddings)
        self.vocab_size = int(cfg.vocab_size)
        self._lock = threading.Lock()  # NOTE: one model call at a time; also guards the counters
        self._info_lock = threading.Lock()
        self._info: Optional[ModelInfo] = None
        self._grammars: Any = None
        self._counts = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "forward_s": 0.0}

    # ----- facts -----
    def model_info(self) -> ModelInfo:
        with self._info_lock:
            if self._info is None:
                from sglc.wire.chat_template import derive_chat_template

                tok = self.tokenizer
                template = None
                if getattr(tok, "chat_template", None):  # NOTE: the derivation EngineBackend uses
                    template = derive_chat_template(
                        lambda messages, add_generation_prompt=False: tok.apply_chat_template(
                            messages, add_generation_prompt=add_generation_prompt))
                self._info = ModelInfo(model=self.path.name, context_length=self.max_context, chat_template=template)
            return self._info

    def metrics(self) -> dict[str, Any]:
        """Counters since construction: calls answered (gen + select), prompt tokens the model
        computed (all of them: nothing is reused), completion tokens, seconds in the model."""
        with self._lock:
            return dict(self._counts)

    # ----- calls -----
    def generate(self, prompt: Prompt, params: GenParams) -> GenResult:
        sampling = self._sampling_params(params)
        ids = self._encode(self._text(prompt))
        if len(ids) + max(sampling.max_new_tokens, 1) > self.max_context:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens {sampling.max_new_tokens} exceeds "
                             f"the context of {self.max_context} tokens")
        grammar = self._grammar(params)
        call = CallDecoding(self.tokenizer, sampling, self.eos_token_ids, ids, grammar)
        t0 = time.perf_counter()
        with self._lock:
            t1 = time.perf_counter()
            if not call.finished and sampling.max_new_tokens > 0:
                try:
                    self._run_generate(ids, sampling, call)
                except ConstraintAbort as err:
                    raise BackendError(f"the HF baseline aborted the request: {err}") from None
            forward_s = time.perf_counter() - t1
            text, reason = call.result()
            self._count(1, len(ids), len(call.output_ids), forward_s)
        meta = CallMeta(prompt_tokens=len(ids), cached_tokens=0, completion_tokens=len(call.output_ids),
                        finish_reason=reason, latency_s=time.perf_counter() - t0)
        return GenResult(text, meta)

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        text = self._text(prompt)
        if not text:
            raise ValueError("select needs a non-empty prompt to score choices after")
        prompt_ids = self._encode(text)
        fulls = []
        for c in choices:
            full = self._encode(text + c)
            start = common_prefix_len(prompt_ids, full)
            if start >= len(full):
                raise ValueError(f"continuation {c!r} adds no token to the prompt")
            fulls.append((full, max(start, 1)))
        t0 = time.perf_counter()
        results: list[ChoiceLogprobs] = []
        with self._lock:
            t1 = time.perf_counter()
            computed = 0
            for full, start in fulls:  # NOTE: one forward per choice, the prompt recomputed each time
                results.append(ChoiceLogprobs(token_logprobs=self._forward_logprobs(full, start)))
                computed += len(full)
            if unconditional:
                begin = self._start_token()
                for r, (full, start) in zip(results, fulls):
                    alone = [begin] + full[start:]
                    r.unconditional_logprobs = self._forward_logprobs(alone, 1)
                    computed += len(alone)
            self._count(1, computed, 0, time.perf_counter() - t1)
        return ScoreResult(results, CallMeta(prompt_tokens=len(prompt_ids), cached_tokens=0,
                                             latency_s=time.perf_counter() - t0))

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        """A no-op: this system keeps nothing between calls (reports the prompt's length)."""
        text = self._text(prompt)
        return CallMeta(prompt_tokens=len(self._encode(text)) if text else 0)

    def close(self) -> None:
        return None

    # ----- model work (callers hold the lock) -----
    def _run_generate(self, ids: list[int], sampling: Any, call: CallDecoding) -> None:
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        greedy = sampling.is_greedy
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens, do_sample=not greedy,
            # NOTE: stopping is CallDecoding's job (eos, ignore_eos, stop ids/strings, constraint).
            eos_token_id=None, pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
            else self.eos_token_ids[0],
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy or sampling.top_p >= 1.0 else sampling.top_p,
            top_k=None if greedy or sampling.top_k < 0 else sampling.top_k,
            min_p=None if greedy or sampling.min_p <= 0.0 else sampling.min_p,
        )
        if not greedy and sampling.top_k < 0:
            config.top_k = 0  # NOTE: HF's default top_k is 50; ours is off
        if not greedy and sampling.seed is not None:
            torch.manual_seed(sampling.seed)  # under the lock: no other call uses the global generator now
        processor = call.logits_processor()
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self.model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config,
                logits_processor=LogitsProcessorList([processor] if processor is not None else []),
                stopping_criteria=StoppingCriteriaList([call.stopping_criteria()]),
            )

    def _forward_logprobs(self, ids: list[int], start: int) -> list[float]:
        """Logprobs of ids[start:] from one forward."""
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids).logits[0, start - 1 : len(ids) - 1].float()
        logp = torch.log_softmax(logits, dim=-1)
        targets = input_ids[0, start:].view(-1, 1)
        return logp.gather(1, targets).view(-1).tolist()

    # ----- helpers -----
    def _count(self, calls: int, prompt_tokens: int, completion_tokens: int, forward_s: float) -> None:
        c = self._counts
        c["calls"] += calls
        c["prompt_tokens"] += prompt_tokens
        c["completion_tokens"] += completion_tokens
        c["forward_s"] += forward_s

    def _encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text)
        if not ids:
            raise ValueError("prompt is empty: it must have at least one token")
        return ids

    @staticmethod
    def _text(prompt: Prompt) -> str:
        """The prompt text: image markers become ``<image: NAME>``, as EngineBackend does."""
        from sglc.wire.prompt import IMAGE_MARKER, PromptInput, resolve_prompt

        if not prompt.images and IMAGE_MARKER not in prompt.text:
            return prompt.text
        text, _ = resolve_prompt(PromptInput(text=prompt.text, images=tuple(prompt.images), image_mode="placeholder"))
        return text  # type: ignore[return-value]

    @staticmethod
    def _sampling_params(params: GenParams) -> Any:
        """The runtime's SamplingParams for `params` (same defaults and checks as the engine)."""
        from sglc_runtime.sampling.sampling_params import SamplingParams

        return SamplingParams(**sampling_table.set_fields(params))  # NOTE: the one GenParams -> runtime mapping

    def _grammar(self, params: GenParams) -> Any:
        """The compiled constraint of `params` (None without one); ValueError naming a bad one."""
        from sglc_runtime.constrained import ConstraintSpec, GrammarCache

        spec = ConstraintSpec.of(fsm=params.fsm, regex=params.regex, json_schema=params.json_schema)
        if spec is None:
            return None
        with self._info_lock:
            if self._grammars is None:
                self._grammars = GrammarCache(self.tokenizer, device=self.device)
            grammars = self._grammars
        try:
            return grammars.get(spec)
        except ValueError as err:
            raise ValueError(f"GenParams.{spec.kind}: {err}") from err

    def _start_token(self) -> int:
        for candidate in (self.tokenizer.bos_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0
