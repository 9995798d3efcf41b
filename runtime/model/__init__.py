"""The model: where its files come from, the network, attention, and the runner that drives it.

Bottom-up: ``model_config.py``, ``weights.py``, ``gguf_convert.py`` / ``default_model.py``
(model files), ``tokenizer.py``, ``forward_batch.py`` (the runner <-> model contract),
``native/`` (fused CPU kernels, built once per machine), ``attention/`` (backends), ``models/``
(Llama family), ``placement.py`` (device and backend),
``cuda_graph.py`` (decode replay), ``model_runner.py`` (ScheduleBatch -> logits -> tokens).

Imports ``cache`` (KVBuffer), ``sampling`` (sampler, logprobs) and, in ``model_runner.py`` only,
``scheduling`` (the plan it executes). Never the engine.
"""
