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
attention kernel writes every row's K/V before any row attends); a layer with a sliding window
gets each row's last ``window`` of them. What it runs: every GGUF architecture whose layers the
torch engine runs as ``DecodeLayer`` (Llama with any RoPE scaling, Mistral, Qwen2, Qwen3, Gemma 2
and 3, Phi-3, Qwen3-MoE, Mixtral) with linears in a tiled GGUF type; OLMoE (full-width q/k norms)
and F16 / BF16 / F32 linears are refused by name, and the torch engine (``models/decoder.py``)
runs them. RoPE tables come from ``rope_tables.py`` (numpy), the same schemes as the torch
engine's within float32 rounding.
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .gguf import GGUFFile
from .gguf.weight import GGUFWeight
from .model_config import ModelConfig
from .gguf.architectures import MIXTRAL_EXPERTS, QWEN_EXPERTS
from .gguf.reader import file_mapping_of
from .native.c_library import BF16, DTYPE_CODES, CLibrary, CTensor, NativeLibraryError, c_library, handles, strings
from .rope_tables import rope_tables

#: Hugging Face architectures this model runs (those whose every layer is a DecodeLayer)
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "Qwen3MoeForCausalLM",
                 "MixtralForCausalLM")
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
        (c.qk_norm not in (None, "head") or c.clip_qkv is not None, "full-width q/k norms or clip_qkv"),
        (c.hidden_act not in ("silu", "gelu_tanh"), f"activation {c.hidden_act}"),
    ]
    found = [why for bad, why in checks if bad]
    return "; ".join(found) if found else None


@dataclass
class TileJob:
    """One tensor to repack: its GGUF type and columns, its rows as views of the file (stacked in
    order: a mixture expert's gate and up are one tensor), and, once repacked, its tile tensors."""

    name: str
    type_name: str
    cols: int
    parts: list[np.ndarray]
    tensors: list[CTensor] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return TILE_KINDS[self.type_name][0]


def repack(lib: CLibrary, jobs: list[TileJob]) -> None:
    """Every job repacked in one native call (no Python, so no wait for the GIL, between tensors;
    a job's parts' file pages dropped once it is repacked, where they are views of a file map):
    each job's ``tensors`` set, its ``parts`` let go. NativeLibraryError names the failing job."""
    n, parts = len(jobs), [p for j in jobs for p in j.parts]
    for p in parts:
        if p.dtype != np.uint8 or p.ndim != 2 or not p.flags.c_contiguous:
            raise NativeModelError(f"a tile job's part must be C-contiguous uint8 rows, got {p.dtype} {p.shape}")
    i64 = ctypes.c_int64
    release = [int(all(file_mapping_of(p) is not None for p in j.parts)) for j in jobs]
    out, counts = (ctypes.c_void_p * (5 * n))(), (ctypes.c_int * n)()
    try:
        lib.call("sglc_c_gguf_tiles_batch", n, strings([j.type_name for j in jobs]), (i64 * n)(*[j.cols for j in jobs]),
                 (i64 * n)(*[len(j.parts) for j in jobs]), (ctypes.c_void_p * len(parts))(*[p.ctypes.data for p in parts]),
                 (i64 * len(parts))(*[p.shape[0] for p in parts]), (ctypes.c_int * n)(*release), out, counts)
    except NativeLibraryError as err:
        at = re.search(r"job (\d+)", str(err))
        name = jobs[int(at.group(1))].name if at and int(at.group(1)) < n else "a tensor"
        raise NativeLibraryError(f"{name}: {err}") from None
    for i, job in enumerate(jobs):
        job.tensors = [CTensor(lib, out[5 * i + k]) for k in range(counts[i])]
        job.parts = []  # NOTE: repacked: the file's views are no longer needed
    for job in jobs:
        want = TILE_KINDS[job.type_name][1]
        if len(job.tensors) != want:
            raise NativeModelError(f"{job.name}: {len(job.tensors)} tile tensors for {job.type_name}, expected {want}")


