"""SGLangBackend: the executor's Backend over SGLang's HTTP protocol (`/generate`).

    backend = SGLangBackend("http://127.0.0.1:30000")   # sglang-router, one `sglc serve --http-port`,
    backend.generate(Prompt("Hi"), GenParams(max_new_tokens=8, temperature=0)).text   # or a real SGLang server

One wire format for three kinds of servers, so a graph compiled by sglc runs on an SGLang
deployment unchanged:

- gen: one ``/generate`` with ``sampling_params`` (SGLang's names); streamed with ``stream: true``
  (SSE, cumulative text: each event's new suffix goes to ``on_text``).
- select, as SGLang's ``RuntimeEndpoint.select`` does it: a prefix request (``max_new_tokens: 0``,
  with the prompt's token ids) gives the prompt's token count P, then one request per choice
  (``prompt + choice``, ``return_logprob``, ``logprob_start_len = P - 2``), sent concurrently
  (sglang-router refuses a batch ``text`` list, so no batch request). The choice's tokens are those
  after the longest run of ids shared with the prompt's last two (a choice's first characters can
  merge into the prompt's last token: " yes" after "? "); their logprobs are the choice's.
- constraints: ``regex`` / ``json_schema`` / ``ebnf`` (a grammar, as GBNF text) as SGLang's
  sampling params; a constraint lowered at compile time to an FSM (``fsm``) goes as our ``fsm``
  extension only when the endpoint is one sglc server
  (``/get_server_info`` says ``version: sglc``); otherwise (a router, which drops fields SGLang
  lacks, or a real SGLang server) its source pattern goes as ``regex``.
- fork hints: ``/generate`` with ``max_new_tokens: 0`` (the prompt is prefilled and cached; the
  router's cache_aware policy remembers which worker has it).
- per-call metadata from ``meta_info``: prompt/cached/completion tokens, finish_reason, latency.
- program hints (issue 28): a prompt's ``hint`` goes as ``"program_hint": {...}``
  (ProgramHint.to_json) on every ``/generate`` of the call, and ``end_program`` is
  ``POST /end_program {"program_id": ...}`` (its ``released_tokens``; 0 on any error), when the
  endpoint is one sglc server (``is_sglc``, as for ``fsm``). Behind sglang-router with sglc
  workers (``sglc_workers``: ``sglc fleet``) the hint rides in the request id
  (ProgramHint.to_rid: the router drops ``program_hint`` but forwards ``rid``) and end_program
  goes to each worker. SGLang has neither, so nothing extra is sent to it.

Faults: a call that gets no HTTP answer at all (connection refused / reset) or a 502/503 from a
router is retried ONCE: no token has reached us, so a retry cannot duplicate text. Anything else,
or a second failure, is a :class:`BackendError` naming the endpoint, the path and the status.
``unconditional_likelihood_normalized`` select is not supported (BackendError saying so).
"""
from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable, Optional

from sglc.errors import BackendError
from sglc.wire import sampling_table
from sglc.wire.auth import API_KEY_ENV
from sglc.wire.backend import (Backend, CallMeta, ChatTemplate, ChoiceLogprobs, GenParams, GenResult, ModelInfo,
                               Prompt, ScoreResult)

#: Statuses after which one retry is safe: the router found no (live) worker; nothing was generated for us.
RETRY_STATUSES = (502, 503)
#: Deadline (s) of /end_program: advice at the end of a run, never worth waiting long for.
END_PROGRAM_TIMEOUT_S = 5.0
#: Choices scored at once by one select (one request each).
MAX_PARALLEL_CHOICES = 16


