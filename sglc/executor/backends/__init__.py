"""The executor's backends, one module each: ``srt`` (gRPC client of ``sglc serve``),
``openai_backend`` (any OpenAI-compatible endpoint), ``api_speculative`` (its speculation).

Backends by name (and the embedded runtime's, which lives in the runtime) come from
:func:`sglc.backends.make_backend`.
"""
