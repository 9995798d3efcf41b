"""Output: tokens to text, stop rules, and what the engine hands back.

Bottom-up: ``outputs.py`` (GenerateOutput, StreamChunk, ScoreResult), ``stop_checker.py``
(FinishReason, StopChecker), ``detokenizer.py`` (IncrementalDetokenizer), ``text_stream.py``
(TextStream: detokenizer + stop rules), ``request_output.py`` (RequestOutput: one request's
output as it is assembled and delivered).

Imports only ``sampling`` (SamplingParams, TokenResult, the constraint cursor's protocol).
"""
