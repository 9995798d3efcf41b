"""Every architecture's GGUF fixture runs on a CUDA GPU as on the CPU (marked gpu: skipped without one).

Off the CPU the file's tensors are decoded into the model's dtype (the block kernels are CPU
code), the embedding too, and "auto" attention is Triton with CUDA graphs except where the model
needs sliding windows or soft-capping (torch attention then). Both engines run float32, greedy,
three prompts sharing a prefix (chunked prefill, radix cache): the GPU's tokens must be the CPU's
at >= 90% of the steps (tiny random models have near-ties that kernel rounding may flip) and every
request must finish all its tokens.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.check_families_gpu import NEW_TOKENS, greedy_tokens

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data" / "gguf"
FIXTURES = sorted(p.name for p in DATA.glob("*.gguf"))


@pytest.mark.parametrize("fixture", FIXTURES)
def test_the_gpu_engine_gives_the_cpu_s_greedy_tokens(fixture):
    want, _ = greedy_tokens(DATA / fixture, "cpu")
    got, engine = greedy_tokens(DATA / fixture, "cuda")
    assert [len(g) for g in got] == [NEW_TOKENS] * 3
    c = engine.model.config
    windowed = c.attn_logit_softcap is not None or any(c.layer_window(i) for i in range(c.num_hidden_layers))
    assert engine.placement.attention_backend == ("torch" if windowed else "triton"), engine.placement.describe()
    agree = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
    assert agree >= 0.9 * 3 * NEW_TOKENS, f"{agree} of {3 * NEW_TOKENS} greedy tokens equal the CPU's: {got} vs {want}"
