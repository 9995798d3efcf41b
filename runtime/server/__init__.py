"""The runtime's servers: what `sglc serve` runs in front of one Engine.

- service.py: RuntimeService, the transport-neutral request API (validation -> RequestError,
  limits, images on a text-only model, calls in flight with cancel, score, cache prefix, model
  info, health, metrics). Every server adapts this one object.
- limits.py: ServerLimits, every request-size limit in one place (checked before the work).
- calls.py: GenerateCall / ScoreCall / CallGroup, the engine work of one client call.
- auth.py: the optional API key (--api-key / SGLC_API_KEY).
- prompts.py: PromptInput, images on a text-only model (IMAGE_MARKER, "<image: NAME>").
- chat_template.py: role prefixes/suffixes derived from the tokenizer's jinja chat template.
- convert.py: the ONE module converting proto/runtime.proto messages <-> Python (server and
  client side; torch-free so the gRPC client can import it).
- grpc_server.py: the gRPC servicer and server. launch.py: engine + servers + signal handling.
- http_server.py / http_handlers.py / http_guard.py / openai_protocol.py: the HTTP server.

Importing this package (or service/convert) never imports torch; grpc_server and launch do
only when they start an engine.
"""
from .prompts import IMAGE_MARKER, PromptInput, RequestError, image_placeholder
from .service import RuntimeService, ServiceUnavailable

__all__ = ["IMAGE_MARKER", "PromptInput", "RequestError", "RuntimeService", "ServiceUnavailable", "image_placeholder"]
