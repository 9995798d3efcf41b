"""OpenAIBackend: the executor's Backend over any OpenAI-compatible HTTP endpoint (`openai` package).

    backend = OpenAIBackend("http://127.0.0.1:30001", model="SmolLM2-135M-Instruct")
    backend.generate(Prompt("Hello"), GenParams(max_new_tokens=8, temperature=0)).text

Two model types:

- ``"completion"``: ``/v1/completions`` on the stream's text. The roles' text comes from the
  server's chat template when the endpoint is an ``sglc serve`` (read from ``/get_model_info``),
  so a program sees the same prompt text as with the srt backend.
- ``"chat"``: ``/v1/chat/completions`` on the stream's messages (roles -> messages). A gen must
  start an assistant turn (chat APIs cannot continue a partial assistant message).

``model_type="auto"`` picks chat for OpenAI's chat model names (gpt-3.5*, gpt-4*, o1*, ...) and
completion otherwise. ``select`` scores each choice with prompt logprobs (``echo=True,
logprobs=1, max_tokens=0`` on prompt+choice, all choices in one call); chat endpoints return no
prompt logprobs, so select raises a BackendError saying so. Constraints: a JSON schema goes as
``response_format`` json_schema; a regex (or a compiled FSM, by its pattern) goes as the
``regex`` extension field and a grammar (gen ``ebnf`` / ``grammar`` / ``lark``, as GBNF text) as
the ``ebnf`` one, which only sglc/SGLang servers understand — elsewhere the call raises a
BackendError naming the unsupported constraint. A recursive JSON schema (lowered to a grammar at
compile time) goes to other endpoints as the schema, in ``response_format``.

API speculative execution (api_speculative.py; completion and chat models): per program run.
The executor asks ``new_speculation(n)`` for a fresh state when a run starts (``n`` from
``@sgl.function(num_api_spec_tokens=N)``, else the backend's default: the constructor's
``num_api_spec_tokens`` or ``enable_api_speculation(N)``) and passes it to every
``generate(..., speculation=state)`` of that run, so concurrent programs with different settings
share this backend without interfering. A ``generate`` call without a state never speculates.
Chat models speculate inside one assistant turn: the turn's first gen asks for the whole turn,
later gens of the turn are matched from it (a miss there is the usual "cannot continue the
partial assistant message" error). ``num_api_calls`` counts the requests made.

The key comes from ``OPENAI_API_KEY`` (any value works for ``sglc serve``). Thread-safe (one
``openai.OpenAI`` client; httpx pools connections). Every failure -> ``BackendError`` (one line).
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from sglc.executor.backends.api_speculative import SpeculativeCache
from sglc.executor.errors import BackendError
from sglc.wire import sampling_table
from sglc.wire.backend import (Backend, CallMeta, ChatTemplate, ChoiceLogprobs, GenParams, GenResult, ModelInfo,
                               Prompt, ScoreResult)

__all__ = ["OpenAIBackend", "base_url_of"]

_CHAT_MODEL_PREFIXES = ("gpt-3.5", "gpt-4", "gpt-5", "o1", "o3", "o4", "chatgpt")


def base_url_of(endpoint: Optional[str]) -> str:
    """'127.0.0.1:30001' -> 'http://127.0.0.1:30001/v1'; None -> $OPENAI_BASE_URL or OpenAI's."""
    if endpoint is None or not endpoint.strip():
        return os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
    url = endpoint.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


