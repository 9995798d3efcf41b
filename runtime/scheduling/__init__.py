"""Continuous batching: the request as the scheduler sees it, and the scheduler (policy only).

Bottom-up: ``request.py`` (Req, ReqStatus), ``decode_growth.py`` (DecodeGrowthEstimator),
``schedule_policy.py`` (queue order, in-batch prefix dedup), ``program_table.py`` / ``program_gate.py``
(programs as the unit of admission), ``schedule_batch.py`` (the plan of
one step), ``scheduler_config.py`` / ``scheduler_stats.py``, ``scheduler.py`` (Scheduler).

Imports ``cache`` (slots, table, radix tree) and, for the types of Req's per-request fields,
``sampling`` and ``output``. Never the model, the runner or the engine. ``program_table.py`` and
``program_gate.py`` (admission by program, issue 28) import no torch: the torch-free engine uses them.
"""
