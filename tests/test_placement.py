"""Device and attention-backend placement: "auto" picks the best available, explicit choices are
checked before any weights load, and `sglc serve` passes both through."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglc.cli import main
from sglc_runtime.engine.engine_config import EngineConfig
from sglc_runtime.model.model_config import ModelConfig
from sglc_runtime.model.placement import Placement, fit_attention_to_model, resolve_placement

HAS_GPU = torch.cuda.is_available()
DATA = Path(__file__).parent / "data" / "gguf"


def test_auto_picks_cuda_and_triton_with_a_gpu_else_cpu_and_torch():
    """auto/auto is cuda+triton where a GPU (and triton) exists, cpu+torch otherwise."""
    p = resolve_placement()
    if HAS_GPU:
        assert p.device == "cuda" and p.attention_backend in ("triton", "torch")
    else:
        assert (p.device, p.attention_backend) == ("cpu", "torch")
    line = p.describe()
    assert line.startswith(f"device={p.device} attention={p.attention_backend} (") and "auto" in line


def test_explicit_choices_are_kept():
    """An explicit CPU + torch choice is used as given."""
    p = resolve_placement("cpu", "torch")
    assert (p.device, p.attention_backend) == ("cpu", "torch") and "as asked" in p.why


@pytest.mark.skipif(HAS_GPU, reason="checks the error without a GPU")
def test_cuda_without_a_gpu_is_refused_with_the_reason():
    """device=cuda on a machine without CUDA fails before loading, saying so."""
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_placement("cuda", "auto")


def test_flashinfer_is_refused_with_why_it_is_unavailable():
    """Asking for flashinfer says it is not installed (or not implemented), never fails later."""
    with pytest.raises(ValueError, match="flashinfer is"):
        resolve_placement("cpu", "flashinfer")


def test_unknown_backend_names_the_choices():
    """A misspelt backend lists the valid names."""
    with pytest.raises(ValueError, match="triton"):
        resolve_placement("cpu", "tirton")


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    """Triton on the CPU only runs interpreted (tests); otherwise the error says to use torch."""
    pytest.importorskip("triton", reason="triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        resolve_placement("cpu", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_placement("cpu", "triton").attention_backend == "triton"


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "", "CPU"])
def test_engine_config_rejects_malformed_devices(device):
    """EngineConfig.device is auto, cpu, cuda or cuda:N."""
    with pytest.raises(ValueError, match="EngineConfig.device"):
        EngineConfig(device=device)


def test_engine_config_defaults_are_auto():
    """Both default to auto (resolved by the engine, which logs the result)."""
    c = EngineConfig(device="cuda:1")
    assert c.device == "cuda:1" and EngineConfig().device == EngineConfig().attention_backend == "auto"


@pytest.mark.skipif(HAS_GPU, reason="checks the error without a GPU")
@pytest.mark.skipif(HAS_GPU, reason="checks the error without a GPU (with one, this would serve)")
def test_serve_with_cuda_on_a_cpu_machine_is_one_line_exit_2(capsys):
    """`sglc serve --device cuda` without a GPU prints one line naming the problem and exits 2."""
    code = main(["serve", "--device", "cuda", "--port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no CUDA GPU" in err[0], err


def test_serve_rejects_an_unknown_attention_backend(capsys):
    """--attention-backend only takes the registered names (argparse exits 2)."""
    with pytest.raises(SystemExit) as e:
        main(["serve", "--attention-backend", "nope"])
    assert e.value.code == 2


def _fixture_config(name: str) -> ModelConfig:
    return ModelConfig.from_dict(json.loads((DATA / f"{name}.config.json").read_text()))


@pytest.mark.parametrize("name, needs", [("gemma2", "sliding-window attention and attention logit soft-capping"),
                                         ("gemma3", "sliding-window attention"), ("phi3", "sliding-window attention")])
def test_auto_attention_falls_back_to_torch_where_the_model_needs_what_triton_lacks(name, needs):
    """auto: a windowed or soft-capped model runs on torch attention on the GPU, saying why; an explicit
    triton stays triton (the backend then refuses by name), and a plain model keeps triton."""
    on_gpu = Placement("cuda", "triton", "auto device: H100; auto attention")
    fitted = fit_attention_to_model(on_gpu, "auto", _fixture_config(name))
    assert (fitted.device, fitted.attention_backend) == ("cuda", "torch")
    assert fitted.describe().endswith(f"torch: the model needs {needs}, which triton does not implement)")
    assert fit_attention_to_model(on_gpu, "triton", _fixture_config(name)) == on_gpu
    assert fit_attention_to_model(on_gpu, "auto", _fixture_config("qwen2")) == on_gpu


def test_cuda_graphs_asked_for_a_model_that_cannot_be_captured_are_refused_naming_why():
    """A mixture of experts reads per-expert counts on the host: auto leaves graphs off, an explicit
    cuda_graph=True is refused at start with the reason (a dense model raises nothing)."""
    from sglc_runtime.engine import Engine

    with pytest.raises(ValueError, match="cannot be captured: its mixture-of-experts layers"):
        Engine(model=str(DATA / "olmoe-Q4_1.gguf"), device="cpu", cuda_graph=True, num_kv_slots=64)
    dense = Engine(model=str(DATA / "qwen2-Q5_0.gguf"), device="cpu", num_kv_slots=64)
    assert dense.model.graph_unsafe_reason() is None
