"""How the torch-free model loads (issue #26's start): every tensor repacked in one native call
(``native_model.repack`` over c_api.h's ``sglc_c_gguf_tiles_batch``), the weight arena's huge pages
deferred at load and collapsed later, torch's libraries preloaded without the GIL, and the GGUF
type table read without gguf-py.

Oracles: the numpy repacking (models/gguf_tiles.py's ``reference_tiles``) for the batch, bit for
bit, stacked parts included; the model's own logits before and after its pages move; gguf-py's
type table; /proc/self/smaps for where memory lives.
"""
from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gguf_blocks import gguf_tensor
from memory_maps import SMAPS, has_huge_pages, kib, mapping_of
from sglc_runtime.model.gguf import GGUFWeight
from sglc_runtime.model.models.gguf_tiles import reference_tiles
from sglc_runtime.model.models.tiled_linear import native_tile_kernels
from sglc_runtime.model.native.c_library import NativeLibraryError, c_library
from sglc_runtime.model.native_model import NativeGGUFModel, NativeModelError, TileJob, repack

DATA = Path(__file__).parent / "data" / "gguf"
PROMPT = [3, 17, 30, 5, 9, 11, 60, 2, 44]

pytestmark = pytest.mark.skipif(not native_tile_kernels(), reason="no native GGUF kernels on this machine")


def assert_tiles_equal(job: TileJob, want) -> None:
    got = [t.numpy() for t in job.tensors]
    assert len(got) == len(want), job.name
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.numpy()
        assert g.shape == w.shape, f"{job.name}[{i}]: {g.shape} vs {w.shape}"
        assert g.view(np.uint8).tobytes() == w.view(np.uint8).tobytes(), f"{job.name}[{i}]"


def test_one_call_repacks_every_job_as_the_reference_does_stacked_parts_included():
    """Jobs of several types in one call; a job of two parts (a mixture expert's gate and up) is
    the tiles of its parts' rows concatenated, without the caller concatenating them."""
    lib = c_library()
    gate, up = gguf_tensor("Q4_K", 48, 512, seed=1), gguf_tensor("Q4_K", 32, 512, seed=2)
    cases = {"q5_0": ("Q5_0", 256, [gguf_tensor("Q5_0", 37, 256, seed=3)]),
             "experts.gate_up": ("Q4_K", 512, [gate, up]),
             "q6_k": ("Q6_K", 256, [gguf_tensor("Q6_K", 16, 256, seed=4)]),
             "q8_0": ("Q8_0", 64, [gguf_tensor("Q8_0", 64, 64, seed=5)])}
    jobs = [TileJob(name, t, cols, list(parts)) for name, (t, cols, parts) in cases.items()]
    repack(lib, jobs)
    for job, (name, (t, cols, parts)) in zip(jobs, cases.items()):
        raw = np.concatenate(parts)
        assert_tiles_equal(job, reference_tiles(GGUFWeight(name, t, raw.shape[0], cols, raw)))
        assert job.parts == []


def test_a_bad_job_names_its_tensor_and_returns_nothing():
    lib = c_library()
    good = TileJob("blk.0.ok", "Q8_0", 64, [gguf_tensor("Q8_0", 16, 64)])
    bad = TileJob("blk.1.bad", "Q4_K", 100, [np.zeros((16, 144), np.uint8)])
    with pytest.raises(NativeLibraryError, match=r"blk\.1\.bad: .*job 1 \(Q4_K\).*multiple of 256"):
        repack(lib, [good, bad])
    assert good.tensors == []
    with pytest.raises(NativeModelError, match="C-contiguous uint8"):
        repack(lib, [TileJob("f32", "Q8_0", 64, [np.zeros((16, 17), np.float32)])])