class OpenAIBackend(Backend):
    """A Backend talking to one OpenAI-compatible endpoint and model.

    NOTE: program hints (``Prompt.hint``, issue 28) are ignored and ``end_program`` is the base
    class's no-op: the OpenAI API has no field for them."""

    def __init__(self, endpoint: Optional[str] = None, model: Optional[str] = None, *, model_type: str = "auto",
                 api_key: Optional[str] = None, timeout: float = 600.0, max_retries: int = 1,
                 num_api_spec_tokens: Optional[int] = None) -> None:
        import openai

        if model_type not in ("auto", "completion", "chat"):
            raise ValueError(f"model_type is 'auto', 'completion' or 'chat', got {model_type!r}")
        self.base_url = base_url_of(endpoint)
        self._openai = openai
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            raise BackendError(f"openai backend {self.base_url}: no API key: set OPENAI_API_KEY "
                               "(any value works for an sglc serve endpoint)")
        self.client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=timeout, max_retries=max_retries)
        self._sglc_info = self._server_info()  # None unless the endpoint is an sglc/SGLang server
        self.model = model if model not in (None, "", "default") else self._first_model()
        if model_type == "auto":
            model_type = "chat" if self.model.lower().startswith(_CHAT_MODEL_PREFIXES) else "completion"
        self.model_type = model_type
        self._info: Optional[ModelInfo] = None
        #: API calls made (every request to the endpoint, model listing excluded).
        self.num_api_calls = 0
        self._count_lock = threading.Lock()
        #: num_api_spec_tokens for runs whose program sets none (None: no speculation by default).
        self.default_num_api_spec_tokens: Optional[int] = None
        if num_api_spec_tokens is not None:
            self.enable_api_speculation(num_api_spec_tokens)

    def enable_api_speculation(self, num_api_spec_tokens: int) -> None:
        """Backend-level default: speculate with N tokens in every run whose program gives no
        ``num_api_spec_tokens`` of its own (a program's own setting always wins)."""
        SpeculativeCache(num_api_spec_tokens)  # NOTE: validates N the same way
        self.default_num_api_spec_tokens = num_api_spec_tokens

    def new_speculation(self, num_api_spec_tokens: Optional[int] = None) -> Optional[SpeculativeCache]:
        """A fresh speculation state for one program run with N (or this backend's default)
        speculative tokens; None when neither is set."""
        n = num_api_spec_tokens if num_api_spec_tokens is not None else self.default_num_api_spec_tokens
        return None if n is None else SpeculativeCache(n)

    # ----- endpoint facts -----
    def _root(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def _get_json(self, path: str, timeout: float = 10.0) -> Any:
        with urllib.request.urlopen(self._root() + path, timeout=timeout) as r:
            return json.loads(r.read())

    def _server_info(self) -> Optional[dict]:
        """sglc's /get_model_info (chat template, context length), or None for other endpoints."""
        try:
            info = self._get_json("/get_model_info")
        except (OSError, ValueError, urllib.error.URLError):
            return None
        return info if isinstance(info, dict) and "context_length" in info else None

    def _first_model(self) -> str:
        models = self._call("list models", lambda: self.client.models.list().data)
        if not models:
            raise BackendError(f"openai backend {self.base_url}: the endpoint lists no models; pass --model")
        return models[0].id

    @property
    def is_sglc(self) -> bool:
        """True when the endpoint is an sglc (or SGLang) server: it understands `regex` and echo scoring."""
        return self._sglc_info is not None

    def model_info(self) -> ModelInfo:
        if self._info is None:
            info, template = self._sglc_info or {}, None
            spec = info.get("chat_template")
            if self.model_type == "completion" and isinstance(spec, dict):
                template = ChatTemplate(dict(spec["role_prefix"]), dict(spec["role_suffix"]),
                                        spec.get("generation_prefix", ""))
            self._info = ModelInfo(model=self.model, context_length=int(info.get("context_length") or 0),
                                   chat_template=template, supports_images=False)
        return self._info

    # ----- calls -----
    def _call(self, what: str, fn: Any) -> Any:
        if what != "list models":
            with self._count_lock:
                self.num_api_calls += 1
        try:
            return fn()
        except self._openai.APIStatusError as err:
            message = err.message
            body = err.body if isinstance(err.body, dict) else {}
            message = (body.get("error") or body).get("message", message) if isinstance(body, dict) else message
            raise BackendError(f"openai backend {self.base_url}: {what} failed: HTTP {err.status_code}: "
                               f"{str(message).splitlines()[0] if message else ''}") from None
        except self._openai.APIError as err:
            raise BackendError(f"openai backend {self.base_url}: {what} failed: {type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''}") from None

    def request_fields(self, params: GenParams) -> dict[str, Any]:
        """OpenAI request fields for one gen (sampling + constraint); BackendError if unsupported."""
        fields: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, row in sampling_table.GEN_FIELDS.items():  # NOTE: spelled as the table's openai column says
            value = getattr(params, key)
            if value is None or not row.openai or (row.kind == "str_list" and not value):
                continue
            if row.kind == "str_list":
                value = [value] if isinstance(value, str) else list(value)
            name = row.openai[0]
            if name in sampling_table.OPENAI_STANDARD:
                fields[name] = value
            elif self.is_sglc:  # NOTE: extensions only sglc/SGLang know
                extra[name] = value
            elif value != row.default:  # NOTE: never dropped silently: it would change the answer
                raise BackendError(f"openai backend {self.base_url}: this endpoint takes no {name!r} (only sglc/SGLang "
                                   f"servers understand that extension); leave it at its default {row.default!r}")
        regex = params.regex if params.regex is not None else (params.fsm or {}).get("pattern")
        if params.fsm is not None and regex is None:
            raise BackendError("openai backend: a compiled FSM constraint without its pattern cannot be sent")
        if params.ebnf is not None:
            if self.is_sglc:
                extra["ebnf"] = params.ebnf
            elif params.ebnf_from_json_schema is not None:  # NOTE: a recursive schema goes as the schema
                self._json_schema_format(params.ebnf_from_json_schema, fields, extra)
            else:  # NOTE: never dropped silently: the output would not match the grammar
                raise BackendError(f"openai backend {self.base_url}: this endpoint takes no grammar constraint "
                                   "(gen ebnf= / grammar= / lark=; only sglc/SGLang servers understand the `ebnf` "
                                   "extension)")
        elif params.json_schema is not None:
            self._json_schema_format(params.json_schema, fields, extra)
        elif regex is not None:
            if not self.is_sglc:
                raise BackendError(f"openai backend {self.base_url}: this endpoint takes no regex constraint "
                                   "(only sglc/SGLang servers understand the `regex` extension)")
            extra["regex"] = regex
        if extra:
            fields["extra_body"] = extra
        return fields

    def _json_schema_format(self, schema: str, fields: dict[str, Any], extra: dict[str, Any]) -> None:
        """A JSON schema (text) as ``response_format``: a chat field, or sglc's completions extension."""
        fmt = {"type": "json_schema", "json_schema": {"name": "output", "schema": json.loads(schema)}}
        if self.model_type == "chat":
            fields["response_format"] = fmt
        elif self.is_sglc:  # NOTE: OpenAI's completions API has no response_format; sglc's does
            extra["response_format"] = fmt
        else:
            raise BackendError(f"openai backend {self.base_url}: a completions endpoint takes no JSON schema "
                               "constraint (only chat models or sglc/SGLang servers do)")

    @staticmethod
    def prompt_text(prompt: Prompt) -> str:
        """The completion prompt: images (text-only over this protocol) become ``<image: NAME>``
        at their markers, the same text the srt backend sends."""
        if not prompt.images:
            return prompt.text
        from sglc.wire.prompt import PromptInput, RequestError, resolve_prompt

        try:
            text, _ = resolve_prompt(PromptInput(text=prompt.text, images=tuple(prompt.images),
                                                 image_mode="placeholder"))
        except RequestError as err:
            raise BackendError(f"openai backend: {err}") from None
        return str(text)

    def generate(self, prompt: Prompt, params: GenParams,
                 speculation: Optional[SpeculativeCache] = None) -> GenResult:
        """One gen; with a run's `speculation` state, answered from its surplus when it can be."""
        if speculation is not None:
            return speculation.generate(self.speculation_key(prompt), params,
                                        lambda p, want_tokens: self._generate(prompt, p, want_tokens))
        return self._generate(prompt, params)[0]

    def speculation_key(self, prompt: Prompt) -> str:
        """The text a speculative surplus continues: the completion prompt, or (chat) the earlier
        messages plus the open assistant turn's content so far."""
        if self.model_type != "chat":
            return self.prompt_text(prompt)
        messages = [dict(m) for m in prompt.messages] or [{"role": "user", "content": prompt.text}]
        content: Any = ""
        if messages[-1].get("role") == "assistant":
            content = messages.pop().get("content") or ""
        tail = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        return json.dumps(messages, sort_keys=True) + "\x00" + tail

    def _generate(self, prompt: Prompt, params: GenParams,
                  want_tokens: bool = False) -> tuple[GenResult, Optional[list[str]]]:
        """One request; with `want_tokens` it asks for logprobs and returns the generated tokens' texts."""
        fields = self.request_fields(params)
        t0 = time.perf_counter()
        tokens: Optional[list[str]] = None
        if self.model_type == "chat":
            messages = self.chat_messages(prompt)
            if want_tokens:
                fields["logprobs"] = True
            r = self._call("chat completion", lambda: self.client.chat.completions.create(
                model=self.model, messages=messages, **fields))
            text = r.choices[0].message.content or ""
            content = getattr(r.choices[0].logprobs, "content", None)
            if want_tokens and content is not None:
                tokens = [c.token for c in content]
        else:
            if want_tokens:
                fields["logprobs"] = 0  # NOTE: 0 = no alternatives, but the tokens are listed
            r = self._call("completion", lambda: self.client.completions.create(
                model=self.model, prompt=self.prompt_text(prompt), **fields))
            text = r.choices[0].text
            lp = r.choices[0].logprobs
            if want_tokens and lp is not None and lp.tokens is not None:
                tokens = list(lp.tokens)
        return GenResult(text, self._meta(r, time.perf_counter() - t0, r.choices[0].finish_reason)), tokens

    @staticmethod
    def chat_messages(prompt: Prompt) -> list[dict[str, Any]]:
        """The prompt's messages for a chat API: the open assistant turn (empty) is dropped."""
        messages = [dict(m) for m in prompt.messages]
        if not messages:
            if prompt.text:
                return [{"role": "user", "content": prompt.text}]
            raise BackendError("openai backend (chat model): the prompt has no messages")
        last = messages[-1]
        if last.get("role") == "assistant":
            if last.get("content"):
                raise BackendError("openai backend (chat model): a gen must start the assistant turn; chat APIs "
                                   f"cannot continue the partial assistant message {str(last['content'])[:40]!r}")
            messages.pop()
        return messages

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        """Logprobs of each choice after the prompt: one completions call with echo on prompt+choice."""
        if self.model_type == "chat":
            raise BackendError(f"openai backend {self.base_url}: select needs the prompt's token logprobs, and a "
                               f"chat endpoint does not return them (model {self.model!r} is a chat model); use a "
                               "completion model (model_type='completion') or a gen with a regex")
        if unconditional:
            raise BackendError("openai backend: unconditional_likelihood_normalized select is not supported "
                               "(no BOS-only scoring over the OpenAI protocol); use another choices_method")
        t0 = time.perf_counter()
        text = self.prompt_text(prompt)
        r = self._call("score (echo logprobs)", lambda: self.client.completions.create(
            model=self.model, prompt=[text + c for c in choices], echo=True, logprobs=1, max_tokens=0))
        out: list[Optional[ChoiceLogprobs]] = [None] * len(choices)
        for choice in r.choices:
            lp = choice.logprobs
            if lp is None or not lp.token_logprobs or lp.text_offset is None:
                raise BackendError(f"openai backend {self.base_url}: select needs echo=True prompt logprobs, and "
                                   "this endpoint returned none (it does not support echo with logprobs)")
            start = len(text)
            # NOTE: the choice's tokens are those ending past the prompt text (a token that
            # straddles the boundary belongs to the choice, as in Engine.score).
            values = [float(x) for tok, off, x in zip(lp.tokens, lp.text_offset, lp.token_logprobs)
                      if off + len(tok) > start and x is not None]
            out[choice.index] = ChoiceLogprobs(token_logprobs=values)
        if any(c is None for c in out):
            raise BackendError(f"openai backend {self.base_url}: score returned {len(r.choices)} of "
                               f"{len(choices)} choices")
        return ScoreResult(list(out), self._meta(r, time.perf_counter() - t0, None))  # type: ignore[arg-type]

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        """No prefix hint over the OpenAI protocol (servers cache prefixes by themselves)."""
        return CallMeta()

    def metrics(self) -> dict[str, Any]:
        """The sglc server's counters (/get_server_info), or {} for other endpoints."""
        if not self.is_sglc:
            return {}
        try:
            return dict(self._get_json("/get_server_info").get("metrics", {}))
        except (OSError, ValueError, urllib.error.URLError):
            return {}

    def close(self) -> None:
        self.client.close()

    @staticmethod
    def _meta(r: Any, latency: float, finish: Optional[str]) -> CallMeta:
        u = getattr(r, "usage", None)
        details = getattr(u, "prompt_tokens_details", None)
        return CallMeta(prompt_tokens=int(getattr(u, "prompt_tokens", 0) or 0),
                        cached_tokens=int(getattr(details, "cached_tokens", 0) or 0),
                        completion_tokens=int(getattr(u, "completion_tokens", 0) or 0),
                        finish_reason={"type": finish} if finish else None, latency_s=latency)
