"""Backends by name: ``make_backend(name, endpoint=None, **opts)``.

The composition root: the one module that knows both halves. The executor's backends (srt,
openai) live in :mod:`sglc.executor.backends`; the embedded runtime's backend lives in the
runtime (:mod:`sglc_runtime.server.engine_backend`), so neither half imports the other and
both speak :mod:`sglc.wire`.

- ``"srt"`` with an endpoint (``host:port`` or ``http://host:port``): the gRPC client of a
  ``sglc serve`` runtime (:class:`sglc.executor.backends.srt.SrtBackend`); `opts`: ``timeout``,
  ``image_mode``, ``api_key`` (default ``$SGLC_API_KEY``).
- ``"srt"`` without an endpoint: the *embedded* runtime — an in-process engine on the default
  model (:class:`sglc_runtime.server.engine_backend.EngineBackend`); `opts` are engine settings
  (``model``, ``dtype``, ``schedule_policy``, ``disable_radix_cache``, ``timeout``, ...).
- ``"engine"``: the embedded runtime by its own name.
- ``"openai"``: any OpenAI-compatible HTTP endpoint (``http://host:port`` or ``host:port``; an
  ``sglc serve --http-port`` or a hosted API): :class:`sglc.executor.backends.openai_backend.OpenAIBackend`;
  `opts`: ``model``, ``model_type`` ("auto" | "completion" | "chat"), ``api_key``, ``timeout``.
- ``"sglang"``: SGLang's HTTP ``/generate`` at ``http://host:port`` (sglang-router / ``sglc fleet``,
  one ``sglc serve --http-port``, or a real SGLang server):
  :class:`sglc.executor.backends.sglang_http.SGLangBackend`; `opts`: ``api_key``, ``timeout``.
"""
from __future__ import annotations

from typing import Any, Optional

from sglc.executor.errors import BackendError
from sglc.wire.backend import Backend

BACKENDS = ("srt", "engine", "openai", "sglang")


def normalize_endpoint(endpoint: str) -> str:
    """'http://127.0.0.1:30000/' -> '127.0.0.1:30000' (the gRPC target form)."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise ValueError(f"an endpoint is 'host:port', got {endpoint!r}")
    target = endpoint.strip()
    for scheme in ("http://", "https://", "grpc://"):
        if target.startswith(scheme):
            target = target[len(scheme):]
    target = target.rstrip("/")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"an endpoint is 'host:port' (e.g. 127.0.0.1:30000), got {endpoint!r}")
    return target


def make_backend(name: str, endpoint: Optional[str] = None, **opts: Any) -> Backend:
    """A backend by name (see the module docstring)."""
    if name == "srt" and endpoint is not None:
        try:
            from sglc.executor.backends.srt import SrtBackend
        except ImportError as err:
            raise BackendError(f"the srt (gRPC) backend is not available in this build: {err}") from None
        return SrtBackend(normalize_endpoint(endpoint), **opts)
    if name in ("srt", "engine"):
        if endpoint is not None:
            raise ValueError("the engine backend runs in this process and takes no endpoint")
        # NOTE: the call pools' exit hook is registered before the engine starts its own: atexit
        # runs hooks last-in first-out, so at exit engines stop (aborting what still runs and
        # waking the workers that wait on it) before the pools join those workers.
        from sglc.executor.pool import stop_all_pools  # noqa: F401
        from sglc_runtime.server.engine_backend import EngineBackend

        return EngineBackend(**opts)
    if name == "openai":
        from sglc.executor.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(endpoint, **opts)
    if name == "sglang":
        if endpoint is None:
            raise ValueError("the sglang backend needs --endpoint http://host:port (a router, sglc serve "
                             "--http-port, or an SGLang server)")
        from sglc.executor.backends.sglang_http import SGLangBackend

        return SGLangBackend(endpoint, **opts)
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
