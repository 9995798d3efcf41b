"""The torch-free GGUF model (runtime/model/native_model.py): the binding's ops through its C API,
stepped with numpy arrays.

Oracle: the torch engine's own model on the same file. A prompt run as one step of many rows
must give, bit for bit, the logits the torch model gives decoding that prompt one token at a time
(each row is quantized, projected and attended alone in both), and the decode steps after it
must match too. The torch-free claim itself is checked in a child process that loads the model
and decodes without torch in ``sys.modules``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sglc_runtime.model.default_model import gguf_source, resolve_model_path
from sglc_runtime.model.forward_batch import ForwardBatch
from sglc_runtime.model.models import load_model
from sglc_runtime.model.models.tiled_linear import native_tile_kernels
from sglc_runtime.model.native.c_library import NativeLibraryError
from sglc_runtime.model.native_model import NativeGGUFModel, NativeModelError, from_bf16, to_bf16

DATA = Path(__file__).parent / "data" / "gguf"
ROOT = Path(__file__).resolve().parent.parent
#: fixtures whose logits equal the torch model's bit for bit: Qwen3's per-head norms, Qwen2's qkv
#: bias, Mistral's q4 tiles, Llama's YaRN RoPE, Gemma 3's two RoPE tables and 7-token windows,
#: Phi-3's fused projections and window; Q4_K / Q5_K / Q6_K / Q5_0 / Q8_0 / Q4_1 / Q4_0 linears
FIXTURES = ["qwen3_wide-Q4_K_M", "qwen3_wide-Q5_K_M", "qwen2-Q5_0", "mistral-Q4_1", "llama_wide-Q4_K_M",
            "llama_wide-Q6_K", "gemma3-Q8_0", "phi3-Q4_0"]
#: fixtures within a bound of it, and why not equal: Gemma 2's final soft-cap (numpy's tanh against
#: torch's: a last bit), the MoE routers (the torch model takes the router's logits from its GEMM
#: library, the binding from its own dot products: a routing weight's last bit, then the experts')
CLOSE = {"gemma2-Q5_1": 1e-6, "qwen3moe-Q4_0": 3e-2, "mixtral-Q8_0": 3e-2}
PROMPT = [3, 17, 30, 5, 9, 11, 60, 2, 44]

pytestmark = pytest.mark.skipif(not native_tile_kernels(), reason="no native GGUF kernels on this machine")


def torch_model(fixture: str):
    path = DATA / f"{fixture}.gguf"
    return load_model(resolve_model_path(path), gguf=gguf_source(path), quantization="int4")


def torch_token_by_token(model, prompt: list[int], new: int) -> tuple[np.ndarray, list[int]]:
    """The torch model's logits for each prompt token fed alone, and ``new`` greedy tokens after."""
    kv = model.new_kv_buffer(64)
    rows, tokens = [], []
    with torch.inference_mode():
        for i, t in enumerate(prompt):
            rows.append(model.forward(ForwardBatch.from_requests([[t]], [list(range(i + 1))]), kv).numpy()[-1])
        nxt = int(rows[-1].argmax())
        for step in range(new):
            tokens.append(nxt)
            p = len(prompt) + step
            nxt = int(model.forward(ForwardBatch.from_requests([[nxt]], [list(range(p + 1))]), kv)[-1].argmax())
    return np.stack(rows), tokens


def one_call(model: NativeGGUFModel, prompt: list[int]) -> np.ndarray:
    n = len(prompt)
    rows = np.arange(n)
    return model.forward(np.array(prompt), rows, rows, np.tril(np.broadcast_to(rows, (n, n))), rows + 1)


@pytest.mark.parametrize("fixture", FIXTURES + list(CLOSE))
def test_a_prompt_in_one_call_is_the_torch_models_token_by_token(fixture):
    """Bit for bit (FIXTURES) or within CLOSE's bound, and the same greedy tokens after it."""
    ref = torch_model(fixture)
    assert ref.dtype == torch.bfloat16  # NOTE: the torch engine's GGUF path computes in bf16
    logits, tokens = torch_token_by_token(ref, PROMPT, 10)
    native = NativeGGUFModel(DATA / f"{fixture}.gguf", kv_slots=64, dtype="bfloat16")
    got = one_call(native, PROMPT)
    assert got.shape == logits.shape
    if fixture in CLOSE:
        assert np.abs(got - logits).max() <= CLOSE[fixture] * np.abs(logits).max()
    else:
        assert np.array_equal(got, logits), np.abs(got - logits).max()
    fresh = NativeGGUFModel(DATA / f"{fixture}.gguf", kv_slots=64, dtype="bfloat16")
    assert fresh.generate_greedy(PROMPT, 10) == tokens


