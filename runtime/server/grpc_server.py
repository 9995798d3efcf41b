"""The gRPC front of the runtime: a thin servicer over RuntimeService, and the server object.

Error mapping (every RPC): RequestError -> INVALID_ARGUMENT (the engine's one-line message),
a request over a server limit (LimitExceeded) -> RESOURCE_EXHAUSTED naming the limit, a message
that does not parse -> INVALID_ARGUMENT, ServiceUnavailable -> UNAVAILABLE, anything else ->
INTERNAL ("internal error: ..."), logged with its traceback. A message over
``max_request_bytes`` is refused by gRPC itself (RESOURCE_EXHAUSTED) before it is parsed.
A Generate that the engine aborts after it was accepted ends with a GenerateError message
(status OK). Cancelling a Generate, Score or CachePrefix call aborts its engine work.

Program hints (issue 28): Generate, Score and CachePrefix read ``hint`` when set (an invalid one
-> INVALID_ARGUMENT naming the field; a lease over ``max_hint_lease_ms`` is capped, not refused);
``EndProgram`` releases what the engine keeps for a program.

With an API key every RPC needs the metadata ``authorization: Bearer KEY`` (UNAUTHENTICATED
otherwise) but a plain Health check; ``Health(check_generate=true)`` runs a generation and needs it.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent import futures
from typing import Any, Callable, Iterator

import grpc

from sglc.wire import server_convert
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc
from sglc.wire.service_results import RuntimeModelInfo

from .auth import OPEN_GRPC_CALLS, bearer_matches
from .calls import CallCancelled
from .limits import LimitExceeded
from .public_paths import public_path
from .service import ConstraintCompilerBusy, RequestError, RuntimeService, ServiceUnavailable, abort_kind, one_line

log = logging.getLogger(__name__)

#: Server channel options. NOTE: clients ping during long calls (keepalive), so pings must be
#: allowed often enough; SO_REUSEPORT is off so a second server on a busy port fails loudly.
#: The receive limit is ServerLimits.max_request_bytes (see server_options).
SERVER_OPTIONS = (
    ("grpc.so_reuseport", 0),
    ("grpc.max_send_message_length", 64 * 2**20),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_permit_without_calls", 1),
)


def server_options(max_receive_bytes: int) -> tuple[tuple[str, int], ...]:
    return SERVER_OPTIONS + (("grpc.max_receive_message_length", max_receive_bytes),)


def _fail(context: grpc.ServicerContext, err: BaseException, rpc: str) -> None:
    """End the RPC with the status that fits `err` (context.abort raises)."""
    if isinstance(err, LimitExceeded):
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, one_line(err))
    if isinstance(err, RequestError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, one_line(err))
    if isinstance(err, ServiceUnavailable):
        context.abort(grpc.StatusCode.UNAVAILABLE, one_line(err))
    if isinstance(err, ConstraintCompilerBusy):
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, one_line(err))
    if isinstance(err, CallCancelled):
        context.abort(grpc.StatusCode.CANCELLED, one_line(err))
    log.error("%s failed", rpc, exc_info=err)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in {rpc}: {type(err).__name__}: {one_line(err)}")


def _unary(rpc: str, body: Callable[[Any], Any], context: grpc.ServicerContext) -> Any:
    try:
        return body()
    except Exception as err:  # NOTE: body never calls context.abort; _fail's abort propagates
        _fail(context, err, rpc)


def _hint(svc: RuntimeService, request: Any) -> Any:
    """The request's ProgramHint (None when unset); RequestError (INVALID_ARGUMENT) when invalid."""
    try:
        return server_convert.hint_from_pb(request)
    except (ValueError, TypeError) as err:
        raise svc._invalid(err) from err


def _cancel_with(context: grpc.ServicerContext, call: Any) -> None:
    """Cancel `call` when the RPC ends early (client cancel, deadline, disconnect)."""
    if not context.add_callback(lambda: call.cancel("the client cancelled the call")):
        call.cancel("the client cancelled the call")  # the RPC had already ended


