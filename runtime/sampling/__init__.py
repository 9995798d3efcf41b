"""Sampling: per-request parameters, the batched sampler, logprobs, per-request sampling state.

Bottom-up: ``sampling_params.py`` (SamplingParams, as_params), ``penalties.py``, ``logprobs.py``,
``sampler.py`` (SamplingBatch, Sampler), ``numpy_sampling.py`` (the same rules on one numpy row,
for the torch-free engine), ``sampling_state.py`` (SamplingState: a request's
generator, constraint cursor and prompt logprobs), ``token_result.py`` (TokenResult: one
sampled token with its logprobs).

Imports only ``constrained`` (lazily, for ``SamplingParams.constraint_spec``).
"""
