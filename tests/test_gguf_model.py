"""The default model run from its GGUF file in place (no float32 conversion of its weights): the
shipped Q4_1 layers keep their levels on the int4 kernel, the Q8_0 embedding is decoded per
looked-up row and runs the head on the Q8_0 kernel, and the model agrees with the dequantized
float32 model as well as the int4 path always did."""
from __future__ import annotations

import pytest
import torch

from sglc_runtime.model.default_model import find_default_gguf, gguf_source, resolve_model_path
from sglc_runtime.model.gguf import GGUFFile
from sglc_runtime.model.models import load_model
from sglc_runtime.model.models.gguf_linear import GGUFEmbedding, GGUFQ8Linear
from sglc_runtime.model.models.tiled_linear import native_tile_kernels
from sglc_runtime.model.models.quantized_linear import Int4Linear, RowDispatchLinear, int4_levels, pack_q4_tiles
from sglc_runtime.model.native import kernel_info, load_cpu_ops

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def gguf_model():
    assert load_cpu_ops() is None
    return load_model(resolve_model_path(None), quantization="int4", gguf=find_default_gguf())


def small(linear):
    return linear.small if isinstance(linear, RowDispatchLinear) else linear


def test_the_default_model_and_gguf_paths_run_on_their_file():
    assert gguf_source(None) == find_default_gguf() == gguf_source("default")
    assert gguf_source(str(find_default_gguf())) == find_default_gguf()
    assert gguf_source(resolve_model_path(None)) is None  # a folder (config and tokenizer only)


def test_shipped_levels_and_scales_run_as_they_are(gguf_model):
    """Layer 0's fused gate/up linear holds the file's Q4_1 levels and float16 d, m in the int4
    tiles, exactly what re-quantizing the dequantized tensors recovers; the head is Q8_0 on its
    own kernel; the embedding is decoded from the file's blocks."""
    if not native_tile_kernels():
        pytest.skip(f"{kernel_info().level} runs no native integer linears (GGUF tensors are decoded there)")
    m = gguf_model
    gate_up = small(m.layers[0].mlp.gate_up)
    assert isinstance(gate_up, Int4Linear) and gate_up.kernel == "native"
    f = GGUFFile(find_default_gguf())
    w = torch.cat([torch.from_numpy(f.weight(f"blk.0.ffn_{n}.weight").dequantize()) for n in ("gate", "up")])
    q, scale, lo = int4_levels(w)
    for ours, theirs in zip(gate_up._q4, pack_q4_tiles(q, scale, lo)):
        assert torch.equal(ours, theirs)
    assert isinstance(small(m.lm_head), GGUFQ8Linear)
    assert isinstance(m.embed, GGUFEmbedding)
    ids = torch.tensor([1, 500, 49151])
    expected = torch.from_numpy(f.weight("token_embd.weight").dequantize()[ids.numpy()]).to(m.dtype)
    assert torch.equal(m.embed(ids), expected)


def test_the_gguf_model_agrees_with_the_dequantized_float_model(gguf_model):
    """Teacher-forced over a fixed prompt set (the float model's own greedy continuation): top-1
    agreement >= 90%, as the int4 path is held to (tests/test_quantized_linear.py)."""
    from bench.bench_quantization import PROMPTS, agreement, float_continuations

    ref = load_model(resolve_model_path(None), dtype="float32", gguf=find_default_gguf())
    sequences = float_continuations(ref, PROMPTS[:4], new_tokens=16)
    stats = agreement(ref, gguf_model, sequences)
    assert stats["top1_agreement"] >= 0.9, stats



def _resident_bytes_around(address: int) -> tuple[int, int]:
    """(size, resident bytes) of the mapping holding ``address`` (/proc/self/smaps)."""
    inside, size = False, 0
    for line in open("/proc/self/smaps"):
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:  # a mapping's header line: start-end perms ...
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside, size = lo <= address < hi, hi - lo
        elif inside and line.startswith("Rss:"):
            return size, int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="no madvise(MADV_DONTNEED) here")
def test_the_file_is_not_resident_twice_once_its_tensors_are_repacked():
    """After load the linears hold their own tiles: the file's mapped pages are released (they
    would count a second time), and embedding rows read later fault back in from the page cache."""
    model = load_model(resolve_model_path(None), quantization="int4", gguf=find_default_gguf())
    address = model.embed.weight.raw.ctypes.data
    size, resident = _resident_bytes_around(address)
    assert size >= find_default_gguf().stat().st_size and resident < 0.05 * size, (size, resident)
    want = model.embed(torch.tensor([1, 2, 3, 500, 49151]))
    assert torch.isfinite(want).all() and _resident_bytes_around(address)[1] > resident


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="no madvise(MADV_DONTNEED) here")
def test_each_tensor_s_pages_can_be_released_as_soon_as_it_is_repacked():
    """release_pages_of drops the resident pages under one tensor's view of the map (the loader
    calls it per linear, so the file and its repacked copy are never both resident); a copy or a
    plain array is left alone."""
    import numpy as np

    from sglc_runtime.model.gguf.reader import release_pages_of

    f = GGUFFile(find_default_gguf())
    w = f.weight("blk.0.ffn_down.weight")
    address = w.raw.ctypes.data
    touched = int(w.raw.sum(dtype=np.uint64))  # NOTE: reads every page of the tensor
    _, resident = _resident_bytes_around(address)
    assert resident >= w.raw.nbytes
    release_pages_of(w.raw)
    _, after = _resident_bytes_around(address)
    assert resident - after >= 0.9 * w.raw.nbytes, (resident, after, w.raw.nbytes)
    assert int(w.raw.sum(dtype=np.uint64)) == touched  # the view still reads the same bytes
    release_pages_of(np.zeros(10, np.uint8))  # not a view of a map: nothing happens
