"""The HTTP front of the runtime: OpenAI-compatible and SGLang-native endpoints over RuntimeService.

Endpoints: ``/v1/completions``, ``/v1/chat/completions`` (SSE streaming: ``data: {...}`` chunks,
then ``data: [DONE]``), ``/v1/models``; SGLang's ``/generate``, ``/health``, ``/health_generate``,
``/get_model_info``, ``/get_server_info``, ``/flush_cache``; ``/metrics`` (Prometheus text).

Errors (OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``): invalid JSON or a
bad field -> 400; unknown model -> 404; draining -> 503; too many constraint compilations in
flight -> 429 (Retry-After: 1); a request the engine aborts for an internal reason -> 500. Nothing here touches the engine directly: every call goes through the
transport-neutral RuntimeService (the same object the gRPC server adapts).

``/generate`` takes a batch too (``text: [str]`` / ``input_ids: [[int]]``, ``sampling_params`` an
object or one per prompt) and answers a list; streamed, each SSE event carries its ``index``.

Extensions: ``regex`` (a constraint) on both OpenAI endpoints; ``echo`` with ``logprobs`` and
``max_tokens=0`` on ``/v1/completions`` returns the prompt's token logprobs (used by the
executor's openai backend for ``select``).
"""
from __future__ import annotations

import json
import logging
import socket
import threading
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from . import openai_protocol as proto
from .http_handlers import Handlers, HttpError
from .service import ConstraintCompilerBusy, RequestError, RuntimeService, ServiceUnavailable, one_line

log = logging.getLogger(__name__)


def build_app(service: RuntimeService) -> Any:
    """The FastAPI application over one RuntimeService."""
    h = Handlers(service)
    app = FastAPI(title="sglc runtime", docs_url=None, redoc_url=None)

    def fail(err: BaseException) -> JSONResponse:
        if isinstance(err, HttpError):
            return JSONResponse(proto.error_body(str(err), err.type, err.param, err.code), status_code=err.status)
        if isinstance(err, RequestError):
            return JSONResponse(proto.error_body(one_line(err)), status_code=400)
        if isinstance(err, ServiceUnavailable):
            return JSONResponse(proto.error_body(one_line(err), "server_error", code=503), status_code=503)
        if isinstance(err, ConstraintCompilerBusy):
            return JSONResponse(proto.error_body(one_line(err), "rate_limit_error", code=429), status_code=429,
                                headers={"Retry-After": "1"})
        log.error("HTTP request failed", exc_info=err)
        return JSONResponse(proto.error_body(f"internal error: {type(err).__name__}: {one_line(err)}",
                                             "server_error", code=500), status_code=500)

    async def read_json(request: Request) -> dict:
        raw = await request.body()
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError) as err:
            raise HttpError(400, f"the request body is not valid JSON: {err}") from None
        except RecursionError:  # NOTE: a clean refusal, never a traceback
            raise HttpError(400, "the request body nests too deeply to parse") from None
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        return body

    def endpoint(start: Any, finish: Any, stream: Any):
        """POST endpoint: start(body) submits (errors -> 4xx before any byte is sent); then either
        finish(started) -> JSON or stream(*started) -> SSE."""
        async def handle(request: Request) -> Any:
            try:
                body = await read_json(request)
                started = await run_in_threadpool(start, body)
                if body.get("stream"):
                    return StreamingResponse(stream(*started), media_type="text/event-stream")
                return JSONResponse(await run_in_threadpool(finish, started))
            except Exception as err:  # NOTE: every failure answers; the server keeps serving
                return fail(err)
        return handle

    def blocking(fn: Any):
        async def handle() -> Any:
            try:
                return JSONResponse(await run_in_threadpool(fn))
            except Exception as err:
                return fail(err)
        return handle

    app.post("/v1/completions")(endpoint(h.completions_start, lambda s: h.finish_completions(*s),
                                         h.completions_stream))
    app.post("/v1/chat/completions")(endpoint(h.chat_start, lambda s: h.finish_chat(*s), h.chat_stream))
    app.post("/generate")(endpoint(h.generate_start, lambda s: h.finish_generate(*s), h.generate_stream))
    app.get("/v1/models")(blocking(h.models))
    app.get("/get_model_info")(blocking(h.model_info))
    app.get("/get_server_info")(blocking(h.server_info))

    async def flush() -> Any:
        flushed, message = await run_in_threadpool(service.flush)
        return JSONResponse({"flushed": flushed, "message": message or "cache flushed"},
                            status_code=200 if flushed else 409)

    async def health(check_generate: bool = False) -> Any:
        state, message = await run_in_threadpool(service.health, check_generate)
        return JSONResponse({"status": state, "message": message}, status_code=200 if state == "serving" else 503)

    async def health_generate() -> Any:
        return await health(True)

    async def metrics() -> Any:
        return PlainTextResponse(await run_in_threadpool(h.prometheus), media_type="text/plain; version=0.0.4")

    for path in ("/flush_cache",):
        app.post(path)(flush)
        app.get(path)(flush)
    app.get("/health")(health)
    app.get("/health_generate")(health_generate)
    app.get("/metrics")(metrics)
    return app


class HttpServer:
    """uvicorn serving :func:`build_app` in a background thread: ``start()``, ``address``, ``stop()``.

    The socket is bound in the constructor (port 0 picks a free port; a busy port raises OSError).
    """

    kind = "http"

    def __init__(self, service: RuntimeService, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.service = service
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.bind((host, port))
        except OSError as err:
            self._sock.close()
            raise OSError(f"HTTP server cannot listen on {host}:{port} (is the port in use?): {err}") from None
        self._sock.listen(1024)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(build_app(service), log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # NOTE: launch.serve owns the signals
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        def run() -> None:
            try:
                self._server.run(sockets=[self._sock])
            finally:
                self._stopped.set()

        self._thread = threading.Thread(target=run, name="sglc-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10.0
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self, grace: float | None = None) -> threading.Event:
        """Stop accepting requests and end the server thread; the event is set once it ended."""
        self._server.should_exit = True
        if self._thread is None:
            self._stopped.set()
        return self._stopped
