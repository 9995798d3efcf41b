"""Hugging Face folders load in the precision they ship in: a checkpoint saved in float16 or bfloat16
(as most are) gives, run in float32, transformers' float32 logits on the very values stored."""
from __future__ import annotations

import os

import pytest
import torch
import transformers
from safetensors import safe_open

from sglc_runtime.model.models import load_model
from test_model_parity import _three_ways


@pytest.mark.parametrize("stored", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_a_half_precision_checkpoint_loads_as_stored(tmp_path, stored):
    cfg = transformers.Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   max_position_embeddings=128, tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(cfg).to(stored).eval()
    hf.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16" if stored == torch.float16 else "BF16"}
    hf = hf.float()  # NOTE: the oracle: the stored values, widened exactly, in float32
    ours = load_model(tmp_path, dtype="float32")
    ids = [3, 17, 5, 99, 42, 7, 64, 1]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0]
    for got in _three_ways(ours, [ids]):
        torch.testing.assert_close(got[0], want, atol=1e-4, rtol=1e-4)


def _maps_of(file: str) -> list[tuple[int, int]]:
    """(mapped bytes, resident KiB) of every mapping of ``file`` in this process (/proc/self/smaps)."""
    out, current = [], None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                current = [hi - lo, 0] if line.rstrip().endswith(file) else None
                if current is not None:
                    out.append(current)
            elif current is not None and head[0] == "Rss:":
                current[1] = int(head[1])
    return [tuple(m) for m in out]


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the process's maps (Linux)")
def test_a_loaded_model_maps_only_its_embedding_of_the_checkpoint_file(tmp_path):
    """safetensors maps the file and hands out views of the map; one tensor kept as loaded kept the
    whole map and every page the load read resident: RSS was the file plus the model's own copies.
    What may outlive the load is the embedding's own map (looked up in place, mapped_tensor.py):
    no more than its bytes, and none of its pages resident once the tied head is packed from it.
    Lookups read the stored rows."""
    import gc

    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    file = str(tmp_path / "model.safetensors")
    model = load_model(tmp_path, dtype="bfloat16")
    gc.collect()
    table_bytes = 512 * 64 * 2
    maps = _maps_of(file)
    assert len(maps) == 1 and maps[0][0] <= table_bytes + 2 * 4096, f"more than the embedding stayed mapped: {maps}"
    assert maps[0][1] == 0, "the embedding's pages stayed resident after the head was packed"
    ids = [3, 17, 5, 99]
    assert torch.equal(torch.nn.functional.embedding(torch.tensor(ids), model.embed),
                       hf.model.embed_tokens.weight.detach()[ids])
    assert torch.isfinite(_three_ways(model, [ids])[0][0]).all()
    # NOTE: stored bf16, run in float32: looked up in place too (rows widened per lookup)
    float_model = load_model(tmp_path, dtype="float32")
    gc.collect()
    maps = _maps_of(file)
    assert len(maps) == 2 and all(size <= table_bytes + 2 * 4096 for size, _ in maps), maps
    assert float_model.embed.dtype == torch.bfloat16


def test_a_bfloat16_folder_is_served_in_bfloat16_where_the_cpu_runs_it_natively(tmp_path, monkeypatch):
    """EngineConfig's default dtype for a Hugging Face folder follows what it is stored in where
    that is cheap: bfloat16 on a CPU with native bf16 matmuls (one packed copy of half the bytes),
    float32 on one without (SGLC_CPU_LEVEL=avx2 stands for an AVX2-only CPU) and for a float32
    folder; GGUF files keep their quantized path, and an explicit dtype always wins."""
    from sglc_runtime.engine.engine_config import EngineConfig
    from sglc_runtime.model.native.capabilities import native_bf16

    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    bf16, fp32 = tmp_path / "bf16", tmp_path / "fp32"
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(bf16)
    transformers.LlamaForCausalLM(cfg).save_pretrained(fp32)
    monkeypatch.delenv("SGLC_CPU_LEVEL", raising=False)
    native = native_bf16()
    assert EngineConfig(model=str(bf16), device="cpu").dtype == ("bfloat16" if native else "float32")
    assert EngineConfig(model=str(fp32), device="cpu").dtype == "float32"
    assert EngineConfig(model=str(bf16), device="cpu", dtype="float32").dtype == "float32"
    if native:  # the model really loads in the dtype chosen: one packed bf16 copy per linear
        model = load_model(bf16, dtype=EngineConfig(model=str(bf16), device="cpu").dtype)
        assert model.dtype == torch.bfloat16
        assert torch.isfinite(_three_ways(model, [[3, 17, 5]])[0][0]).all()
    monkeypatch.setenv("SGLC_CPU_LEVEL", "avx2")
    assert EngineConfig(model=str(bf16), device="cpu").dtype == "float32"
    assert EngineConfig(model=str(bf16), device="cpu", quantization="auto").dtype == "float32"
