"""The HTTP front of the runtime: OpenAI-compatible and SGLang-native endpoints over RuntimeService.

Endpoints: ``/v1/completions``, ``/v1/chat/completions`` (SSE streaming: ``data: {...}`` chunks,
then ``data: [DONE]``), ``/v1/models``; SGLang's ``/generate`` (its wire format:
sglang_generate.py), ``/health``, ``/health_generate``, ``/get_model_info`` and ``/model_info``,
``/get_server_info`` and ``/server_info``, ``/get_load``, ``POST /flush_cache``,
``POST /abort_request``, ``POST /end_program`` (issue 28: ``{"program_id"}`` ->
``{"released_tokens"}``); ``/metrics`` (Prometheus text).

Errors (OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``): invalid JSON or a
bad field, a Host header not allowed (DNS rebinding: host_allowlist.py) -> 400; no or a wrong API
key -> 401; a foreign Origin -> 403; unknown model or path ->
404; a wrong method -> 405; headers or body slower than max_header_seconds / max_body_seconds
-> 408, closed; a body over max_request_bytes -> 413; not application/json -> 415; too many
constraint compilations in flight -> 429 (Retry-After: 1); a connection over
max_connections_per_client / max_connections -> 429 / 503 when accepted (connection_guard.py);
draining -> 503; a request the engine aborts for an internal reason -> 500. Nothing here
touches the engine directly: every call goes through the transport-neutral RuntimeService
(the same object the gRPC server adapts); the request checks live in http_guard.py.

Threads: no thread ever waits on generation. Submitting (tokenizing) runs in the thread pool;
waiting for the engine and streaming are awaits on the event loop, woken by the engine thread.
/health and /metrics run on the event loop without the pool, so they answer while generation
saturates everything else. A client that disconnects (streamed or not) cancels every engine
request its call started.

``/generate`` takes a batch too (``text: [str]`` / ``input_ids: [[int]]``, ``sampling_params`` an
object or one per prompt) and ``n`` samples per prompt, and answers a list; streamed, the events of
the requests interleave and each carries its ``index`` (docs/http_server.md has the wire format).

Extensions: ``regex`` (a constraint) on both OpenAI endpoints; ``echo`` with ``logprobs`` and
``max_tokens=0`` on ``/v1/completions`` returns the prompt's token logprobs (used by the
executor's openai backend for ``select``).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import Any, AsyncIterator, Callable, Sequence

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from . import openai_protocol as proto
from .http_call import HttpError, Started
from .host_allowlist import HostAllowList
from .http_guard import RequestGuard, read_json_object
from .http_handlers import Handlers
from .limits import LimitExceeded
from .service import ConstraintCompilerBusy, RequestError, RuntimeService, ServiceUnavailable, one_line

log = logging.getLogger(__name__)

#: The status answered to a client that went away before its answer was ready (nobody reads it).
_CLIENT_GONE = 499


class _CallStream(StreamingResponse):
    """An SSE response that cancels every engine request of its call when it ends, however it
    ends (finished, client disconnected, server stopping)."""

    def __init__(self, started: Started) -> None:
        super().__init__(_events_or_error(started.events()), media_type="text/event-stream")
        self.started = started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.started.group.cancel("the client went away")


async def _events_or_error(events: AsyncIterator[str]) -> AsyncIterator[str]:
    """The events; a server bug mid-stream ends it with an error event, not a cut connection."""
    try:
        async for event in events:
            yield event
    except Exception as err:
        log.error("HTTP stream failed", exc_info=err)
        yield proto.sse(proto.error_body(f"internal error: {type(err).__name__}: {one_line(err)}", "server_error",
                                         code="internal"))
        yield proto.sse("[DONE]")


async def _disconnected(receive: Receive) -> None:
    """Returns when the client disconnects (the body was read already; nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _done_or_gone(started: Started, request: Request) -> bool:
    """Wait until every request of the call finished (True) or the client went away (False)."""
    done = asyncio.ensure_future(started.group.wait_done())
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
        return done.done() and not done.cancelled()
    finally:
        done.cancel()
        gone.cancel()


class _Served:
    """What the endpoints serve, in one place the server lets go of when it stops: whatever still
    holds the application after a stop (uvicorn's server object, a framework's caches: FastAPI
    kept every endpoint it classified in module-level caches) must not keep the engine and its
    model alive (each in-process server of a test run, ~1.3 GB apiece)."""

    __slots__ = ("service", "handlers")

    def __init__(self, service: RuntimeService, handlers: Handlers) -> None:
        self.service: Any = service
        self.handlers: Any = handlers

    def release(self) -> None:
        self.service = self.handlers = None


def build_app(service: RuntimeService, *, api_key: str | None = None, allowed_hosts: HostAllowList | None = None,
              expose_paths: bool = False) -> Any:
    """The Starlette application over one RuntimeService (with an API key: see auth.py; the Host
    names it answers: host_allowlist.py, loopback only by default). Starlette, not FastAPI: every
    endpoint reads its own body and answers a Response, and FastAPI's import (its OpenAPI
    models) was ~0.15 s of every start."""
    served = _Served(service, Handlers(service, expose_paths=expose_paths))

    def fail(err: BaseException) -> Response:
        if isinstance(err, ClientDisconnect):  # NOTE: gone while sending its body: nobody to answer
            return Response(status_code=_CLIENT_GONE)
        if isinstance(err, HttpError):
            return JSONResponse(proto.error_body(str(err), err.type, err.param, err.code), status_code=err.status)
        if isinstance(err, LimitExceeded):
            return JSONResponse(proto.error_body(one_line(err), code="limit_exceeded", param=err.limit),
                                status_code=400)
        if isinstance(err, RequestError):  # NOTE: a FieldError names its field in `param`
            return JSONResponse(proto.error_body(one_line(err), param=getattr(err, "param", None)), status_code=400)
        if isinstance(err, ServiceUnavailable):
            return JSONResponse(proto.error_body(one_line(err), "server_error", code=503), status_code=503)
        if isinstance(err, ConstraintCompilerBusy):
            return JSONResponse(proto.error_body(one_line(err), "rate_limit_error", code=429), status_code=429,
                                headers={"Retry-After": "1"})
        log.error("HTTP request failed", exc_info=err)
        return JSONResponse(proto.error_body(f"internal error: {type(err).__name__}: {one_line(err)}",
                                             "server_error", code=500), status_code=500)

    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        """Routing errors (404 unknown path, 405 wrong method) in OpenAI's error shape."""
        return JSONResponse(proto.error_body(f"{request.method} {request.url.path}: {err.detail}",
                                             code=err.status_code), status_code=err.status_code,
                            headers=getattr(err, "headers", None))

    def endpoint(name: str):
        """POST endpoint: the handler `name`'s start(body) submits everything (errors -> 4xx
        before any byte is sent); then the JSON answer once all requests finished, or the SSE stream."""
        async def handle(request: Request) -> Any:
            try:
                body = await read_json_object(request, served.service.limits)
                start: Callable[[dict], Started] = getattr(served.handlers, name)
                started = await run_in_threadpool(start, body)
            except Exception as err:  # NOTE: every failure answers; the server keeps serving
                return fail(err)
            if body.get("stream"):
                return _CallStream(started)
            try:
                if not await _done_or_gone(started, request):
                    return Response(status_code=_CLIENT_GONE)
                return JSONResponse(await run_in_threadpool(started.answer))
            except Exception as err:
                return fail(err)
            finally:
                started.group.cancel("the client went away")  # no-op for the finished ones
        return handle

    def quick(name: str):
        async def handle(request: Request) -> Any:
            try:
                return JSONResponse(await run_in_threadpool(getattr(served.handlers, name)))
            except Exception as err:
                return fail(err)
        return handle

    async def abort_request(request: Request) -> Any:
        """SGLang's abort: ``{"rid": ID}`` (with n > 1 also its samples) or ``{"abort_all": true}``."""
        try:
            body = await read_json_object(request, served.service.limits)
            rid, abort_all = body.get("rid", ""), body.get("abort_all", False)
            if not isinstance(rid, str) or not isinstance(abort_all, bool) or set(body) - {"rid", "abort_all"}:
                raise HttpError(400, "/abort_request takes {'rid': string} or {'abort_all': true}")
            if abort_all:
                num = served.service.cancel_all("aborted by /abort_request")
            elif rid:
                num = served.service.abort(rid)
            else:
                raise HttpError(400, "/abort_request needs a non-empty 'rid' or 'abort_all': true")
        except Exception as err:
            return fail(err)
        return JSONResponse({"aborted": num})

    async def end_program(request: Request) -> Any:
        """A program run ended (issue 28): ``{"program_id": ID}`` -> ``{"released_tokens": N}``."""
        try:
            body = await read_json_object(request, served.service.limits)
            return JSONResponse(await run_in_threadpool(served.handlers.end_program, body))
        except Exception as err:
            return fail(err)

    async def flush(request: Request) -> Any:
        """State-changing: POST only (a GET is 405), so a link or an <img> cannot trigger it."""
        flushed, message = served.service.flush()  # NOTE: returns at once (refuses unless idle)
        return JSONResponse({"flushed": flushed, "message": message or "cache flushed"},
                            status_code=200 if flushed else 409)

    async def health(request: Request) -> Any:
        """On the event loop, never the thread pool: answers while generation is saturated."""
        state, message = served.service.health(False)
        return JSONResponse({"status": state, "message": message}, status_code=200 if state == "serving" else 503)

    async def health_generate(request: Request) -> Any:
        state, message = await run_in_threadpool(served.service.health, True)
        return JSONResponse({"status": state, "message": message}, status_code=200 if state == "serving" else 503)

    async def metrics(request: Request) -> Any:
        """On the event loop: the engine's counters are read under its lock, which is never held
        during a model forward, so this waits for at most one scheduling step."""
        return PlainTextResponse(served.handlers.prometheus(), media_type="text/plain; version=0.0.4")

    post, get = ["POST"], ["GET"]
    routes = [
        Route("/v1/completions", endpoint("completions"), methods=post),
        Route("/v1/chat/completions", endpoint("chat"), methods=post),
        Route("/generate", endpoint("generate"), methods=post),
        Route("/v1/models", quick("models"), methods=get),
        Route("/get_model_info", quick("sglang_model_info"), methods=get),
        Route("/model_info", quick("sglang_model_info"), methods=get),
        Route("/get_server_info", quick("server_info"), methods=get),
        Route("/server_info", quick("server_info"), methods=get),  # NOTE: SGLang's client and router ask this one first
        Route("/get_load", quick("load"), methods=get),
        Route("/abort_request", abort_request, methods=post),
        Route("/end_program", end_program, methods=post),
        Route("/flush_cache", flush, methods=post),
        Route("/health", health, methods=get),
        Route("/health_generate", health_generate, methods=get),
        Route("/metrics", metrics, methods=get),
    ]
    app = Starlette(routes=routes, exception_handlers={StarletteHTTPException: http_error},
                    middleware=[Middleware(RequestGuard, api_key=api_key, allowed_hosts=allowed_hosts)])  # NOTE: before routing: cheap
    app.state.served = served  # NOTE: HttpServer releases it when it stops
    return app


class HttpServer:
    """uvicorn serving :func:`build_app` in a background thread: ``start()``, ``address``, ``stop()``.

    The socket is bound in the constructor (port 0 picks a free port; a busy port raises OSError).
    """

    kind = "http"

    def __init__(self, service: RuntimeService, host: str = "127.0.0.1", port: int = 0, *,
                 api_key: str | None = None, allowed_hosts: Sequence[str] = (), expose_paths: bool = False) -> None:
        import functools

        import uvicorn

        from .connection_guard import ConnectionGuard, GuardedH11Protocol

        self.service = service
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        # NOTE: a worker restarted on its old port (to rejoin a router) must not wait for the dead
        # one's connections in TIME_WAIT; a port another process listens on is still refused.
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as err:
            self._sock.close()
            raise OSError(f"HTTP server cannot listen on {host}:{port} (is the port in use?): {err}") from None
        self._sock.listen(1024)
        self.port = self._sock.getsockname()[1]
        #: Connection caps and request read deadlines (service.limits; see connection_guard.py).
        self.guard = ConnectionGuard(service.limits)
        # NOTE: ws="none": no endpoint is a WebSocket, and an upgraded connection would leave the
        # guard's protocol (uncounted, its deadline still running)
        self._app = build_app(service, api_key=api_key, allowed_hosts=HostAllowList(host, allowed_hosts),
                              expose_paths=expose_paths)
        config = uvicorn.Config(self._app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2, http=functools.partial(GuardedH11Protocol, guard=self.guard),
                                ws="none")
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
                self._app.state.served.release()  # NOTE: no request runs any more (see _Served)
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
            self._app.state.served.release()
            self._stopped.set()
        return self._stopped
