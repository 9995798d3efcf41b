"""A GGUF model run by the native binding in a process that never imports torch (issue #26).

The first piece of a torch-free CPU engine: ``import torch`` alone is ~1 s and ~210 MiB of a
start whose budget, llama-server's twice, is ~1.2 s for a small model; the binding's own
libraries are ~0.2 s and ~100 MiB (``native/c_library.py``). Here the GGUF file is read with
numpy (``gguf.GGUFFile.arrays``: the linears stay memory-mapped until repacked), every linear is
repacked into its kernel's tiles (``gguf_tiles``), and each decoder layer is the binding's
``DecodeLayer`` (``native/binding/decode_layer.h``, the same C++ the torch engine runs for its
decode batches), called through ``c_api.h``. The embedding rows are decoded per step from the
file's blocks, the final norm and the head are the binding's ops: every step is float32 numpy
arrays handed to native code, with nothing in between.

A step takes rows of any mix of requests: each row names its position, the KV slot it writes and
the slots it attends (its request's, itself last), so a prompt's rows are one call (the decode
attention kernel writes every row's K/V before any row attends). What it runs today: the dense
Llama-style families (Llama, Mistral without a sliding window, Qwen2, Qwen3) with plain RoPE and
linears in a tiled GGUF type; anything else is refused by name, and the torch engine
(``models/decoder.py``) runs it. What the engine around it needs next (scheduler, radix cache and
sampler without torch) is in docs/runtime_model.md ("A torch-free model").
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .gguf import GGUFFile
from .gguf.weight import GGUFWeight
from .model_config import ModelConfig
from .native.c_library import BF16, CLibrary, CTensor, c_library, handles, strings

#: Hugging Face architectures this model runs (the dense Llama-style decoders)
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
#: GGUF type -> (tile kind of stacked_linear / DecodeLayer, tensors gguf_tiles returns for it)
TILE_KINDS = {"Q4_K": ("q4k", 5), "Q5_K": ("q5k", 5), "Q6_K": ("q6k", 3), "Q8_0": ("q8b", 2),
              "Q5_0": ("q5_0", 2), "Q5_1": ("q5_1", 3), "Q4_0": ("q4", 3), "Q4_1": ("q4", 3)}
TILE = 16  # output channels per tile
#: activation / KV dtypes a step can run in
DTYPES = ("float32", "bfloat16")


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even as torch's conversion does."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32 (exact)."""
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class NativeModelError(ValueError):
    """A model (or a step's inputs) this torch-free path does not run, with the reason."""


def unsupported_reason(c: ModelConfig) -> str | None:
    """Why this path cannot run a model of config ``c`` (None: it can)."""
    checks = [
        (c.architecture not in ARCHITECTURES, f"architecture {c.architecture} (runs {', '.join(ARCHITECTURES)})"),
        (c.rope_scaling is not None, f"rope scaling {c.rope_scaling}"),
        (c.partial_rotary_factor != 1.0, f"partial rotary factor {c.partial_rotary_factor}"),
        (c.sliding_window is not None, f"sliding window {c.sliding_window}"),
        (c.hidden_act != "silu", f"activation {c.hidden_act}"),
        (c.num_experts > 0, "experts"),
        (c.qk_norm not in (None, "head") or c.clip_qkv is not None, "full-width q/k norms or clip_qkv"),
        (c.attn_logit_softcap is not None or c.final_logit_softcap is not None, "logit soft-capping"),
        (c.embed_scale is not None or c.attn_scale is not None or c.norm_weight_offset != 0.0 or c.sandwich_norms,
         "Gemma's scales and norms"),
        (c.o_bias, "an output projection bias"),
    ]
    found = [why for bad, why in checks if bad]
    return "; ".join(found) if found else None