def test_a_call_of_many_rows_is_its_rows_alone_for_experts_too():
    """Row independence where the oracle is not bit-exact (the MoE blocks): one call of the
    prompt equals the same model fed one token at a time."""
    path = DATA / "qwen3moe-Q4_0.gguf"
    alone = NativeGGUFModel(path, kv_slots=64, dtype="bfloat16")
    rows = [alone.forward(np.array([t]), np.array([i]), np.array([i]), np.arange(i + 1)[None, :], np.array([i + 1]))[0]
            for i, t in enumerate(PROMPT)]
    assert np.array_equal(one_call(NativeGGUFModel(path, kv_slots=64, dtype="bfloat16"), PROMPT), np.stack(rows))


def test_float32_rows_are_independent_and_near_the_dequantized_float_model():
    """float32 steps: a prompt in one call equals its tokens one at a time (bit for bit), and its
    logits stay near the float32 model of the dequantized weights (the kernels quantize each row's
    activations to int8 blocks, as llama.cpp does; the float model does not)."""
    path = DATA / "qwen3_wide-Q4_K_M.gguf"
    model = NativeGGUFModel(path, kv_slots=64)
    got = one_call(model, PROMPT)
    alone = NativeGGUFModel(path, kv_slots=64)
    rows = [alone.forward(np.array([t]), np.array([i]), np.array([i]), np.arange(i + 1)[None, :], np.array([i + 1]))[0]
            for i, t in enumerate(PROMPT)]
    assert np.array_equal(got, np.stack(rows))
    ref = load_model(resolve_model_path(path), gguf=gguf_source(path), dtype="float32")
    with torch.inference_mode():
        want = ref.forward(ForwardBatch.from_requests([PROMPT], [list(range(len(PROMPT)))]), ref.new_kv_buffer(64))
    assert np.abs(got[-1] - want.numpy()[-1]).max() < 0.05 * np.abs(want.numpy()).max()


def test_it_loads_and_decodes_in_a_process_without_torch():
    fixture = "qwen2-Q5_0"
    _, tokens = torch_token_by_token(torch_model(fixture), PROMPT, 6)
    code = ("import json, sys\n"
            "from sglc_runtime.model.native_model import NativeGGUFModel\n"
            f"m = NativeGGUFModel({str(DATA / (fixture + '.gguf'))!r}, kv_slots=64, dtype='bfloat16', threads=1)\n"
            f"print(json.dumps([m.generate_greedy({PROMPT}, 6), 'torch' in sys.modules]))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == tokens and imported is False


@pytest.mark.parametrize("fixture, reason", [("olmoe-Q4_1", "OlmoeForCausalLM"), ("llama-F16", "F16")])
def test_what_it_does_not_run_is_refused_by_name(fixture, reason):
    with pytest.raises(NativeModelError, match=reason):
        NativeGGUFModel(DATA / f"{fixture}.gguf", kv_slots=16)


def test_bad_steps_fail_before_any_work_with_the_reason():
    model = NativeGGUFModel(DATA / "qwen2-Q5_0.gguf", kv_slots=16)
    one = np.array([0])
    with pytest.raises(NativeModelError, match="disagree"):
        model.forward(np.array([1, 2]), one, one, np.zeros((1, 1)), np.array([1]))
    with pytest.raises(NativeModelError, match="vocabulary"):
        model.forward(np.array([10**6]), one, one, np.zeros((1, 1)), np.array([1]))
    with pytest.raises(NativeModelError, match="position"):
        model.forward(np.array([1]), np.array([10**6]), one, np.zeros((1, 1)), np.array([1]))
    with pytest.raises(NativeLibraryError, match="outside 16 slots"):  # NOTE: the op's own check, through the C API
        model.forward(np.array([1]), one, np.array([99]), np.array([[99]]), np.array([1]))
    with pytest.raises(NativeModelError, match="dtype"):
        NativeGGUFModel(DATA / "qwen2-Q5_0.gguf", kv_slots=16, dtype="float16")


def test_bf16_conversions_round_to_nearest_even_as_torch_does():
    x = np.array([1.0, -2.5, 3.14159, 1e-40, 65504.0, 1.00390625, 1.01171875, np.inf, -np.inf, np.nan], np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = to_bf16(x)
    assert np.array_equal(got[:-1], want[:-1]) and np.isnan(from_bf16(got)[-1])
    assert np.array_equal(from_bf16(want), torch.from_numpy(want.view(np.int16)).view(torch.bfloat16).float().numpy(),
                          equal_nan=True)
