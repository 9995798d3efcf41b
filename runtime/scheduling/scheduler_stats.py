"""SchedulerStats: a snapshot of the scheduler's counters (``Scheduler.stats()``)."""
from __future__ import annotations

from typing import NamedTuple


class SchedulerStats(NamedTuple):
    num_waiting: int
    num_running: int
    num_finished: int
    prompt_tokens: int  # prompt tokens of admitted requests (first admission only)
    cached_tokens: int  # of which served by the radix cache
    cache_hit_rate: float
    computed_prefill_tokens: int  # prefill tokens actually fed to the model (incl. recompute)
    decode_tokens: int
    num_used_slots: int
    cached_slots: int
    pool_usage: float
    num_retractions: int
    new_token_ratio: float
    num_steps: int
    hinted_tokens: int = 0  # cached tokens live program hints keep (each token once)
    hint_evictions: int = 0  # hinted texts evicted while their lease ran
    num_programs: int = 0  # programs in flight (calls admitted, not ended)
    provisional_programs: int = 0  # programs started provisional (program_table.py), since start
    promoted_programs: int = 0  # of those, promoted to committed
