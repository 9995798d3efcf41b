"""The engine: the in-process runtime API over one model (``from sglc_runtime.engine import Engine``).

Bottom-up: ``engine_config.py`` (EngineConfig), ``stats.py`` (EngineStats, timers),
``prompt_ids.py`` (prompts -> token ids, score spans), ``request_trace.py`` (RequestTrace),
``engine_constraints.py`` (compile at submit, jump-forward), ``score_job.py`` (ScoreJob),
``engine.py`` (Engine: schedule -> run -> process), ``native_step.py`` (a torch-free step's requests and
rows), ``native_engine.py`` (NativeEngine: the same API without torch, over ``model/native_model.py``).

Ties every lower package together; only ``server`` imports it.
"""
__all__ = ["Engine", "NativeEngine"]


def __getattr__(name: str):
    # NOTE: lazy: importing the package (stats, prompt_ids) must not import torch with engine.py
    if name == "Engine":
        from .engine import Engine

        return Engine
    if name == "NativeEngine":
        from .native_engine import NativeEngine

        return NativeEngine
    raise AttributeError(name)
