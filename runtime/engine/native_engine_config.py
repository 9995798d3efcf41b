"""What the native engine is built from: its settings, and its model's load started on its own.

``sglc serve --engine native`` starts the load (``start_model_load``) before it imports the engine,
the servers and the tokenizer: the load is mostly native code (the tiles' repacking, the KV pool's
fill) that runs without the GIL, so the start's ~0.3 s of imports happen beside it instead of
before it (docs/benchmarks.md, "Without torch"). Light on purpose: it imports the model's modules
only when a load starts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .thread_policy import start_transient_thread

if TYPE_CHECKING:
    from ..model.native_model import NativeGGUFModel


@dataclass
class NativeEngineConfig:
    """model: a GGUF file, or a name that resolves to one (``default_model.gguf_source``);
    dtype: the activations' and KV's ("bfloat16", as the torch engine's GGUF path, or "float32");
    hinted_share: the most of the KV pool program hints may keep (cache/retention.py);
    program_admit_share: new programs start while the in-flight ones' expected footprints fit this
    share of the pool (scheduling/program_table.py); precompute: prefill a program's next prompt
    when a call whose hint carries its continuation ends (precompute.py; False for comparisons)."""

    model: str = "default"
    num_kv_slots: int = 4096
    max_running_requests: int = 64
    max_context: int | None = None
    chunked_prefill_size: int = 256
    threads: int | None = None
    seed: int | None = None
    dtype: str = "bfloat16"
    disable_radix_cache: bool = False
    hinted_share: float = 0.5
    program_admit_share: float = 0.9
    precompute: bool = True

    def __post_init__(self) -> None:
        for name in ("num_kv_slots", "max_running_requests", "chunked_prefill_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"NativeEngineConfig.{name} must be positive, got {getattr(self, name)}")
        if isinstance(self.hinted_share, bool) or not isinstance(self.hinted_share, (int, float)) \
                or not 0 <= self.hinted_share <= 1:
            raise ValueError(f"NativeEngineConfig.hinted_share must be a number in [0, 1], got {self.hinted_share!r}")
        if isinstance(self.program_admit_share, bool) or not isinstance(self.program_admit_share, (int, float)) \
                or not 0 < self.program_admit_share <= 1:
            raise ValueError("NativeEngineConfig.program_admit_share must be a number in (0, 1], "
                             f"got {self.program_admit_share!r}")


def start_model_load(cfg: NativeEngineConfig) -> Callable[[], NativeGGUFModel]:
    """The model ``cfg`` names, loading from now in a short-lived thread (so the OpenMP pool its
    repacking opens ends with it and the stepping thread's is the only one: thread_policy.py);
    the returned function waits for it (or raises the load's error). ValueError now if the model
    is not a GGUF file."""
    from ..model.default_model import gguf_source
    from ..model.native import torch_libraries

    torch_libraries.preload()  # NOTE: a no-op when `sglc serve` started it already
    source = gguf_source(cfg.model)
    if source is None:
        raise ValueError(f"the native engine runs GGUF files; {cfg.model!r} is not one")
    from ..model.native_model import NativeGGUFModel  # NOTE: imported here, before the thread starts: see the docstring

    # NOTE: huge pages deferred: the engine collapses the model into them once it first idles
    return start_transient_thread(
        lambda: NativeGGUFModel(source, kv_slots=cfg.num_kv_slots, dtype=cfg.dtype, threads=cfg.threads,
                                defer_huge_pages=True),
        name="sglc-native-setup")
