"""The executor's backends, one module each: ``srt`` (gRPC client of ``sglc serve``),
``openai_backend`` (any OpenAI-compatible endpoint), ``api_speculative`` (its speculation),
``sglang_http`` (SGLang's HTTP ``/generate``: sglang-router, ``sglc serve --http-port``, SGLang).

Backends by name (and the embedded runtime's, which lives in the runtime) come from
:func:`sglc.backends.make_backend`.
"""