class RuntimeServicer(pb_grpc.RuntimeServicer):
    """gRPC methods of proto/runtime.proto over one RuntimeService."""

    def __init__(self, service: RuntimeService, *, expose_paths: bool = False) -> None:
        self.service = service
        self.expose_paths = expose_paths  # NOTE: False: ModelInfo names the model, not its path (public_paths.py)

    def Generate(self, request: pb.GenerateRequest, context: grpc.ServicerContext) -> Iterator[pb.GenerateResponse]:
        svc = self.service

        def start():
            try:
                fields = server_convert.sampling_fields_from_pb(request)
            except ValueError as err:
                raise svc._invalid(err) from err
            prompt = server_convert.prompt_from_pb(request.prompt)
            svc.check_rid(request.rid)  # NOTE: the cheap checks first: the constraint compiles next
            hint = _hint(svc, request)
            svc.resolve(prompt)
            return svc.generate(prompt, svc.sampling_params(**fields), rid=request.rid or None, hint=hint)

        call = _unary("Generate", start, context)
        _cancel_with(context, call)
        try:
            for chunk in call.chunks(is_active=context.is_active):
                piece = chunk.text or chunk.token_ids
                if request.stream and piece:
                    yield server_convert.chunk_to_pb(call.rid, chunk.text, chunk.token_ids, chunk.logprobs,
                                              chunk.top_logprobs)
                if chunk.finished:
                    out = chunk.output
                    if out.finish_reason.get("type") == "abort":
                        message = str(out.finish_reason.get("message", "aborted"))
                        yield server_convert.error_to_pb(call.rid, abort_kind(message), message)
                    else:
                        yield server_convert.complete_to_pb(call.rid, out, call.warnings)
        except Exception as err:
            call.cancel(f"server error: {one_line(err)}")
            _fail(context, err, "Generate")

    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        return _unary("Score", lambda: server_convert.score_to_pb(self.service.score(
            server_convert.prompt_from_pb(request.prompt), list(request.choices), unconditional=request.unconditional,
            started=lambda call: _cancel_with(context, call), hint=_hint(self.service, request))), context)

    def CachePrefix(self, request: pb.CachePrefixRequest, context: grpc.ServicerContext) -> pb.CachePrefixResponse:
        def body():
            prompt_tokens, cached, warnings = self.service.cache_prefix(
                server_convert.prompt_from_pb(request.prompt), started=lambda call: _cancel_with(context, call),
                hint=_hint(self.service, request))
            return pb.CachePrefixResponse(prompt_tokens=prompt_tokens, cached_tokens=cached, warnings=warnings)

        return _unary("CachePrefix", body, context)

    def EndProgram(self, request: pb.EndProgramRequest, context: grpc.ServicerContext) -> pb.EndProgramResponse:
        return _unary("EndProgram", lambda: pb.EndProgramResponse(
            released_tokens=self.service.end_program(request.program_id)), context)

    def Flush(self, request: pb.FlushRequest, context: grpc.ServicerContext) -> pb.FlushResponse:
        def body():
            flushed, message = self.service.flush()
            return pb.FlushResponse(flushed=flushed, message=message)

        return _unary("Flush", body, context)

    def ModelInfo(self, request: pb.ModelInfoRequest, context: grpc.ServicerContext) -> pb.ModelInfoResponse:
        return _unary("ModelInfo", lambda: server_convert.model_info_to_pb(self._public_info()), context)

    def _public_info(self) -> RuntimeModelInfo:
        info = self.service.model_info()
        return info if self.expose_paths else dataclasses.replace(info, model_path=public_path(info.model_path))

    def Health(self, request: pb.HealthRequest, context: grpc.ServicerContext) -> pb.HealthResponse:
        return _unary("Health", lambda: server_convert.health_to_pb(*self.service.health(request.check_generate)), context)

    def Metrics(self, request: pb.MetricsRequest, context: grpc.ServicerContext) -> pb.MetricsResponse:
        return _unary("Metrics", lambda: server_convert.metrics_to_pb(self.service.metrics()), context)


class MalformedRequest:
    """What a request that does not parse becomes (the servicer answers INVALID_ARGUMENT), so
    gRPC never logs a deserialization traceback or answers INTERNAL for a client's bytes."""

    def __init__(self, message: str) -> None:
        self.message = message


