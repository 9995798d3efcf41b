"""The native repacking of GGUF tensors into their kernels' tiles (``sglc_cpu.gguf_tiles``,
runtime/model/native/binding/gguf_tiles.h) equals the numpy reference (models/gguf_tiles.py) bit
for bit, for every tiled type, with and without a partial last tile, from a read-only view of a
file map as the loader passes it; and what it cannot repack is refused by name."""
from __future__ import annotations

import mmap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from gguf_blocks import gguf_tensor
from memory_maps import has_huge_pages, mapping_of, thp_mode
from sglc_runtime.model.gguf import GGUFWeight
from sglc_runtime.model.models.gguf_tiles import TILED_TYPES, gguf_tiles, reference_tiles
from sglc_runtime.model.native import load_cpu_ops


@pytest.fixture(scope="module", autouse=True)
def kernels():
    why = load_cpu_ops()
    assert why is None, f"the native binding did not build: {why}"


def assert_same(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what}[{i}]: {g.dtype} {tuple(g.shape)} vs {w.dtype} {tuple(w.shape)}"
        assert g.is_contiguous(), f"{what}[{i}]"
        # NOTE: compared as bytes: float16 tables may hold NaN bit patterns (random K-quant blocks)
        assert torch.equal(g.view(torch.uint8) if g.element_size() == 1 else g.view(torch.int16),
                           w.view(torch.uint8) if w.element_size() == 1 else w.view(torch.int16)), f"{what}[{i}]"


@pytest.mark.parametrize("name", TILED_TYPES)
@pytest.mark.parametrize("rows", [48, 37])
def test_native_repack_equals_reference(name: str, rows: int) -> None:
    cols = 512
    if name in ("Q4_0", "Q4_1") and rows % 16:
        rows = 32  # NOTE: the int4 linear takes whole tiles only (gguf_linear refuses the rest by name)
    w = GGUFWeight(f"t.{name}", name, rows, cols, gguf_tensor(name, rows, cols, seed=rows))
    assert_same(gguf_tiles(w), reference_tiles(w), f"{name} [{rows}, {cols}]")


def test_repack_reads_a_read_only_file_map(tmp_path) -> None:
    """The loader's weights are views of an ACCESS_READ map: repacked without a copy or a warning."""
    raw = gguf_tensor("Q4_K", 32, 256, seed=7)
    path = tmp_path / "blocks.bin"
    path.write_bytes(raw.tobytes())
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(m, dtype=np.uint8).reshape(raw.shape)
    assert not view.flags.writeable
    w = GGUFWeight("t.map", "Q4_K", 32, 256, view)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NOTE: torch.from_numpy would warn about a non-writable array
        got = gguf_tiles(w)
    assert_same(got, reference_tiles(GGUFWeight("t.copy", "Q4_K", 32, 256, raw)), "Q4_K from a map")
    del view, w
    m.close()


def test_refusals_name_the_problem() -> None:
    raw = torch.zeros(16 * 144, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="no tile layout for GGUF type Q3_K"):
        torch.ops.sglc_cpu.gguf_tiles(raw, "Q3_K", 16, 256)
    with pytest.raises(RuntimeError, match="multiple of 256"):
        torch.ops.sglc_cpu.gguf_tiles(raw, "Q4_K", 16, 100)
    with pytest.raises(RuntimeError, match="holding 16 x 144 bytes"):
        torch.ops.sglc_cpu.gguf_tiles(raw[:-1], "Q4_K", 16, 256)
    with pytest.raises(ValueError, match="no tile layout for GGUF type F16"):
        reference_tiles(GGUFWeight("t.f16", "F16", 16, 32, np.zeros((16, 64), dtype=np.uint8)))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_q4_0_offset_overflow_is_refused() -> None:
    """Q4_0's m = -8 d must be exact in float16: a d near float16's max is refused, as the reference does."""
    raw = gguf_tensor("Q4_0", 16, 32, seed=1).copy()
    raw[0, 0:2] = np.array([60000.0], dtype=np.float16).view(np.uint8)
    w = GGUFWeight("t.big", "Q4_0", 16, 32, raw)
    with pytest.raises(RuntimeError, match="too large"):
        gguf_tiles(w)
    with pytest.raises(ValueError, match="too large"):
        reference_tiles(w)


def test_repacking_loads_the_binding_itself() -> None:
    """gguf_tiles builds / loads the binding on first use (a GGUF linear made with native=True before
    anything else asked for the kernels), rather than failing on a missing operator."""
    import subprocess
    import sys

    code = ("import numpy as np, torch\n"
            "from sglc_runtime.model.gguf import GGUFWeight\n"
            "from sglc_runtime.model.models.gguf_tiles import gguf_tiles\n"
            "w = GGUFWeight('t', 'Q8_0', 16, 32, np.zeros((16, 34), dtype=np.uint8))\n"
            "print([tuple(t.shape) for t in gguf_tiles(w)])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(1, 1, 8, 64)" in out.stdout


@pytest.mark.skipif(not has_huge_pages(), reason="no transparent huge pages")
def test_tiles_live_in_memory_asking_for_huge_pages() -> None:
    """The weight arena (weight_arena.h): tiles sit in 2 MiB-aligned chunks marked MADV_HUGEPAGE,
    where the system's madvise mode gives huge pages (a cold decode step streams them ~1.3x faster)."""
    raw = gguf_tensor("Q4_K", 64, 512, seed=3)
    tiles = gguf_tiles(GGUFWeight("w", "Q4_K", 64, 512, raw))
    for t in tiles:
        assert t.data_ptr() % 64 == 0
        fields = mapping_of(t.data_ptr())
        assert fields.get("THPeligible") == "1", fields
        assert "hg" in fields.get("VmFlags", "").split() or "[always]" in thp_mode(), fields