class SGLangBackend(Backend):
    """A Backend speaking SGLang's HTTP `/generate` to `endpoint` (``http://host:port``)."""

    def __init__(self, endpoint: str, *, timeout: float = 600.0, info_timeout: float = 30.0,
                 api_key: Optional[str] = None, retry: bool = True) -> None:
        if not isinstance(endpoint, str) or not endpoint.strip():
            raise ValueError(f"the sglang backend needs an endpoint URL (http://host:port), got {endpoint!r}")
        url = endpoint.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            url = f"http://{url}"
        if not timeout > 0 or not info_timeout > 0:
            raise ValueError("SGLangBackend timeouts must be > 0 seconds")
        self.url = url
        self.timeout = float(timeout)
        self.info_timeout = float(info_timeout)
        self.retry = retry
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        self._info: Optional[ModelInfo] = None
        self._raw_info: Optional[dict] = None
        self._is_sglc: Optional[bool] = None
        self._sglc_workers: Optional[tuple[str, ...]] = None
        self._pool = concurrent.futures.ThreadPoolExecutor(MAX_PARALLEL_CHOICES, thread_name_prefix="sglang-select")

    # --- HTTP ---
    def _open(self, path: str, body: Optional[dict], timeout: float) -> Any:
        """The open response of GET (body None) or POST `path`; one retry when safe (module doc)."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(2 if self.retry else 1):
            request = urllib.request.Request(f"{self.url}{path}", data=data, headers=self._headers,
                                             method="GET" if body is None else "POST")
            try:
                return urllib.request.urlopen(request, timeout=timeout)
            except urllib.error.HTTPError as err:
                detail = " ".join(err.read().decode("utf-8", "replace").split())[:500]
                if err.code in RETRY_STATUSES and attempt == 0 and self.retry:
                    time.sleep(0.5)
                    continue
                raise BackendError(f"sglang backend {self.url}: {path} failed: HTTP {err.code}: {detail}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as err:
                reason = getattr(err, "reason", err)
                if attempt == 0 and self.retry and not isinstance(reason, TimeoutError):
                    time.sleep(0.5)
                    continue
                raise BackendError(f"sglang backend {self.url}: {path} failed: no answer: {reason}") from None
        raise AssertionError("unreachable")

    def _call(self, path: str, body: Optional[dict], timeout: Optional[float] = None) -> Any:
        try:
            with self._open(path, body, timeout or self.timeout) as response:
                raw = response.read()
        except (OSError, http.client.HTTPException) as err:  # the answer broke off (a worker died mid-call)
            raise BackendError(f"sglang backend {self.url}: {path} failed: the answer broke off: {err!r}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise BackendError(f"sglang backend {self.url}: {path} answered non-JSON: {raw[:200]!r}") from None

    # --- server facts ---
    def _model_info_raw(self) -> dict:
        if self._raw_info is None:
            self._raw_info = self._call("/get_model_info", None, self.info_timeout)
        return self._raw_info

    @property
    def is_sglc(self) -> bool:
        """True when the endpoint is ONE sglc server (``/get_server_info`` says ``version: sglc``): it
        takes our `fsm` extension. NOTE: sglang-router 0.3.2 parses sampling_params into its own typed
        struct and silently drops fields SGLang lacks (``fsm``), so behind a router (whose
        /get_server_info is its own) the constraint's source pattern goes as ``regex``."""
        if self._is_sglc is None:
            self._is_sglc = self._server_version(self.url) == "sglc"
        return self._is_sglc

    @property
    def sglc_workers(self) -> tuple[str, ...]:
        """Behind sglang-router (``sglc fleet``): the URLs of the healthy workers its ``/workers``
        lists when each that answers is an sglc server, else (one server, SGLang workers, no
        router) (). Hints then ride in the request id (the router drops ``program_hint`` but
        forwards ``rid``) and ``end_program`` goes to each of them (the router has no such route).
        Read once: a worker restarted later on another port gets no end_program (its hints expire
        with their leases)."""
        if self._sglc_workers is None:
            self._sglc_workers = ()
            if not self.is_sglc:
                try:
                    listed = self._call("/workers", None, self.info_timeout).get("workers") or []
                    urls = [str(w["url"]).rstrip("/") for w in listed if w.get("is_healthy", True)]
                except (BackendError, AttributeError, KeyError, TypeError):
                    urls = []
                answers = {u: self._server_version(u) for u in urls}
                if any(v == "sglc" for v in answers.values()) and all(v in ("sglc", None) for v in answers.values()):
                    self._sglc_workers = tuple(u for u, v in answers.items() if v == "sglc")
        return self._sglc_workers

    def _server_version(self, url: str) -> Optional[str]:
        """The ``version`` the server at ``url`` gives in ``/get_server_info`` ('' when it gives
        none), or None when it does not answer."""
        request = urllib.request.Request(f"{url}/get_server_info", headers=self._headers, method="GET")
        try:
            with urllib.request.urlopen(request, timeout=self.info_timeout) as response:
                return str(json.loads(response.read()).get("version") or "")
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            return None

    def model_info(self) -> ModelInfo:
        if self._info is None:
            raw = self._model_info_raw()
            spec, template = raw.get("chat_template"), None
            if isinstance(spec, dict) and "role_prefix" in spec:
                template = ChatTemplate(dict(spec["role_prefix"]), dict(spec["role_suffix"]),
                                        spec.get("generation_prefix", ""))
            self._info = ModelInfo(model=str(raw.get("model_path") or raw.get("served_model_name") or "unknown"),
                                   context_length=int(raw.get("context_length") or 0), chat_template=template,
                                   supports_images=bool(raw.get("has_image_understanding")))
        return self._info

    # --- requests ---
    def sampling_params(self, params: GenParams) -> dict[str, Any]:
        """GenParams -> SGLang's sampling_params (None fields left out: the server's defaults)."""
        # NOTE: every GenParams field has an SGLang spelling (tests/test_sampling_table.py)
        sp: dict[str, Any] = {sampling_table.GEN_FIELDS[name].sglang: value
                              for name, value in sampling_table.set_fields(params).items()}
        sp.setdefault("max_new_tokens", sampling_table.BY_NAME["max_new_tokens"].default)
        for constraint in ("regex", "json_schema", "ebnf"):  # NOTE: SGLang's own sampling_params fields
            if getattr(params, constraint) is not None:
                sp[constraint] = getattr(params, constraint)
        if params.fsm is not None:
            if self.is_sglc:
                sp["fsm"] = params.fsm
            elif isinstance(params.fsm.get("pattern"), str):
                sp["regex"] = params.fsm["pattern"]
            else:
                raise BackendError(f"sglang backend {self.url}: a lowered constraint without its source pattern "
                                   "needs an sglc server (this one is not)")
        return sp

    def _body(self, prompt: Prompt, sampling_params: dict, **extra: Any) -> dict:
        if prompt.images:
            raise BackendError(f"sglang backend {self.url}: images are not supported by this backend")
        body = {"text": prompt.text, "sampling_params": sampling_params, **extra}
        if prompt.hint is not None and self.is_sglc:
            body["program_hint"] = prompt.hint.to_json()
        elif prompt.hint is not None and self.sglc_workers:
            body["rid"] = prompt.hint.to_rid(uuid.uuid4().hex)
        return body

    @staticmethod
    def _meta(meta: dict, latency: float) -> CallMeta:
        return CallMeta(prompt_tokens=int(meta.get("prompt_tokens") or 0),
                        cached_tokens=int(meta.get("cached_tokens") or 0),
                        completion_tokens=int(meta.get("completion_tokens") or 0),
                        finish_reason=meta.get("finish_reason"), latency_s=latency)

    def _check_finish(self, meta: dict) -> None:
        reason = meta.get("finish_reason") or {}
        if isinstance(reason, dict) and reason.get("type") == "abort":
            raise BackendError(f"sglang backend {self.url}: /generate aborted: {reason.get('message') or 'no reason given'}")

    # --- Backend ---
    def generate(self, prompt: Prompt, params: GenParams) -> GenResult:
        t0 = time.perf_counter()
        answer = self._call("/generate", self._body(prompt, self.sampling_params(params)))
        meta = answer.get("meta_info") or {}
        self._check_finish(meta)
        return GenResult(answer.get("text", ""), self._meta(meta, time.perf_counter() - t0))

    def generate_stream(self, prompt: Prompt, params: GenParams, on_text: Callable[[str], None]) -> GenResult:
        """`generate` with ``stream: true``: SGLang's SSE events carry the text so far; the new part
        goes to `on_text` as each event arrives."""
        t0 = time.perf_counter()
        text, meta = "", {}
        with self._open("/generate", self._body(prompt, self.sampling_params(params), stream=True),
                        self.timeout) as response:
            for raw in self._lines(response):
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise BackendError(f"sglang backend {self.url}: /generate stream failed: {event['error']}")
                new = event.get("text", "")
                if new.startswith(text) and len(new) > len(text):
                    on_text(new[len(text):])
                text, meta = new, event.get("meta_info") or meta
        self._check_finish(meta)
        return GenResult(text, self._meta(meta, time.perf_counter() - t0))

    def _lines(self, response: Any) -> Any:
        try:
            yield from response
        except (OSError, http.client.HTTPException) as err:
            raise BackendError(f"sglang backend {self.url}: /generate stream broke off: {err!r}") from None

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        t0 = time.perf_counter()
        answer = self._call("/generate", self._body(prompt, {"max_new_tokens": 0}))
        return self._meta(answer.get("meta_info") or {}, time.perf_counter() - t0)

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        if unconditional:
            raise BackendError(f"sglang backend {self.url}: select with unconditional_likelihood_normalized is not "
                               "supported over HTTP (use token_length_normalized or greedy_token_selection)")
        if not choices:
            raise BackendError(f"sglang backend {self.url}: select needs at least one choice")
        t0 = time.perf_counter()
        # NOTE: the prefix request also returns the prompt's last two token ids: a choice whose first
        # characters merge with the prompt's last token (" yes" after "? ") starts where its ids first
        # differ from the prompt's, not at P.
        logprobs = {"return_logprob": True, "logprob_start_len": 0}
        first = self._call("/generate", self._body(prompt, {"max_new_tokens": 0}, **logprobs))
        prefix = self._meta(first.get("meta_info") or {}, 0.0)
        start = max(prefix.prompt_tokens - 2, 0)
        tail = [e[1] for e in (first.get("meta_info") or {}).get("input_token_logprobs", [])[start:]]

        def one(choice: str) -> list[float]:
            # NOTE: no program hint here: only the prefix request carries it (each choice's text is
            # a one-off; keeping them all for the program would hold choices nobody extends)
            body = self._body(Prompt(prompt.text + choice), {"max_new_tokens": 0, "temperature": 0},
                              return_logprob=True, logprob_start_len=start)
            entries = (self._call("/generate", body).get("meta_info") or {}).get("input_token_logprobs") or []
            same = 0
            while same < min(len(tail), len(entries)) and entries[same][1] == tail[same]:
                same += 1
            values = [e[0] for e in entries[same:]]
            if not values or any(v is None for v in values):
                raise BackendError(f"sglang backend {self.url}: select: choice {choice!r} has no token logprobs "
                                   f"after the prompt ({len(entries)} entries from position {start})")
            return [float(v) for v in values]

        scored = list(self._pool.map(one, choices))
        meta = CallMeta(prompt_tokens=prefix.prompt_tokens, cached_tokens=prefix.cached_tokens,
                        latency_s=time.perf_counter() - t0)
        return ScoreResult([ChoiceLogprobs(token_logprobs=lp) for lp in scored], meta)

    def end_program(self, program_id: str) -> int:
        """``POST /end_program`` on an sglc server, or on every sglc worker behind a router: the
        cached tokens released; 0 on any error (advice: no retry, a short deadline) and for other
        servers (they take no hints)."""
        if self.is_sglc:
            return self._end_program_at(self.url, program_id)
        return sum(self._end_program_at(url, program_id) for url in self.sglc_workers)

    def _end_program_at(self, url: str, program_id: str) -> int:
        request = urllib.request.Request(f"{url}/end_program", data=json.dumps({"program_id": program_id}).encode(),
                                         headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=min(self.info_timeout, END_PROGRAM_TIMEOUT_S)) as response:
                answer = json.loads(response.read())
            return int(answer.get("released_tokens") or 0) if isinstance(answer, dict) else 0
        except (OSError, ValueError, TypeError, http.client.HTTPException):  # HTTPError (404: no such endpoint) is an OSError
            return 0

    def metrics(self) -> dict[str, Any]:
        try:
            info = self._call("/get_server_info", None, self.info_timeout)
        except BackendError:
            return {}
        metrics = info.get("metrics")
        return dict(metrics) if isinstance(metrics, dict) else {}

    def flush_cache(self) -> bool:
        try:
            self._call("/flush_cache", {}, self.info_timeout)
        except BackendError:
            return False
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"SGLangBackend({self.url!r})"
