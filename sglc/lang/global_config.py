"""`sgl.global_config`: SGLang's process-wide frontend settings (`sglang.lang.global_config`).

Programs written for SGLang set these fields; each keeps SGLang's name and default. What each
does here:

- ``default_backend``: the backend `prog.run()` uses when none is passed; the same setting as
  ``sgl.set_default_backend(b)`` (which also checks that `b` is an sglc backend).
- ``verbosity``: 2 prints each finished program's text (eager `prog.run`), as in SGLang; 0 prints nothing.
- ``enable_precache_with_tracing``, ``skip_special_tokens_in_output``,
  ``spaces_between_special_tokens_in_out``, ``enable_parallel_encoding``: kept for SGLang
  programs that set them, and change nothing here: a compiled `run_batch` always prefills the
  batch's shared prefix (its CACHE_PREFIX hint), and the runtime always skips special tokens
  in output.
"""
from __future__ import annotations

from typing import Any


class GlobalConfig:
    """Mutable process-wide frontend settings (SGLang's names and defaults)."""

    def __init__(self) -> None:
        self.verbosity = 0
        self.default_backend: Any = None
        self.skip_special_tokens_in_output = True
        self.spaces_between_special_tokens_in_out = True
        self.enable_precache_with_tracing = True
        self.enable_parallel_encoding = True


global_config = GlobalConfig()

__all__ = ["GlobalConfig", "global_config"]
