"""The HTTP endpoints' bodies over RuntimeService, independent of the web framework.

Each endpoint method (``completions``, ``chat``, ``generate``) takes the parsed JSON body,
checks the sizes (ServerLimits) before tokenizing, and submits every engine request the call
needs as one CallGroup (bad requests raise RequestError / HttpError before any byte is sent; a
request the engine refuses cancels the ones already submitted). It returns a :class:`Started`:
wait for it on the event loop, then ``answer()`` (the JSON), or iterate ``events()`` (SSE
strings, an async iterator: no thread waits on generation).
The endpoint methods block (tokenizing): the web layer runs them in its thread pool.
"""
from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any, AsyncIterator

from . import openai_protocol as proto
from .openai_request import parse_chat, parse_completion
from .calls import CallGroup
from .chat_roles import template_roles
from .http_call import HttpError, Started, finished as _finished
from .limits import utf8_or_error
from .public_paths import without_paths
from sglc.wire.prompt import PromptInput
from .request_model import FieldError
from .service import RequestError, RuntimeService, abort_kind
from .sglang_generate import SglangGenerate

__all__ = ["Handlers", "HttpError", "Started"]


def _visible(out: Any) -> tuple[list[int], list[float], Any]:
    """Output token ids, logprobs and top logprobs without a final stop token (whose text is not
    part of the answer), so token texts join to the answer text."""
    ids, lps, tops = list(out.token_ids), list(out.output_logprobs or []), out.output_top_logprobs
    matched = out.finish_reason.get("matched")
    if out.finish_reason.get("type") == "stop" and isinstance(matched, int) and ids and ids[-1] == matched:
        ids, lps, tops = ids[:-1], lps[:len(ids) - 1], None if tops is None else tops[:len(ids) - 1]
    return ids, lps, tops


