"""The runtime's servers: what `sglc serve` runs in front of one Engine.

- service.py: RuntimeService, the transport-neutral request API (validation -> RequestError,
  images on a text-only model, Generate calls with cancel, score, cache prefix, model info,
  health, metrics). Every server adapts this one object.
- prompts.py: PromptInput, images on a text-only model (IMAGE_MARKER, "<image: NAME>").
- chat_template.py: role prefixes/suffixes derived from the tokenizer's jinja chat template.
- convert.py: the ONE module converting proto/runtime.proto messages <-> Python (server and
  client side; torch-free so the gRPC client can import it).
- grpc_server.py: the gRPC servicer and server. launch.py: engine + servers + signal handling.
The HTTP server of the ecosystem-protocols issue goes here too (see launch.build_frontends).

Importing this package (or service/convert) never imports torch; grpc_server and launch do
only when they start an engine.
"""
from .prompts import IMAGE_MARKER, PromptInput, RequestError, image_placeholder
from .service import RuntimeService, ServiceUnavailable

__all__ = ["IMAGE_MARKER", "PromptInput", "RequestError", "RuntimeService", "ServiceUnavailable", "image_placeholder"]