def _lenient(message_cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message_cls.FromString(data)
        except Exception as err:  # NOTE: DecodeError, invalid UTF-8 in a string field, ...
            return MalformedRequest(f"the {message_cls.__name__} message does not parse: {one_line(err)}")
    return parse


def _refusing_malformed(method: Callable, streaming: bool) -> Callable:
    def refuse(request: MalformedRequest, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)

    if streaming:
        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            if isinstance(request, MalformedRequest):
                refuse(request, context)
            yield from method(request, context)
        return stream

    def unary(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, MalformedRequest):
            refuse(request, context)
        return method(request, context)
    return unary


def runtime_handlers(servicer: RuntimeServicer) -> grpc.GenericRpcHandler:
    """The Runtime service's handlers (as the generated add_RuntimeServicer_to_server builds
    them, from the same descriptor) with lenient request parsing."""
    service = pb.DESCRIPTOR.services_by_name["Runtime"]
    handlers = {}
    for m in service.methods:
        make = grpc.unary_stream_rpc_method_handler if m.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[m.name] = make(_refusing_malformed(getattr(servicer, m.name), m.server_streaming),
                                request_deserializer=_lenient(getattr(pb, m.input_type.name)),
                                response_serializer=getattr(pb, m.output_type.name).SerializeToString)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


_UNAUTHENTICATED = "missing or wrong API key: send the metadata 'authorization: Bearer KEY'"


class ApiKeyInterceptor(grpc.ServerInterceptor):
    """Every RPC needs ``authorization: Bearer KEY`` metadata but the open calls of auth.py
    (a plain Health check); a method open for some requests only is checked per request."""

    def __init__(self, key: str) -> None:
        self._key = key

    def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return handler
        metadata = dict(details.invocation_metadata or ())
        if bearer_matches(metadata.get("authorization"), self._key):
            return handler
        is_open = OPEN_GRPC_CALLS.get(details.method)
        if is_open is not None:
            return _open_for(handler, is_open, details.method)

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)

        if handler.response_streaming:
            def deny_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                deny(request, context)
                yield  # NOTE: unreachable; makes this a generator like the handler it replaces
            return grpc.unary_stream_rpc_method_handler(deny_stream)
        return grpc.unary_unary_rpc_method_handler(deny)


def _open_for(handler: grpc.RpcMethodHandler, is_open: Callable[[Any], bool], method: str) -> grpc.RpcMethodHandler:
    """`handler` for the requests `is_open` lets through, UNAUTHENTICATED for the others (the
    request is parsed first: whether it is open depends on its fields)."""
    assert handler.unary_unary is not None, "only unary methods can be open per request"
    inner = handler.unary_unary

    def gated(request: Any, context: grpc.ServicerContext) -> Any:
        if not is_open(request):
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          f"{_UNAUTHENTICATED} ({method} is open only in its plain form: this request "
                          "can start a generation)")
        return inner(request, context)

    return grpc.unary_unary_rpc_method_handler(gated, request_deserializer=handler.request_deserializer,
                                               response_serializer=handler.response_serializer)


class GrpcServer:
    """A gRPC server for one RuntimeService: ``start()``, ``address``, ``stop(grace)``.

    One thread per RPC in flight (a Generate holds its thread while it streams); calls beyond
    max_workers wait in the executor's queue.
    """

    kind = "grpc"

    def __init__(self, service: RuntimeService, host: str = "127.0.0.1", port: int = 0, *,
                 max_workers: int = 256, api_key: str | None = None, expose_paths: bool = False) -> None:
        self.service = service
        self.host = host
        interceptors = [ApiKeyInterceptor(api_key)] if api_key else []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="sglc-grpc"),
                                   options=server_options(service.limits.max_request_bytes),
                                   interceptors=interceptors)
        self._server.add_generic_rpc_handlers((runtime_handlers(RuntimeServicer(service, expose_paths=expose_paths)),))
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = self._server.add_insecure_port(target)
        except RuntimeError as err:  # grpc raises RuntimeError("Failed to bind ...")
            raise OSError(f"gRPC server cannot listen on {host}:{port} (is the port in use?): {err}") from None
        if not self.port:
            raise OSError(f"gRPC server cannot listen on {host}:{port} (is the port in use?)")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float | None = None) -> threading.Event:
        """Stop accepting calls; calls in flight get `grace` seconds, then are cancelled (which
        aborts their engine requests). Returns an event set when the server has stopped."""
        return self._server.stop(grace)

    def wait(self, timeout: float | None = None) -> bool:
        return self._server.wait_for_termination(timeout)
