"""POST /generate in SGLang's wire format: validate everything, then submit every engine request.

Order of work (every check before the work it bounds): the body's fields (sglang_request.py:
unknown fields, types, unsupported values -> 400 naming the field); the prompts' shape and
count; ``n`` (max_n) and prompts x n (max_batch); the program hints (``program_hint``: one for
the call or one per prompt); each prompt's size (before tokenizing); each
prompt's sampling parameters (stop strings, stop_regex, top_logprobs_num limits, then constraint
compilation); only then the engine requests, as one CallGroup (a refused one cancels the others;
a client that goes away cancels all).

Answer order is SGLang's: prompt-major, the n samples of a prompt next to each other; a single
prompt with n > 1 answers a list, like a batch.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable

from sglc.wire.program_hint import ProgramHint
from sglc.wire.prompt import PromptInput

from . import openai_protocol as proto
from .calls import CallGroup
from .http_call import Started, finished
from .service import RequestError, RuntimeService
from .sglang_meta import LogprobOptions, final_meta
from .sglang_request import FieldError, SglangGenerateRequest, SglangSamplingParams, parse_model
from .sglang_stream import sglang_events

__all__ = ["SglangGenerate"]


class SglangGenerate:
    """The /generate endpoint body over RuntimeService (blocking: run it in the thread pool)."""

    def __init__(self, service: RuntimeService, decode_one: Callable[[int], str]) -> None:
        self.svc = service
        self.limits = service.limits
        self.decode_one = decode_one

    def start(self, body: dict) -> Started:
        started_at = time.monotonic()
        req, prompts, batch, sampling = self._validate(body)
        fanned = batch or sum(sp.num_samples for sp in sampling) > 1
        rids = self._rids(req, sampling, batch)
        hints = self._hints(req, len(prompts), batch)
        if req.program_hint is None:  # NOTE: behind sglang-router a hint rides in the rid (ProgramHint.to_rid)
            hints = [_rid_hint(rid) for rid in rids]
        for i, prompt in enumerate(prompts):  # NOTE: sizes before any constraint compiles
            _named(batch, i, partial(self.svc.resolve, prompt))
        opts, params = self._params(req, sampling, len(prompts), batch)
        jobs = [(i, j) for i in range(len(prompts)) for j in range(sampling[i].num_samples)]
        group = CallGroup()
        calls = group.submit_all(
            [partial(_named, batch, i, partial(self._submit, prompts[i], params[i], rids[i], j, sampling[i].num_samples,
                                               hints[i]))
             for i, j in jobs], "another request of the same /generate call was refused")
        call_opts = [opts[i] for i, _ in jobs]
        answer = partial(self._answer, calls, call_opts, fanned, started_at)
        events = partial(sglang_events, calls, call_opts, fanned, self.decode_one, started_at)
        return Started(group, answer, events)

    def _validate(self, body: dict) -> tuple[SglangGenerateRequest, list[PromptInput], bool,
                                              list[SglangSamplingParams]]:
        """The request's fields, prompts (and whether a batch) and per-prompt sampling parameters,
        with every count limit checked (nothing tokenized yet)."""
        req = parse_model(SglangGenerateRequest, body)
        refusal = req.refusal()
        if refusal is not None:
            raise refusal
        prompts, batch = proto.generate_prompts(body)
        self.limits.check_count("max_batch", "the number of prompts in the batch", prompts)
        per_prompt = batch and isinstance(body.get("sampling_params"), list)
        sampling = []
        for i, item in enumerate(proto.generate_sampling(body.get("sampling_params"), len(prompts), batch)):
            where = "sampling_params" + (f"[{i}]" if per_prompt else "")
            sp = parse_model(SglangSamplingParams, item, where)
            refusal = sp.refusal(where)
            if refusal is not None:
                raise refusal
            self.limits.check_count("max_n", f"'{where}.n'", sp.num_samples)
            sampling.append(sp)
        self.limits.check_count("max_batch", "the number of requests (prompts x n)",
                                sum(sp.num_samples for sp in sampling))
        return req, prompts, batch, sampling

    def _params(self, req: SglangGenerateRequest, sampling: list[SglangSamplingParams], num: int,
                batch: bool) -> tuple[list[LogprobOptions], list[Any]]:
        """Per prompt: what logprobs to answer, and the engine's SamplingParams."""
        with_lp = req.per_prompt("return_logprob", num, batch)
        starts = req.per_prompt("logprob_start_len", num, batch)
        tops = req.per_prompt("top_logprobs_num", num, batch)
        opts, params = [], []
        for i, sp in enumerate(sampling):
            fields = sp.to_engine_fields()
            top = tops[i] or 0
            opt = LogprobOptions(bool(with_lp[i]), top if with_lp[i] else 0, bool(req.return_text_in_logprobs))
            if opt.enabled:
                start = -1 if starts[i] is None else starts[i]
                if top and start >= 0:
                    raise FieldError("top_logprobs_num", "'top_logprobs_num' with 'logprob_start_len' >= 0: this server does not "
                                       "compute top logprobs of prompt positions (input_top_logprobs); ask for "
                                       "one or the other")
                fields.update(return_logprob=True, logprob_start_len=start, top_logprobs_num=top)
            opts.append(opt)
            params.append(_named(batch, i, lambda f=fields: self.svc.sampling_params(**f)))
        return opts, params

    def _rids(self, req: SglangGenerateRequest, sampling: list[SglangSamplingParams], batch: bool) -> list[Any]:
        """Each prompt's client request id (None: the server picks one)."""
        if req.rid is None:
            return [None] * len(sampling)
        rids = req.rid if isinstance(req.rid, list) else [req.rid]
        if (not batch and isinstance(req.rid, list)) or len(rids) != len(sampling):
            raise FieldError("rid", f"'rid' has {len(rids)} ids for {len(sampling)} prompt(s); give one per prompt")
        return rids

    @staticmethod
    def _hints(req: SglangGenerateRequest, num: int, batch: bool) -> list[ProgramHint | None]:
        """Each prompt's program hint: one object for all of them, or (a batch) one object or
        null per prompt; FieldError naming ``program_hint`` (or ``program_hint[i]``) otherwise."""
        value = req.program_hint
        if not isinstance(value, list):
            return [_hint(value, "program_hint")] * num
        if not batch or len(value) != num:
            raise FieldError("program_hint", f"'program_hint' is a list of {len(value)} hints for {num} prompt(s); "
                                             "give one object, or one per prompt of a batch")
        return [_hint(v, f"program_hint[{i}]") for i, v in enumerate(value)]

    def _submit(self, prompt: PromptInput, params: Any, rid: str | None, j: int, n: int,
                hint: ProgramHint | None) -> Any:
        # NOTE: with n > 1 each sample gets RID_j, so /abort_request with RID aborts all of them.
        return self.svc.generate(prompt, params, rid=None if rid is None else (rid if n == 1 else f"{rid}_{j}"),
                                 hint=hint)

    def _answer(self, calls: list, opts: list[LogprobOptions], fanned: bool, started_at: float) -> Any:
        latency = time.monotonic() - started_at
        answers = []
        for call, opt in zip(calls, opts):
            out = finished(call)
            answers.append({"text": out.text, "output_ids": list(out.token_ids),
                            "meta_info": final_meta(out, call.rid, opt, self.decode_one, e2e_latency=latency,
                                                    warnings=call.warnings)})
        return answers if fanned else answers[0]


def _hint(value: Any, where: str) -> ProgramHint | None:
    """A program hint from its JSON (null: none); FieldError naming `where` when it is invalid."""
    if value is None:
        return None
    try:
        return ProgramHint.from_json(value, where)
    except (ValueError, TypeError) as err:
        message = str(err)
        raise FieldError(where, message if message.startswith(where) else f"'{where}': {message}") from None


def _rid_hint(rid: Any) -> ProgramHint | None:
    """The program hint a request id carries (None for other ids); FieldError naming ``rid``."""
    try:
        return ProgramHint.from_rid(rid)
    except (ValueError, TypeError) as err:
        raise FieldError("rid", str(err)) from None


def _named(batch: bool, i: int, fn: Callable[[], Any]) -> Any:
    """fn(); in a batch, a RequestError names the prompt it is about."""
    try:
        return fn()
    except RequestError as err:
        if not batch:
            raise
        raise RequestError(f"batch prompt {i}: {err}") from None