class Handlers:
    """The endpoint bodies (see the module docstring for what blocks)."""

    def __init__(self, service: RuntimeService, *, expose_paths: bool = False) -> None:
        self.svc = service
        self.expose_paths = expose_paths  # NOTE: False: info endpoints name the model, not its path
        self.limits = service.limits
        self.started = time.time()
        self.sglang = SglangGenerate(service, self.decode_one)
        self._roles: frozenset[str] | None = None  # the chat template's roles (chat_roles.py), read once

    # --- helpers ---
    @property
    def model_name(self) -> str:
        return self.svc.model_info().model_name

    def check_model(self, model: str | None) -> str:
        if model in (None, "", "default", self.model_name):
            return self.model_name
        raise HttpError(404, f"the model {model!r} does not exist; this server serves {self.model_name!r}",
                        code="model_not_found", param="model")

    def decode(self, ids: list[int]) -> str:
        return self.svc.engine.tokenizer.decode(ids)

    def encode(self, text: str) -> list[int]:
        return list(self.svc.engine.tokenizer.encode(text))

    def params(self, fields: dict, logprobs: int | None, echo: bool = False) -> Any:
        if logprobs is not None:
            fields.update(return_logprob=True, top_logprobs_num=logprobs)
            if echo:
                fields["logprob_start_len"] = 0
        return self.svc.sampling_params(**fields)

    # --- OpenAI ---
    def models(self) -> dict:
        info = self.svc.model_info()
        return {"object": "list", "data": [{"id": info.model_name, "object": "model", "created": int(self.started),
                                            "owned_by": "sglc", "max_model_len": info.context_length}]}

    def _logprobs_count(self, value: int | None, name: str) -> int | None:
        """An OpenAI logprobs count (None when absent): an integer in 0..max_top_logprobs."""
        if value is None:
            return None
        if value < 0:
            raise FieldError(name, f"'{name}' must be an integer >= 0, got {value!r}")
        self.limits.check_count("max_top_logprobs", f"'{name}'", value)
        return value

    def completions(self, body: dict) -> Started:
        """Submit every (prompt, n) completion now (so bad requests fail before streaming)."""
        req = parse_completion(body)
        model = self.check_model(req.model)
        n = req.num_choices(self.limits.max_n)
        logprobs = self._logprobs_count(req.logprobs, "logprobs")
        echo = bool(req.echo)
        fields = req.sampling_fields()
        prompts = req.prompts()
        self.limits.check_count("max_batch", f"the number of completions ({len(prompts)} prompts x n={n})",
                                len(prompts) * n)
        names = [f"prompt {i}" if len(prompts) > 1 else "the prompt" for i in range(len(prompts))]
        for name, prompt in zip(names, prompts):  # NOTE: every size checked before anything is tokenized
            self.svc.check_prompt(prompt, name)
        encoded = [prompt if isinstance(prompt, list) else self.encode(prompt) for prompt in prompts]
        for name, ids in zip(names, encoded):  # NOTE: and every length before the constraint compiles
            self.svc.check_prompt(ids, name)
        params = self.params(dict(fields), logprobs, echo)
        group = CallGroup()
        calls = group.submit_all([partial(self.svc.generate, PromptInput(token_ids=ids), params)
                                  for ids in encoded for _ in range(n)])
        pairs = list(zip([ids for ids in encoded for _ in range(n)], calls))  # (prompt ids, call), n per prompt
        opts = {"logprobs": logprobs, "echo": echo, "usage": req.stream_usage}
        return Started(group, partial(self.finish_completions, model, pairs, opts),
                       partial(self.completions_stream, model, pairs, opts))

    async def completions_stream(self, model: str, calls: list, opts: dict) -> AsyncIterator[str]:
        rid = f"cmpl-{uuid.uuid4().hex}"
        tally = [0, 0, 0]
        for index, (ids, call) in enumerate(calls):
            if opts["echo"]:
                yield proto.sse(proto.envelope("text_completion", rid, model, [
                    {"index": index, "text": self.decode(ids), "logprobs": None, "finish_reason": None}]))

            def make(text: str, chunk: Any, finish: str | None, index: int = index) -> dict:
                lp = None if opts["logprobs"] is None or not chunk.logprobs else proto.completion_logprobs(
                    self.decode, chunk.token_ids, chunk.logprobs, chunk.top_logprobs, 0)
                return proto.envelope("text_completion", rid, model,
                                      [{"index": index, "text": text, "finish_reason": finish, "logprobs": lp}])

            async for event in self._stream_call(call, make, tally):
                yield event
        if opts["usage"]:
            yield proto.sse(proto.envelope("text_completion", rid, model, [], proto.usage(*tally)))
        yield proto.sse("[DONE]")

    async def _stream_call(self, call: Any, make: Any, tally: list[int]) -> AsyncIterator[str]:
        """The call's SSE events; its token counts are added to `tally` [prompt, completion, cached]."""
        async for chunk in call.achunks():
            if chunk.finished:
                out = chunk.output
                reason = out.finish_reason
                if reason.get("type") == "abort":
                    yield proto.sse(proto.error_body(str(reason.get("message")), "server_error", code=abort_kind(
                        str(reason.get("message")))))
                    return
                tally[0] += out.prompt_tokens
                tally[1] += out.completion_tokens
                tally[2] += out.cached_tokens
                yield proto.sse(make(chunk.text, chunk, proto.finish_reason(reason)))
            elif chunk.text or chunk.token_ids:
                yield proto.sse(make(chunk.text, chunk, None))

    def _chat_text(self, messages: list[dict]) -> str:
        """The chat template applied to the messages, whose size is checked first."""
        self.limits.check_count("max_messages", "the number of messages", messages)
        size = sum(len(utf8_or_error(f"messages[{i}]", m["role"] + m["content"])) for i, m in enumerate(messages))
        if size > self.limits.max_prompt_bytes:
            raise self.limits.exceeded("max_prompt_bytes", "'messages'", size, " bytes")
        tok = self.svc.engine.tokenizer
        if not tok.chat_template:
            raise RequestError("this model has no chat template; use /v1/completions")
        if self._roles is None:
            self._roles = template_roles(tok.chat_template)
        for i, m in enumerate(messages):
            if m["role"] not in self._roles:
                raise FieldError(f"messages[{i}].role", f"messages[{i}].role {m['role'][:40]!r} is not a role this "
                                 f"model's chat template handles; accepted roles: {', '.join(sorted(self._roles))}")
        try:
            return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as err:  # NOTE: the template may raise on messages it does not accept
            raise RequestError(f"the chat template cannot render these messages: {type(err).__name__}: "
                               f"{str(err).strip()[:200]}") from None

    def chat(self, body: dict) -> Started:
        req = parse_chat(body)
        model = self.check_model(req.model)
        n = req.num_choices(self.limits.max_n)
        want_lp = bool(req.logprobs)
        top = self._logprobs_count(req.top_logprobs, "top_logprobs") or 0
        text = self._chat_text(req.chat_messages())
        params = self.params(req.sampling_fields(), top if want_lp else None)
        group = CallGroup()
        calls = group.submit_all([partial(self.svc.generate, PromptInput(text=text), params) for _ in range(n)])
        opts = {"logprobs": want_lp, "top": top, "usage": req.stream_usage}
        return Started(group, partial(self.finish_chat, model, calls, opts), partial(self.chat_stream, model, calls, opts))

    async def chat_stream(self, model: str, calls: list, opts: dict) -> AsyncIterator[str]:
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        tally = [0, 0, 0]
        for index, call in enumerate(calls):
            yield proto.sse(proto.envelope("chat.completion.chunk", rid, model, [
                {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                 "finish_reason": None}]))

            def make(text: str, chunk: Any, finish: str | None, index: int = index) -> dict:
                return proto.envelope("chat.completion.chunk", rid, model, [
                    {"index": index, "delta": {"content": text} if text else {}, "finish_reason": finish,
                     "logprobs": proto.chat_logprobs(self.decode, chunk.token_ids, chunk.logprobs or [],
                                                     chunk.top_logprobs if opts["top"] else None)
                     if opts["logprobs"] and chunk.logprobs else None}])

            async for event in self._stream_call(call, make, tally):
                yield event
        if opts["usage"]:
            yield proto.sse(proto.envelope("chat.completion.chunk", rid, model, [], proto.usage(*tally)))
        yield proto.sse("[DONE]")

    # --- SGLang native ---
    def generate(self, body: dict) -> Started:
        """Submit a /generate in SGLang's wire format (sglang_generate.py)."""
        return self.sglang.start(body)

    def end_program(self, body: dict) -> dict:
        """POST /end_program ``{"program_id": ID}`` -> ``{"released_tokens": N}`` (issue 28): the
        engine releases what it keeps for the program's hints. 400 naming the field otherwise."""
        unknown = sorted(set(body) - {"program_id"})
        if unknown:
            raise FieldError(unknown[0][:40], f"'{unknown[0][:40]}' is not a field of /end_program "
                                         "(it takes {'program_id': string})")
        if "program_id" not in body:
            raise FieldError("program_id", "/end_program needs 'program_id' (a string)")
        try:
            released = self.svc.end_program(body["program_id"])
        except RequestError as err:
            raise FieldError("program_id", str(err)) from None  # NOTE: its message names program_id
        return {"released_tokens": released}

    def decode_one(self, token_id: int) -> str:
        """One token's text (SGLang's logprob triples decode each token alone)."""
        return self.decode([token_id])

    def model_info(self) -> dict:
        info = self.svc.model_info()
        return self._public({
            "model_path": info.model_path, "model_name": info.model_name, "tokenizer_path": info.model_path,
            "is_generation": True, "context_length": info.context_length, "vocab_size": info.vocab_size,
            "eos_token_ids": list(info.eos_token_ids), "bos_token_id": info.bos_token_id, "dtype": info.dtype,
            "chat_template": None if info.chat_template is None else {
                "role_prefix": dict(info.chat_template.role_prefix),
                "role_suffix": dict(info.chat_template.role_suffix),
                "generation_prefix": info.chat_template.generation_prefix}})

    def _public(self, info: dict) -> dict:
        """`info` with absolute paths shown as the model's name unless --expose-paths (public_paths.py)."""
        return info if self.expose_paths else without_paths(info)

    def sglang_model_info(self) -> dict:
        """/get_model_info: ours plus the fields SGLang's /model_info has (its client reads
        ``model_path`` to pick a chat template; the router reads the rest)."""
        info = self.model_info()
        return {**info, "served_model_name": info["model_name"], "preferred_sampling_params": None,
                "weight_version": "default", "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": getattr(getattr(self.svc.engine.model, "config", None), "model_type", None),
                "architectures": None}

    def load(self) -> list[dict]:
        """/get_load: SGLang's per-data-parallel-rank load (one rank here)."""
        m = self.svc.metrics()
        return [{"dp_rank": 0, "num_reqs": int(m.get("num_active", 0)), "num_waiting_reqs": int(m.get("num_waiting", 0)),
                 "num_tokens": int(m.get("num_used_slots", m.get("num_kv_used", 0)) or 0)}]

    def server_info(self) -> dict:
        cfg = self.svc.engine.config
        fields = {k: getattr(cfg, k) for k in getattr(type(cfg), "__slots__", ()) if not k.startswith("_")}
        return self._public({
            **{k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for k, v in fields.items()},
            "version": "sglc", "max_total_num_tokens": self.svc.metrics().get("num_kv_slots"),
            "dp_size": 1, "tp_size": 1, "model_path": self.svc.model_info().model_path,
            "metrics": self.svc.metrics()})

    def prometheus(self) -> str:
        lines = []
        for name, value in sorted(self.svc.metrics().items()):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            metric = f"sglc_{name}"
            lines += [f"# TYPE {metric} gauge", f"{metric} {float(value):.10g}"]
        return "\n".join(lines) + "\n"

    def finish_completions(self, model: str, calls: list, opts: dict) -> dict:
        """The JSON answer of a non-streamed /v1/completions."""
        choices, pt, ct, cached = [], 0, 0, 0
        for index, (ids, call) in enumerate(calls):
            out = _finished(call)
            pt, ct, cached = pt + out.prompt_tokens, ct + out.completion_tokens, cached + out.cached_tokens
            text, lp = out.text, None
            if opts["echo"]:
                text = self.decode(ids) + text
            if opts["logprobs"] is not None:
                if opts["echo"]:
                    prompt_lp = list(out.input_logprobs or [None] * len(ids))
                    out_ids, out_lps, _ = _visible(out)
                    lp = proto.completion_logprobs(self.decode, ids + out_ids, prompt_lp + out_lps, None, 0)
                else:
                    out_ids, out_lps, tops = _visible(out)
                    lp = proto.completion_logprobs(self.decode, out_ids, out_lps,
                                                   tops if opts["logprobs"] else None, 0)
            choices.append({"index": index, "text": text, "logprobs": lp,
                            "finish_reason": proto.finish_reason(out.finish_reason)})
        return proto.answer("text_completion", f"cmpl-{uuid.uuid4().hex}", model, choices, proto.usage(pt, ct, cached))

    def finish_chat(self, model: str, calls: list, opts: dict) -> dict:
        """The JSON answer of a non-streamed /v1/chat/completions."""
        choices, pt, ct, cached = [], 0, 0, 0
        for index, call in enumerate(calls):
            out = _finished(call)
            pt, ct, cached = pt + out.prompt_tokens, ct + out.completion_tokens, cached + out.cached_tokens
            out_ids, out_lps, tops = _visible(out)
            lp = (proto.chat_logprobs(self.decode, out_ids, out_lps, tops if opts["top"] else None)
                  if opts["logprobs"] else None)
            choices.append({"index": index, "message": {"role": "assistant", "content": out.text},
                            "logprobs": lp, "finish_reason": proto.finish_reason(out.finish_reason)})
        return proto.answer("chat.completion", f"chatcmpl-{uuid.uuid4().hex}", model, choices, proto.usage(pt, ct, cached))