@pytest.mark.skipif(not SMAPS.exists(), reason="no /proc/self/smaps to read resident pages from")
def test_a_repacked_jobs_file_pages_leave_the_process(tmp_path):
    """Parts that are views of a file map are dropped from the process once their job is
    repacked (the file and its tiles never resident together); their bytes read back unchanged."""
    raw = gguf_tensor("Q4_K", 256, 2048, seed=6)  # 288 KiB: many pages
    path = tmp_path / "blocks.bin"
    path.write_bytes(raw.tobytes())
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(m, dtype=np.uint8).reshape(raw.shape)
    assert int(view.sum(dtype=np.int64)) == int(raw.sum(dtype=np.int64))  # NOTE: every page resident now
    before = kib(mapping_of(view.ctypes.data), "Rss")
    assert before >= raw.nbytes // 1024 - 4
    job = TileJob("mapped", "Q4_K", 2048, [view])
    repack(c_library(), [job])
    assert kib(mapping_of(view.ctypes.data), "Rss") <= 8, mapping_of(view.ctypes.data)
    assert np.array_equal(view, raw)  # NOTE: dropped, not lost: the pages fault back in from the file
    assert_tiles_equal(job, reference_tiles(GGUFWeight("mapped", "Q4_K", 256, 2048, raw)))
    del view, job
    m.close()


def _step_logits(model: NativeGGUFModel) -> np.ndarray:
    n = len(PROMPT)
    rows = np.arange(n)
    return model.forward(np.array(PROMPT), rows, rows, np.tril(np.broadcast_to(rows, (n, n))), rows + 1)


@pytest.mark.skipif(not has_huge_pages(), reason="no transparent huge pages")
def test_huge_pages_deferred_at_load_then_collapsed_with_the_same_outputs():
    """A deferred load puts tiles and KV in ordinary pages (weight_arena.h: why); collapse marks
    them for huge pages and moves them; the model computes the same bits before and after."""
    model = NativeGGUFModel(DATA / "qwen3_wide-Q4_K_M.gguf", kv_slots=64, dtype="bfloat16", defer_huge_pages=True)
    tile = model.layers[0].keep[0].tensors[0].numpy().ctypes.data
    kv = model.k_cache[0].numpy().ctypes.data
    for address in (tile, kv):
        assert "hg" not in mapping_of(address).get("VmFlags", "").split()
    before = _step_logits(model)
    assert model.collapse_huge_pages() > 0
    for address in (tile, kv):
        assert "hg" in mapping_of(address).get("VmFlags", "").split(), mapping_of(address)
    assert model.collapse_huge_pages() == 0  # NOTE: once: the chunks are huge already
    model.k_cache[0].numpy()[:] = 0  # NOTE: a fresh prompt over the same slots
    assert np.array_equal(_step_logits(model), before)
    # a load that does not defer asks for huge pages at once
    eager = NativeGGUFModel(DATA / "qwen3_wide-Q4_K_M.gguf", kv_slots=64, dtype="bfloat16")
    assert "hg" in mapping_of(eager.layers[0].keep[0].tensors[0].numpy().ctypes.data).get("VmFlags", "").split()


@pytest.mark.skipif(not has_huge_pages(), reason="no transparent huge pages")
def test_a_serving_engine_collapses_its_model_once_it_first_idles():
    from sglc_runtime.engine.native_engine import NativeEngine

    engine = NativeEngine(model=str(DATA / "qwen3_wide-Q4_K_M.gguf"), num_kv_slots=64)
    tile = engine.model.layers[0].keep[0].tensors[0].numpy().ctypes.data
    assert "hg" not in mapping_of(tile).get("VmFlags", "").split()
    engine.start()
    try:
        rid = engine.submit(PROMPT, {"max_new_tokens": 2, "temperature": 0})
        engine.wait(rid)
        deadline = time.monotonic() + 30
        while "hg" not in mapping_of(tile).get("VmFlags", "").split() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "hg" in mapping_of(tile).get("VmFlags", "").split()
    finally:
        engine.shutdown()


def test_torch_libraries_preload_without_importing_torch():
    code = ("import json, sys\n"
            "from sglc_runtime.model.native import torch_libraries\n"
            "torch_libraries.preload()\n"
            "torch_libraries.load()\n"
            "maps = open('/proc/self/maps').read()\n"
            "print(json.dumps(['libtorch_cpu.so' in maps, 'torch' in sys.modules]))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, False]
