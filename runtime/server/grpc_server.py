"""The gRPC front of the runtime: a thin servicer over RuntimeService, and the server object.

Error mapping (every RPC): RequestError -> INVALID_ARGUMENT (the engine's one-line message),
ServiceUnavailable -> UNAVAILABLE, ConstraintCompilerBusy -> RESOURCE_EXHAUSTED, anything else -> INTERNAL ("internal error: ..."), logged
with its traceback. A Generate that the engine aborts after it was accepted ends with a
GenerateError message (status OK). Cancelling a Generate call aborts its engine request.
"""
from __future__ import annotations

import logging
import threading
from concurrent import futures
from typing import Any, Callable, Iterator

import grpc

from sglc.proto import runtime_pb2 as pb
from sglc.proto import runtime_pb2_grpc as pb_grpc

from . import convert
from .service import ConstraintCompilerBusy, RequestError, RuntimeService, ServiceUnavailable, abort_kind, one_line

log = logging.getLogger(__name__)

#: Server channel options. NOTE: clients ping during long calls (keepalive), so pings must be
#: allowed often enough; SO_REUSEPORT is off so a second server on a busy port fails loudly.
SERVER_OPTIONS = (
    ("grpc.so_reuseport", 0),
    ("grpc.max_send_message_length", 64 * 2**20),
    ("grpc.max_receive_message_length", 64 * 2**20),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_permit_without_calls", 1),
)


def _fail(context: grpc.ServicerContext, err: BaseException, rpc: str) -> None:
    """End the RPC with the status that fits `err` (context.abort raises)."""
    if isinstance(err, RequestError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, one_line(err))
    if isinstance(err, ServiceUnavailable):
        context.abort(grpc.StatusCode.UNAVAILABLE, one_line(err))
    if isinstance(err, ConstraintCompilerBusy):
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, one_line(err))
    log.error("%s failed", rpc, exc_info=err)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in {rpc}: {type(err).__name__}: {one_line(err)}")


def _unary(rpc: str, body: Callable[[Any], Any], context: grpc.ServicerContext) -> Any:
    try:
        return body()
    except Exception as err:  # NOTE: body never calls context.abort; _fail's abort propagates
        _fail(context, err, rpc)


class RuntimeServicer(pb_grpc.RuntimeServicer):
    """gRPC methods of proto/runtime.proto over one RuntimeService."""

    def __init__(self, service: RuntimeService) -> None:
        self.service = service

    def Generate(self, request: pb.GenerateRequest, context: grpc.ServicerContext) -> Iterator[pb.GenerateResponse]:
        svc = self.service

        def start():
            try:
                fields = convert.sampling_fields_from_pb(request)
            except ValueError as err:
                raise svc._invalid(err) from err
            return svc.generate(convert.prompt_from_pb(request.prompt), svc.sampling_params(**fields),
                                rid=request.rid or None)

        call = _unary("Generate", start, context)
        context.add_callback(lambda: call.cancel("the client cancelled the call"))
        try:
            for chunk in call.chunks(is_active=context.is_active):
                piece = chunk.text or chunk.token_ids
                if request.stream and piece:
                    yield convert.chunk_to_pb(call.rid, chunk.text, chunk.token_ids, chunk.logprobs,
                                              chunk.top_logprobs)
                if chunk.finished:
                    out = chunk.output
                    if out.finish_reason.get("type") == "abort":
                        message = str(out.finish_reason.get("message", "aborted"))
                        yield convert.error_to_pb(call.rid, abort_kind(message), message)
                    else:
                        yield convert.complete_to_pb(call.rid, out, call.warnings)
        except Exception as err:
            call.cancel(f"server error: {one_line(err)}")
            _fail(context, err, "Generate")

    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        return _unary("Score", lambda: convert.score_to_pb(self.service.score(
            convert.prompt_from_pb(request.prompt), list(request.choices), unconditional=request.unconditional)),
            context)

    def CachePrefix(self, request: pb.CachePrefixRequest, context: grpc.ServicerContext) -> pb.CachePrefixResponse:
        def body():
            prompt_tokens, cached, warnings = self.service.cache_prefix(convert.prompt_from_pb(request.prompt))
            return pb.CachePrefixResponse(prompt_tokens=prompt_tokens, cached_tokens=cached, warnings=warnings)

        return _unary("CachePrefix", body, context)

    def Flush(self, request: pb.FlushRequest, context: grpc.ServicerContext) -> pb.FlushResponse:
        def body():
            flushed, message = self.service.flush()
            return pb.FlushResponse(flushed=flushed, message=message)

        return _unary("Flush", body, context)

    def ModelInfo(self, request: pb.ModelInfoRequest, context: grpc.ServicerContext) -> pb.ModelInfoResponse:
        return _unary("ModelInfo", lambda: convert.model_info_to_pb(self.service.model_info()), context)

    def Health(self, request: pb.HealthRequest, context: grpc.ServicerContext) -> pb.HealthResponse:
        return _unary("Health", lambda: convert.health_to_pb(*self.service.health(request.check_generate)), context)

    def Metrics(self, request: pb.MetricsRequest, context: grpc.ServicerContext) -> pb.MetricsResponse:
        return _unary("Metrics", lambda: convert.metrics_to_pb(self.service.metrics()), context)


class GrpcServer:
    """A gRPC server for one RuntimeService: ``start()``, ``address``, ``stop(grace)``.

    One thread per RPC in flight (a Generate holds its thread while it streams); calls beyond
    max_workers wait in the executor's queue.
    """

    kind = "grpc"

    def __init__(self, service: RuntimeService, host: str = "127.0.0.1", port: int = 0, *,
                 max_workers: int = 256) -> None:
        self.service = service
        self.host = host
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="sglc-grpc"),
                                   options=SERVER_OPTIONS)
        pb_grpc.add_RuntimeServicer_to_server(RuntimeServicer(service), self._server)
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
