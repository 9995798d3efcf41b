"""The engine: the in-process runtime API over one model (``from sglc_runtime.engine import Engine``).

Bottom-up: ``engine_config.py`` (EngineConfig), ``stats.py`` (EngineStats, timers),
``prompt_ids.py`` (prompts -> token ids, score spans), ``request_trace.py`` (RequestTrace),
``engine_constraints.py`` (compile at submit, jump-forward), ``score_job.py`` (ScoreJob),
``engine.py`` (Engine: schedule -> run -> process).

Ties every lower package together; only ``server`` imports it.
"""
from .engine import Engine

__all__ = ["Engine"]
