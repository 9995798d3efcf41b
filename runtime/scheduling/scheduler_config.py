"""SchedulerConfig: the scheduler's sizes and policy knobs, validated once."""
from __future__ import annotations

from dataclasses import dataclass

from .schedule_policy import POLICIES


@dataclass(slots=True)
class SchedulerConfig:
    """Sizes and policy knobs. ``chunk_size=None`` disables chunked prefill."""

    num_kv_slots: int
    max_running: int = 32
    max_context: int = 2048
    max_prefill_tokens: int = 4096
    chunk_size: int | None = 512
    policy: str = "lpm"
    seed: int = 0
    in_batch_prefix_threshold: int = 32
    lpm_max_queue: int = 128
    init_new_token_ratio: float = 0.7
    min_new_token_ratio: float = 0.1
    new_token_ratio_decay: float = 0.001
    clip_max_new_tokens: int = 4096
    eos_token_ids: tuple[int, ...] = ()
    disable_radix_cache: bool = False
    hinted_share: float = 0.5  # the most of the KV pool program hints may keep (cache/retention.py)
    program_admit_share: float = 0.9  # programs start while in-flight ones are expected to fit in this share
    debug: bool = False  # pool double-free checks + check_integrity() after every call

    def __post_init__(self) -> None:
        for name in ("num_kv_slots", "max_running", "max_context", "max_prefill_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"SchedulerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"SchedulerConfig.chunk_size must be None or >= 1, got {self.chunk_size}")
        if self.policy not in POLICIES:
            raise ValueError(f"SchedulerConfig.policy {self.policy!r} is not one of {POLICIES}")
        if not 0.0 < self.program_admit_share <= 1.0:
            raise ValueError(f"SchedulerConfig.program_admit_share must be in (0, 1], got {self.program_admit_share}")
        if not 0.0 <= self.hinted_share <= 1.0:
            raise ValueError(f"SchedulerConfig.hinted_share must be in [0, 1], got {self.hinted_share}")
        self.eos_token_ids = tuple(self.eos_token_ids)

    @property
    def prefill_budget(self) -> int:
        """Prefill tokens per step."""
        if self.chunk_size is None:
            return self.max_prefill_tokens
        return min(self.max_prefill_tokens, self.chunk_size)
