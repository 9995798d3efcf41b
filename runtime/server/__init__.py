"""The runtime's servers: what `sglc serve` runs in front of one Engine.

- service.py: RuntimeService, the transport-neutral request API (validation -> RequestError,
  limits, images on a text-only model, calls in flight with cancel, score, cache prefix, model
  info, health, metrics). Every server adapts this one object.
- limits.py: ServerLimits, every request-size limit in one place (checked before the work).
- calls.py: GenerateCall / ScoreCall / CallGroup, the engine work of one client call.
- auth.py: the optional API key (--api-key / SGLC_API_KEY).
- prompts, chat templates, ConstraintSpec and every proto <-> Python conversion live in
  :mod:`sglc.wire` (the contract the executor's clients share); grpc_server converts through
  ``sglc.wire.server_convert``.
- grpc_server.py: the gRPC servicer and server. launch.py: engine + servers + signal handling.
- http_server.py / http_handlers.py / http_guard.py / openai_protocol.py: the HTTP server;
  host_allowlist.py (DNS rebinding: which Host / Origin names are this server), chat_roles.py (the
  roles the model's chat template takes), public_paths.py (info names the model, not its path),
  connection_guard.py (request read deadlines, connection caps).

Importing this package (or service) never imports torch; grpc_server and launch do
only when they start an engine.
"""
import importlib
from typing import Any

#: imported on first use (PEP 562): `sglc serve` imports launch.py first, and the service's modules
#: (asyncio among them) then load while the engine does (launch.Runtime)
_LAZY = {**dict.fromkeys(("IMAGE_MARKER", "PromptInput", "RequestError", "image_placeholder"), "sglc.wire.prompt"),
         **dict.fromkeys(("RuntimeService", "ServiceUnavailable"), f"{__name__}.service")}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["IMAGE_MARKER", "PromptInput", "RequestError", "RuntimeService", "ServiceUnavailable", "image_placeholder"]
