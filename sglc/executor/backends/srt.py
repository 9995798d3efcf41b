"""SrtBackend: the executor's Backend over gRPC to an sglc runtime (`sglc serve`).

    backend = SrtBackend("127.0.0.1:30000")
    backend.generate(Prompt("Hello"), GenParams(max_new_tokens=8, temperature=0)).text

- Safe to share between threads (one channel; gRPC multiplexes calls over it).
- Every call has a deadline (``timeout``; ``info_timeout`` for the small RPCs), so a dead or
  stuck server raises :class:`sglc.errors.BackendError` instead of hanging.
- A call that fails with UNAVAILABLE before any answer arrived is retried once on a NEW
  channel: after a server restart on the same address the next call just works.
- API key: a server started with ``--api-key`` needs ``api_key=KEY`` (default: $SGLC_API_KEY),
  sent as the metadata ``authorization: Bearer KEY`` on every call.
- Program hints (issue 28): a prompt's ``hint`` travels as the request's ``hint`` (Generate,
  Score, CachePrefix); ``end_program`` is the EndProgram rpc (short deadline, never raises, 0 from
  a server that lacks it).
- Images: the runtime's default model is text-only. With ``image_mode="placeholder"`` (the
  default) each image becomes the text ``<image: NAME>`` at its IMAGE_MARKER in the prompt text
  (or before the text), and the call's meta carries ``warnings`` saying so; "reject" makes such
  calls fail with a BackendError (INVALID_ARGUMENT).
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Optional

import grpc

from sglc.errors import BackendError
from sglc.wire import client_convert
from sglc.wire.auth import API_KEY_ENV
from sglc.wire.backend import Backend, CallMeta, GenParams, GenResult, ModelInfo, Prompt, ScoreResult
from sglc.wire.prompt import IMAGE_MARKER, image_placeholder
from sglc.wire.proto import runtime_pb2 as pb
from sglc.wire.proto import runtime_pb2_grpc as pb_grpc

__all__ = ["SrtBackend", "BackendError", "IMAGE_MARKER", "image_placeholder", "CHANNEL_OPTIONS"]

#: Client channel options: large messages, keepalive pings during calls (a server that vanished
#: without closing the connection is noticed), quick reconnect attempts.
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", 64 * 2**20),
    ("grpc.max_receive_message_length", 64 * 2**20),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.enable_retries", 0),  # NOTE: retries are ours (see _invoke), never gRPC's hidden ones
    # NOTE: without a local pool a new channel shares the old one's subchannel, whose reconnect
    # backoff would make the retry after a server restart fail as well.
    ("grpc.use_local_subchannel_pool", 1),
)


#: Deadline (s) of EndProgram: advice at the end of a run, never worth waiting long for.
END_PROGRAM_TIMEOUT_S = 5.0


class SrtBackend(Backend):
    """A Backend talking to one runtime server at `endpoint` ("host:port")."""

    def __init__(self, endpoint: str, *, timeout: float = 600.0, info_timeout: float = 30.0,
                 image_mode: str = "placeholder", api_key: Optional[str] = None) -> None:
        """timeout: deadline (s) of Generate/Score/CachePrefix calls; info_timeout: of ModelInfo,
        Health, Metrics, Flush. image_mode: "placeholder" or "reject" (see the module doc).
        api_key: the server's key (default: $SGLC_API_KEY; none sends no key)."""
        if not isinstance(endpoint, str) or ":" not in endpoint:
            raise ValueError(f"SrtBackend endpoint must be 'host:port', got {endpoint!r}")
        if image_mode not in ("placeholder", "reject"):
            raise ValueError(f"SrtBackend image_mode must be 'placeholder' or 'reject', got {image_mode!r}")
        if not timeout > 0 or not info_timeout > 0:
            raise ValueError("SrtBackend timeouts must be > 0 seconds")
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.info_timeout = float(info_timeout)
        self.image_mode = image_mode
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._metadata = (("authorization", f"Bearer {key}"),) if key else None
        self._lock = threading.Lock()
        self._channels: list[grpc.Channel] = []  # the last one is current; older ones finish their calls
        self._stub: pb_grpc.RuntimeStub | None = None
        self._info: ModelInfo | None = None
        self._closed = False
        self._ends_programs = True  # False once the server said it has no EndProgram (an older one)
        self._connect()

    # --- connection ---
    def _connect(self) -> pb_grpc.RuntimeStub:
        channel = grpc.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
        self._channels.append(channel)
        self._stub = pb_grpc.RuntimeStub(channel)
        return self._stub

    def _current(self) -> pb_grpc.RuntimeStub:
        with self._lock:
            if self._closed:
                raise BackendError(f"srt backend {self.endpoint}: the backend is closed")
            return self._stub

    def _reconnect(self, failed: pb_grpc.RuntimeStub) -> None:
        """Replace the channel of `failed` (unless another thread already did)."""
        with self._lock:
            if self._stub is failed and not self._closed:
                self._connect()

    def _error(self, rpc: str, err: grpc.RpcError) -> BackendError:
        code = err.code() if hasattr(err, "code") else None
        details = (err.details() if hasattr(err, "details") else None) or str(err)
        details = " ".join(str(details).split())
        name = code.name if code is not None else "ERROR"
        return BackendError(f"srt backend {self.endpoint}: {rpc} failed: {name}: {details}")

    def _invoke(self, rpc: str, request: Any, timeout: float) -> Any:
        """A unary call with our one retry on UNAVAILABLE (on a new channel)."""
        for attempt in range(2):
            stub = self._current()
            try:
                return getattr(stub, rpc)(request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE and attempt == 0:
                    self._reconnect(stub)
                    continue
                raise self._error(rpc, err) from None
        raise AssertionError("unreachable")

    def _stream(self, request: pb.GenerateRequest, on_chunk: Optional[Callable[[pb.GenerateChunk], None]] = None
                ) -> pb.GenerateComplete:
        """Run a Generate call to its end; returns the complete message (BackendError otherwise)."""
        for attempt in range(2):
            stub = self._current()
            received = False
            call = stub.Generate(request, timeout=self.timeout, metadata=self._metadata)
            try:
                for msg in call:
                    received = True
                    kind = msg.WhichOneof("response")
                    if kind == "chunk":
                        if on_chunk is not None:
                            on_chunk(msg.chunk)
                    elif kind == "complete":
                        return msg.complete
                    elif kind == "error":
                        code = pb.GenerateError.Code.Name(msg.error.code)
                        raise BackendError(f"srt backend {self.endpoint}: Generate failed: {code}: {msg.error.message}")
                raise BackendError(f"srt backend {self.endpoint}: Generate failed: the stream ended without a result")
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE and attempt == 0 and not received:
                    self._reconnect(stub)
                    continue
                raise self._error("Generate", err) from None
            finally:
                call.cancel()  # no-op when finished; aborts the request if we stop early
        raise AssertionError("unreachable")

    # --- Backend ---
    def model_info(self) -> ModelInfo:
        if self._info is None:
            self._info = client_convert.model_info_from_pb(self._invoke("ModelInfo", pb.ModelInfoRequest(), self.info_timeout))
        return self._info

    def generate(self, prompt: Prompt, params: GenParams) -> GenResult:
        t0 = time.perf_counter()
        request = self._request(prompt, params, stream=False)
        complete = self._stream(request)
        return client_convert.gen_result_from_pb(complete, time.perf_counter() - t0, params)

    def generate_stream(self, prompt: Prompt, params: GenParams, on_text: Callable[..., None]) -> GenResult:
        """`generate` over a streaming Generate call: each chunk's text and its meta (tokens so
        far, logprobs when asked) go to `on_text` on arrival."""
        t0 = time.perf_counter()
        produced = [0]

        def on_chunk(chunk: pb.GenerateChunk) -> None:
            produced[0] += len(chunk.token_ids)
            on_text(chunk.text, client_convert.chunk_meta(chunk, produced[0], params))

        complete = self._stream(self._request(prompt, params, stream=True), on_chunk)
        return client_convert.gen_result_from_pb(complete, time.perf_counter() - t0, params)

    def stream(self, prompt: Prompt, params: GenParams) -> Iterator[str]:
        """The generated text piece by piece (as the server decodes it)."""
        import queue

        pieces: queue.SimpleQueue = queue.SimpleQueue()
        done = object()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self._stream(self._request(prompt, params, stream=True), lambda c: pieces.put(c.text))
            except BaseException as err:  # handed to the consumer
                failure.append(err)
            finally:
                pieces.put(done)

        threading.Thread(target=run, name="srt-stream", daemon=True).start()
        while (item := pieces.get()) is not done:
            if item:
                yield item
        if failure:
            raise failure[0]

    def _request(self, prompt: Prompt, params: GenParams, *, stream: bool) -> pb.GenerateRequest:
        try:
            return client_convert.generate_request(prompt, params, rid=uuid.uuid4().hex, stream=stream,
                                            image_mode=self.image_mode)
        except (ValueError, TypeError) as err:
            raise BackendError(f"srt backend {self.endpoint}: Generate: {err}") from None

    def score(self, prompt: Prompt, choices: list[str], unconditional: bool = False) -> ScoreResult:
        t0 = time.perf_counter()
        request = client_convert.score_request(prompt, choices, unconditional, self.image_mode)
        response = self._invoke("Score", request, self.timeout)
        return client_convert.score_result_from_pb(response, time.perf_counter() - t0, unconditional)

    def cache_prefix(self, prompt: Prompt) -> CallMeta:
        t0 = time.perf_counter()
        response = self._invoke("CachePrefix", client_convert.cache_prefix_request(prompt, self.image_mode),
                                self.timeout)
        return client_convert.call_meta(response.prompt_tokens, response.cached_tokens,
                                 latency_s=time.perf_counter() - t0, warnings=response.warnings)

    def end_program(self, program_id: str) -> int:
        """EndProgram (issue 28): the cached tokens the server released; 0 on any failure (advice).
        A server without the rpc (UNIMPLEMENTED) is not asked again."""
        if not self._ends_programs:
            return 0
        try:
            stub = self._current()
            response = stub.EndProgram(pb.EndProgramRequest(program_id=program_id),
                                       timeout=min(self.info_timeout, END_PROGRAM_TIMEOUT_S), metadata=self._metadata)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._ends_programs = False
            return 0
        except BackendError:  # the backend is closed
            return 0
        return int(response.released_tokens)

    def metrics(self) -> dict[str, Any]:
        return client_convert.metrics_from_pb(self._invoke("Metrics", pb.MetricsRequest(), self.info_timeout))

    def health(self, check_generate: bool = False) -> tuple[str, str]:
        """("SERVING" | "NOT_SERVING" | "DRAINING", message)."""
        r = self._invoke("Health", pb.HealthRequest(check_generate=check_generate), self.info_timeout)
        return pb.HealthResponse.Status.Name(r.status), r.message

    def flush_cache(self) -> bool:
        """Empty the server's prefix cache (False while requests are in flight)."""
        return self._invoke("Flush", pb.FlushRequest(), self.info_timeout).flushed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._channels = self._channels, []
        for channel in channels:
            channel.close()

    def __enter__(self) -> SrtBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SrtBackend({self.endpoint!r})"