@dataclass
class _Projection:
    """A linear as tile jobs (one per part: q, k and v may differ in type) and an optional float32
    bias; its kinds and tensors are read once the jobs have run."""

    jobs: list[TileJob]
    bias: CTensor | None
    out_features: int

    @property
    def kinds(self) -> list[str]:
        return [j.kind for j in self.jobs]

    @property
    def tensors(self) -> list[CTensor]:
        return [t for j in self.jobs for t in j.tensors]


class NativeGGUFModel:
    """A GGUF file's model on the native binding, stepped with numpy arrays (no torch)."""

    def __init__(self, path: str | Path, *, kv_slots: int = 4096, dtype: str = "float32", threads: int | None = None,
                 level: str | None = None, defer_huge_pages: bool = False) -> None:
        """``defer_huge_pages``: load the tiles and the KV pool into ordinary pages, for
        :meth:`collapse_huge_pages` to move into huge pages later (a faster, steadier start on a VM
        that returns free memory to its host: native/binding/weight_arena.h)."""
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
        #: every linear's repacking, run in one call once the layers are described (_repack); the
        #: layer settings that point at tiles wait for it in _after_repack
        self._jobs: list[TileJob] = []
        self._after_repack: list = []
        self.lib.lib.sglc_c_defer_huge_pages(int(defer_huge_pages))
        try:
            self._load(f, arrays, kv_slots)
        finally:
            self.lib.lib.sglc_c_defer_huge_pages(0)

    def _load(self, f: GGUFFile, arrays: dict, kv_slots: int) -> None:
        c = self.config
        self.embed: GGUFWeight = self._weight(arrays, "model.embed_tokens.weight")
        # NOTE: a file without its own head (tied) reads the embedding's
        untied = not c.tie_word_embeddings and "lm_head.weight" in arrays
        self.head = self._projection([self._weight(arrays, "lm_head.weight") if untied else self.embed], None)
        self.final_norm = self._vector(arrays, "model.norm.weight")
        self.scale = c.attn_scale if c.attn_scale is not None else c.head_dim ** -0.5
        # NOTE: no request outlives the pool, so positions stop below it
        self.positions = positions = min(c.max_position_embeddings, kv_slots)
        specs = [(c.rope_theta, c.rope_scaling)] + ([(c.local_rope_theta, c.local_rope_scaling)]
                                                    if c.local_rope_theta is not None else [])
        #: (cos, sin) per RoPE table: the global one, then the local one (Gemma 3's sliding layers)
        self.ropes = [tuple(CTensor.wrap(self.lib, t) for t in rope_tables(
            c.head_dim, theta, scaling, c.max_position_embeddings, positions, c.rotary_dim)) for theta, scaling in specs]
        self.windows = [c.layer_window(i) for i in range(c.num_hidden_layers)]
        self.layer_ropes = [1 if len(self.ropes) > 1 and w is not None else 0 for w in self.windows]
        self.layers, self.input_norms = [], []
        for i in range(c.num_hidden_layers):
            self.layers.append(self._layer(arrays, i))
            self.input_norms.append(self._vector(arrays, f"model.layers.{i}.input_layernorm.weight"))
        self._repack()
        for set_tiles in self._after_repack:
            set_tiles()
        self._jobs, self._after_repack = [], []
        shape = (kv_slots, c.num_key_value_heads, c.head_dim)
        # NOTE: zeros mapped now (not calloc's lazy pages): the pool is resident from the start, as the
        # torch engine's and llama-server's, so a machine without room for it fails at load
        code = DTYPE_CODES[np.dtype(np.float32)] if self.dtype == "float32" else BF16
        self.k_cache = [CTensor.zeros(self.lib, shape, code) for _ in range(c.num_hidden_layers)]
        self.v_cache = [CTensor.zeros(self.lib, shape, code) for _ in range(c.num_hidden_layers)]
        f.release_resident_pages()  # NOTE: the tiles hold the weights now; the embedding rows re-read on use

    def collapse_huge_pages(self) -> int:
        """The tiles and the KV pool (every weight-arena chunk) moved into huge pages now, where the
        kernel can (MADV_COLLAPSE; slow: the kernel copies them; call it off the serving path);
        returns the bytes asked for."""
        return int(self.lib.lib.sglc_c_collapse_huge_pages())

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
        """A norm weight in the step dtype (Gemma's ``1 + w`` added in float32 first, as the torch
        engine's loader does)."""
        v = arrays.get(name)
        if not isinstance(v, np.ndarray):
            raise NativeModelError(f"tensor {name} is missing or not a vector")
        v = v.astype(np.float32)
        if self.config.norm_weight_offset and name.endswith("norm.weight"):
            v = (v + np.float32(self.config.norm_weight_offset)).astype(np.float32)
        return self._activations(v)

    def _job(self, parts: list[GGUFWeight]) -> TileJob:
        """A repacking of ``parts`` stacked as one tensor (same type and columns), queued."""
        w = parts[0]
        if w.type_name not in TILE_KINDS:
            raise NativeModelError(f"{w.name}: GGUF type {w.type_name} has no tile kernel here "
                                   f"(runs {', '.join(TILE_KINDS)})")
        rows = sum(p.rows for p in parts)
        if rows % TILE:
            raise NativeModelError(f"{w.name}: {rows} output channels are not a multiple of {TILE}")
        job = TileJob(w.name, w.type_name, w.cols, [np.ascontiguousarray(p.raw) for p in parts])
        self._jobs.append(job)
        return job

    def _repack(self) -> None:
        try:
            repack(self.lib, self._jobs)
        except NativeLibraryError as err:
            raise NativeModelError(str(err)) from None

    def _projection(self, parts: list[GGUFWeight], bias: np.ndarray | None) -> _Projection:
        jobs = [self._job([w]) for w in parts]
        b = None if bias is None else self._activations(bias.astype(np.float32))
        return _Projection(jobs, b, sum(w.rows for w in parts))

    def _set(self, layer: int, which: str, p: _Projection) -> None:
        self._after_repack.append(lambda: self._set_now(layer, which, p))

    def _set_now(self, layer: int, which: str, p: _Projection) -> None:
        self.lib.call("sglc_c_layer_set_projection", ctypes.c_void_p(layer), which.encode(), strings(p.kinds),
                      len(p.kinds), handles(p.tensors), len(p.tensors),
                      ctypes.c_void_p(p.bias.handle if p.bias else None))

    def _layer(self, arrays: dict, i: int) -> "_Layer":
        c, p = self.config, f"model.layers.{i}."
        a = p + "self_attn."
        fused = a + "qkv_proj.weight" in arrays  # NOTE: Phi-3 ships q/k/v as one tensor
        qkv = [self._weight(arrays, a + "qkv_proj.weight")] if fused else \
            [self._weight(arrays, f"{a}{n}_proj.weight") for n in "qkv"]
        bias = None
        if c.qkv_bias:
            bias = arrays[a + "qkv_proj.bias"] if fused else np.concatenate([arrays[f"{a}{n}_proj.bias"] for n in "qkv"])
        layer = _Layer(self.lib)
        keep: list = [self._projection(qkv, bias),
                      self._projection([self._weight(arrays, a + "o_proj.weight")],
                                       arrays[a + "o_proj.bias"] if c.o_bias else None)]
        self._set(layer.handle, "qkv", keep[0])
        self._set(layer.handle, "o", keep[1])
        norms = [self._vector(arrays, f"{a}{n}_norm.weight") if c.qk_norm == "head" else None for n in "qk"]
        # NOTE: Gemma's sandwich: the attention output normed, the MLP between its own two norms
        sandwich = c.sandwich_norms
        post_attn = self._vector(arrays, p + "post_attention_layernorm.weight") if sandwich else None
        mlp_norm = self._vector(arrays, p + ("pre_feedforward_layernorm.weight" if sandwich
                                             else "post_attention_layernorm.weight"))
        post_mlp = self._vector(arrays, p + "post_feedforward_layernorm.weight") if sandwich else None
        self.lib.call("sglc_c_layer_set_attention", ctypes.c_void_p(layer.handle), c.num_attention_heads,
                      c.num_key_value_heads, c.head_dim, *(_handle(n) for n in norms), _handle(post_attn),
                      ctypes.c_double(self.scale), ctypes.c_double(c.attn_logit_softcap or 0.0))
        act = c.hidden_act.encode()
        self.lib.call("sglc_c_layer_set_mlp", ctypes.c_void_p(layer.handle), ctypes.c_void_p(mlp_norm.handle),
                      _handle(post_mlp), act, ctypes.c_double(c.rms_norm_eps))
        if c.is_moe_layer(i):
            keep += self._experts(arrays, p, layer)
        else:
            if p + "mlp.gate_up_proj.weight" in arrays:  # NOTE: Phi-3 ships gate and up as one tensor
                gate_up = [self._weight(arrays, p + "mlp.gate_up_proj.weight")]
            else:
                gate_up = [self._weight(arrays, f"{p}mlp.{n}_proj.weight") for n in ("gate", "up")]
            keep += [self._projection(gate_up, None), self._projection([self._weight(arrays, p + "mlp.down_proj.weight")],
                                                                       None)]
            self._set(layer.handle, "gate_up", keep[-2])
            self._set(layer.handle, "down", keep[-1])
        layer.keep = [*keep, *[n for n in (*norms, post_attn, mlp_norm, post_mlp) if n is not None]]
        return layer

    def _experts(self, arrays: dict, p: str, layer: "_Layer") -> list:
        """A sparse MoE block's router and experts set on ``layer``; returns what it points into."""
        c = self.config
        names = MIXTRAL_EXPERTS if c.architecture == "MixtralForCausalLM" else QWEN_EXPERTS
        router = self._weight(arrays, f"{p}{names.block}gate.weight")
        router_t = CTensor.wrap(self.lib, router.dequantize().astype(np.float32))
        jobs: tuple[list[TileJob], list[TileJob]] = ([], [])
        for e in range(c.num_experts):
            gate, up = (self._weight(arrays, p + names.name(e, n)) for n in ("gate", "up"))
            if (gate.type_name, gate.cols) != (up.type_name, up.cols):
                raise NativeModelError(f"{gate.name}: an expert whose gate ({gate.type_name}, {gate.cols} columns) "
                                       f"and up ({up.type_name}, {up.cols}) differ")
            jobs[0].append(self._job([gate, up]))
            jobs[1].append(self._job([self._weight(arrays, p + names.name(e, "down"))]))

        def set_experts() -> None:
            tensors = [[t for j in side for t in j.tensors] for side in jobs]
            kinds = [[j.kind for j in side] for side in jobs]
            self.lib.call("sglc_c_layer_set_experts", ctypes.c_void_p(layer.handle), strings(kinds[0]), len(kinds[0]),
                          handles(tensors[0]), len(tensors[0]), strings(kinds[1]), len(kinds[1]), handles(tensors[1]),
                          len(tensors[1]), c.hidden_act.encode(), ctypes.c_void_p(router_t.handle),
                          c.num_experts_per_tok, int(c.norm_topk_prob), int(c.architecture == "MixtralForCausalLM"))

        self._after_repack.append(set_experts)
        return [router_t, *jobs[0], *jobs[1]]

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
        if t and (positions.min() < 0 or positions.max() >= self.positions):
            raise NativeModelError(f"a position outside [0, {self.positions}) (the model's context)")
        lib, c = self.lib, self.config
        h = self._activations(self._embed_scaled(ids))
        h_array = h.keep  # NOTE: the layers add into it in place
        rows_in = {None: [CTensor.wrap(lib, a) for a in (loc, index, lens)]}
        for w in set(self.windows) - {None}:
            rows_in[w] = [rows_in[None][0], *(CTensor.wrap(lib, a) for a in windowed(index, lens, w))]
        pos = CTensor.wrap(lib, positions)
        x = _out(lib, "sglc_c_rms_norm", h, self.input_norms[0], ctypes.c_double(c.rms_norm_eps))
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            next_norm = self.input_norms[i + 1] if i < last else None
            cos, sin = self.ropes[self.layer_ropes[i]]
            x = _out(lib, "sglc_c_layer_forward", ctypes.c_void_p(layer.handle), h, x, pos, cos, sin,
                     self.k_cache[i], self.v_cache[i], *rows_in[self.windows[i]], _handle(next_norm))
        if logit_rows is not None and len(logit_rows) == 0:  # NOTE: a step that only writes K/V (a prompt chunk)
            return np.empty((0, self.head.out_features), np.float32)
        rows = h_array if logit_rows is None else np.ascontiguousarray(h_array[np.asarray(logit_rows, np.int64)])
        normed = _out(lib, "sglc_c_rms_norm", self._activations(rows), self.final_norm, ctypes.c_double(c.rms_norm_eps))
        if self.dtype != "float32":  # NOTE: the head is given float32 rows, as the torch engine's
            normed = CTensor.wrap(lib, from_bf16(normed.numpy()))
        hp = self.head
        out = _out(lib, "sglc_c_stacked_linear", normed, strings(hp.kinds), len(hp.kinds), handles(hp.tensors),
                   len(hp.tensors))
        logits = out.numpy()[:, :hp.out_features].copy()
        if c.final_logit_softcap is not None:  # NOTE: Gemma 2, as the torch engine: tanh(x / cap) * cap in float32
            cap = np.float32(c.final_logit_softcap)
            logits = (np.tanh(logits / cap) * cap).astype(np.float32)
        return logits

    def _embed_scaled(self, ids: np.ndarray) -> np.ndarray:
        """The rows in the step dtype (bf16 bits or float32), times Gemma's sqrt(hidden) in that dtype."""
        rows = self.embed_rows(ids)
        scale = self.config.embed_scale
        if self.dtype == "float32":
            return rows if scale is None else (rows * np.float32(scale)).astype(np.float32)
        bits = to_bf16(rows)
        if scale is None:
            return bits
        # NOTE: a bf16 product of two bf16 values, rounded once, as torch's bf16 mul_
        return to_bf16(from_bf16(bits) * from_bf16(to_bf16(np.array([scale], np.float32)))[0])

    def generate_greedy(self, prompt: list[int], max_new_tokens: int, stop_ids: tuple[int, ...] = ()) -> list[int]:
        """Greedy tokens after ``prompt`` (one request in slots 0..n), its prompt in one step."""
        n = len(prompt)
        if n < 1 or n + max_new_tokens > self.positions:
            raise NativeModelError(f"a prompt of {n} tokens and {max_new_tokens} new ones do not fit "
                                   f"{self.positions} positions")
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


def windowed(index: np.ndarray, lens: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's last ``window`` slots of ``index`` (``lens`` long): what a sliding-window layer
    attends (the torch engine's window: the query and the ``window - 1`` keys before it)."""
    start = np.maximum(lens - window, 0)
    width = min(index.shape[1], window)
    cols = np.minimum(start[:, None] + np.arange(width)[None, :], index.shape[1] - 1)
    return np.ascontiguousarray(np.take_along_axis(index, cols, axis=1)), lens - start


def _handle(t: CTensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.handle if t is not None else None)


def _out(lib: CLibrary, name: str, *args) -> CTensor:
    """Calls ``name(args..., &out)`` and returns the owned result."""
    out = ctypes.c_void_p()
    converted = [ctypes.c_void_p(a.handle) if isinstance(a, CTensor) else a for a in args]
    lib.call(name, *converted, ctypes.byref(out))
    return CTensor(lib, out.value)