def rope_tables(head_dim: int, theta: float, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """Plain RoPE's float32 cos / sin tables [positions, head_dim] (Hugging Face's halves layout)."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)
    freqs = np.outer(np.arange(positions, dtype=np.float32), inv_freq).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


@dataclass
class _Projection:
    """A linear as tiled parts (their kinds and tensors) and an optional float32 bias."""

    kinds: list[str]
    tensors: list[CTensor]
    bias: CTensor | None
    out_features: int


class NativeGGUFModel:
    """A GGUF file's model on the native binding, stepped with numpy arrays (no torch)."""

    def __init__(self, path: str | Path, *, kv_slots: int = 4096, dtype: str = "float32", threads: int | None = None,
                 level: str | None = None) -> None:
        if dtype not in DTYPES:
            raise NativeModelError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        self.dtype = dtype
        self.lib: CLibrary = c_library(level)
        if threads is not None:
            self.lib.set_threads(threads)
        f = GGUFFile(path)
        raw_config = f.config_dict()
        c = self.config = ModelConfig.from_dict(raw_config)
        why = unsupported_reason(c)
        if why is not None:
            raise NativeModelError(f"{path}: the torch-free model does not run {why}")
        if kv_slots < 1:
            raise NativeModelError(f"kv_slots must be positive, got {kv_slots}")
        arrays = f.arrays(raw_config)
        self.path, self.kv_slots = Path(path), kv_slots
        self.embed: GGUFWeight = self._weight(arrays, "model.embed_tokens.weight")
        head = arrays.get("lm_head.weight", self.embed) if not c.tie_word_embeddings else self.embed
        self.head = self._projection([self._weight({"lm_head.weight": head}, "lm_head.weight")], None)
        self.final_norm = self._vector(arrays, "model.norm.weight")
        self.scale = c.head_dim ** -0.5
        # NOTE: no request outlives the pool, so positions stop below it
        positions = min(c.max_position_embeddings, kv_slots)
        self.cos, self.sin = (CTensor.wrap(self.lib, t) for t in rope_tables(c.head_dim, c.rope_theta, positions))
        self.layers, self.input_norms = [], []
        for i in range(c.num_hidden_layers):
            self.layers.append(self._layer(arrays, f"model.layers.{i}."))
            self.input_norms.append(self._vector(arrays, f"model.layers.{i}.input_layernorm.weight"))
        shape = (kv_slots, c.num_key_value_heads, c.head_dim)
        # NOTE: written now (np.full, not calloc's lazy zeros): the pool is resident from the start, as
        # the torch engine's, so a machine without room for it fails at load, not mid-request
        cell = np.float32 if dtype == "float32" else np.uint16
        zeros = lambda: np.full(shape, 0, cell)  # noqa: E731
        self.k_cache = [self._activations(zeros()) for _ in range(c.num_hidden_layers)]
        self.v_cache = [self._activations(zeros()) for _ in range(c.num_hidden_layers)]
        f.release_resident_pages()  # NOTE: the tiles hold the weights now; the embedding rows re-read on use

    # ------------------------------------------------------------------ load
    @staticmethod
    def _weight(arrays: dict, name: str) -> GGUFWeight:
        w = arrays.get(name)
        if not isinstance(w, GGUFWeight):
            raise NativeModelError(f"tensor {name} is missing or not a matrix")
        return w

    def _activations(self, values: np.ndarray) -> CTensor:
        """A handle over ``values`` in the step dtype: float32 values (converted to bfloat16 when
        that is the dtype) or bfloat16 bits (uint16) as they are."""
        if self.dtype == "float32":
            return CTensor.wrap(self.lib, np.ascontiguousarray(values, dtype=np.float32))
        bits = values if values.dtype == np.uint16 else to_bf16(values)
        return CTensor.wrap(self.lib, bits, code=BF16)

    def _vector(self, arrays: dict, name: str) -> CTensor:
        v = arrays.get(name)
        if not isinstance(v, np.ndarray):
            raise NativeModelError(f"tensor {name} is missing or not a vector")
        return self._activations(v.astype(np.float32))

    def _tiles(self, w: GGUFWeight) -> tuple[str, list[CTensor]]:
        if w.type_name not in TILE_KINDS:
            raise NativeModelError(f"{w.name}: GGUF type {w.type_name} has no tile kernel here "
                                   f"(runs {', '.join(TILE_KINDS)})")
        kind, count = TILE_KINDS[w.type_name]
        raw = CTensor.wrap(self.lib, np.ascontiguousarray(w.raw))
        out = (ctypes.c_void_p * 5)()
        n = ctypes.c_int()
        self.lib.call("sglc_c_gguf_tiles", ctypes.c_void_p(raw.handle), w.type_name.encode(), w.rows, w.cols, out,
                      ctypes.byref(n))
        tensors = [CTensor(self.lib, out[i]) for i in range(n.value)]
        if len(tensors) != count:
            raise NativeModelError(f"{w.name}: {len(tensors)} tile tensors for {w.type_name}, expected {count}")
        return kind, tensors

    def _projection(self, parts: list[GGUFWeight], bias: np.ndarray | None) -> _Projection:
        kinds, tensors = [], []
        for w in parts:
            if w.rows % TILE:
                raise NativeModelError(f"{w.name}: {w.rows} output channels are not a multiple of {TILE}")
            kind, ts = self._tiles(w)
            kinds.append(kind)
            tensors += ts
        b = None if bias is None else self._activations(bias.astype(np.float32))
        return _Projection(kinds, tensors, b, sum(w.rows for w in parts))

    def _set(self, layer: int, which: str, p: _Projection) -> None:
        self.lib.call("sglc_c_layer_set_projection", ctypes.c_void_p(layer), which.encode(), strings(p.kinds),
                      len(p.kinds), handles(p.tensors), len(p.tensors),
                      ctypes.c_void_p(p.bias.handle if p.bias else None))

    def _layer(self, arrays: dict, p: str) -> "_Layer":
        c = self.config
        q, k, v = (self._weight(arrays, f"{p}self_attn.{n}_proj.weight") for n in "qkv")
        bias = None
        if c.qkv_bias:
            bias = np.concatenate([arrays[f"{p}self_attn.{n}_proj.bias"] for n in "qkv"])
        gate, up = (self._weight(arrays, f"{p}mlp.{n}_proj.weight") for n in ("gate", "up"))
        layer = _Layer(self.lib)
        keep = [self._projection([q, k, v], bias), self._projection([self._weight(arrays, f"{p}self_attn.o_proj.weight")],
                                                                    None),
                self._projection([gate, up], None), self._projection([self._weight(arrays, f"{p}mlp.down_proj.weight")],
                                                                     None)]
        for which, proj in zip(("qkv", "o", "gate_up", "down"), keep):
            self._set(layer.handle, which, proj)
        norms = [self._vector(arrays, f"{p}self_attn.{n}_norm.weight") if c.qk_norm == "head" else None
                 for n in "qk"]
        self.lib.call("sglc_c_layer_set_attention", ctypes.c_void_p(layer.handle), c.num_attention_heads,
                      c.num_key_value_heads, c.head_dim, *(ctypes.c_void_p(n.handle if n else None) for n in norms),
                      ctypes.c_void_p(None), ctypes.c_double(self.scale), ctypes.c_double(0.0))
        mlp_norm = self._vector(arrays, f"{p}post_attention_layernorm.weight")
        self.lib.call("sglc_c_layer_set_mlp", ctypes.c_void_p(layer.handle), ctypes.c_void_p(mlp_norm.handle),
                      ctypes.c_void_p(None), b"silu", ctypes.c_double(c.rms_norm_eps))
        layer.keep = [*keep, *[n for n in norms if n], mlp_norm]
        return layer

    # ------------------------------------------------------------------ forward
    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 [len(ids), hidden]: the tokens' embedding rows decoded from the file's blocks."""
        if ids.size and (ids.min() < 0 or ids.max() >= self.embed.rows):
            raise NativeModelError(f"token id outside the vocabulary of {self.embed.rows}")
        return np.ascontiguousarray(self.embed.dequantize(ids), dtype=np.float32)

    def forward(self, ids: np.ndarray, positions: np.ndarray, loc: np.ndarray, index: np.ndarray,
                lens: np.ndarray, logit_rows: np.ndarray | None = None) -> np.ndarray:
        """One step over T rows: ``ids``, ``positions`` and ``loc`` (the KV slot each row writes)
        int64 [T]; ``index`` int64 [T, L] the slots row r attends in its first ``lens[r]`` entries
        (its own ``loc`` last). Returns float32 logits of ``logit_rows`` (default: every row)."""
        ids, positions, loc, lens = (np.ascontiguousarray(a, dtype=np.int64) for a in (ids, positions, loc, lens))
        index = np.ascontiguousarray(index, dtype=np.int64)
        t = ids.shape[0]
        if not (positions.shape == loc.shape == lens.shape == (t,) and index.ndim == 2 and index.shape[0] == t):
            raise NativeModelError(f"a step's rows disagree: ids {ids.shape}, positions {positions.shape}, loc "
                                   f"{loc.shape}, lens {lens.shape}, index {index.shape}")
        if t and (positions.min() < 0 or positions.max() >= self.cos.keep.shape[0]):
            raise NativeModelError(f"a position outside [0, {self.cos.keep.shape[0]}) (the model's context)")
        lib = self.lib
        h = self._activations(self.embed_rows(ids))
        h_array = h.keep  # NOTE: the layers add into it in place
        step = [CTensor.wrap(lib, a) for a in (positions, loc, index, lens)]
        x = _out(lib, "sglc_c_rms_norm", h, self.input_norms[0], ctypes.c_double(self.config.rms_norm_eps))
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            next_norm = self.input_norms[i + 1] if i < last else None
            x = _out(lib, "sglc_c_layer_forward", ctypes.c_void_p(layer.handle), h, x, step[0], self.cos, self.sin,
                     self.k_cache[i], self.v_cache[i], step[1], step[2], step[3],
                     ctypes.c_void_p(next_norm.handle if next_norm else None))
        rows = h_array if logit_rows is None else np.ascontiguousarray(h_array[np.asarray(logit_rows, np.int64)])
        normed = _out(lib, "sglc_c_rms_norm", self._activations(rows), self.final_norm,
                      ctypes.c_double(self.config.rms_norm_eps))
        if self.dtype != "float32":  # NOTE: the head is given float32 rows, as the torch engine's
            normed = CTensor.wrap(lib, from_bf16(normed.numpy()))
        hp = self.head
        logits = _out(lib, "sglc_c_stacked_linear", normed, strings(hp.kinds), len(hp.kinds), handles(hp.tensors),
                      len(hp.tensors))
        return logits.numpy()[:, :hp.out_features].copy()

    def generate_greedy(self, prompt: list[int], max_new_tokens: int, stop_ids: tuple[int, ...] = ()) -> list[int]:
        """Greedy tokens after ``prompt`` (one request in slots 0..n), its prompt in one step."""
        n = len(prompt)
        if n < 1 or n + max_new_tokens > min(self.kv_slots, self.cos.keep.shape[0]):
            raise NativeModelError(f"a prompt of {n} tokens and {max_new_tokens} new ones do not fit "
                                   f"{min(self.kv_slots, self.cos.keep.shape[0])} slots")
        rows = np.arange(n, dtype=np.int64)
        index = np.tril(np.broadcast_to(rows, (n, n)))
        logits = self.forward(np.asarray(prompt), rows, rows, index, rows + 1, logit_rows=[n - 1])
        out: list[int] = []
        for step in range(max_new_tokens):
            token = int(np.argmax(logits[-1]))
            out.append(token)
            if token in stop_ids or step + 1 == max_new_tokens:
                break
            p = n + step
            logits = self.forward(np.array([token]), np.array([p]), np.array([p]),
                                  np.arange(p + 1, dtype=np.int64)[None, :], np.array([p + 1]))
        return out


class _Layer:
    """One DecodeLayer handle and the tensors it points into."""

    def __init__(self, lib: CLibrary) -> None:
        self.lib, self.handle = lib, lib.lib.sglc_c_layer_new()
        self.keep: list = []

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self.lib.lib.sglc_c_layer_free(ctypes.c_void_p(handle))


def _out(lib: CLibrary, name: str, *args) -> CTensor:
    """Calls ``name(args..., &out)`` and returns the owned result."""
    out = ctypes.c_void_p()
    converted = [ctypes.c_void_p(a.handle) if isinstance(a, CTensor) else a for a in args]
    lib.call(name, *converted, ctypes.byref(out))
    return CTensor(lib, out.value)
