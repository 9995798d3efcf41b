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

from sglc_runtime.engine import Engine
from sglc_runtime.sampling.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data" / "gguf"
FIXTURES = sorted(p.name for p in DATA.glob("*.gguf"))
NEW_TOKENS = 16


def _greedy(path: Path, device: str) -> tuple[list[list[int]], Engine]:
    engine = Engine(model=str(path), device=device, dtype="float32", quantization="none",
                    num_kv_slots=512, chunked_prefill_size=8, max_running_requests=4)
    prefix = [(7 * i + 3) % 200 + 10 for i in range(12)]
    prompts = [prefix + [(11 * i + j) % 200 + 10 for i in range(n)] for j, n in enumerate((3, 5, 9))]
    params = SamplingParams(temperature=0, max_new_tokens=NEW_TOKENS, ignore_eos=True)
    outs = [engine.generate(prompts[:1], params)[0].token_ids]  # then two over its cached prefix
    outs += [o.token_ids for o in engine.generate(prompts[1:], params)]
    return outs, engine


@pytest.mark.parametrize("fixture", FIXTURES)
def test_the_gpu_engine_gives_the_cpu_s_greedy_tokens(fixture):
    want, _ = _greedy(DATA / fixture, "cpu")
    got, engine = _greedy(DATA / fixture, "cuda")
    assert [len(g) for g in got] == [NEW_TOKENS] * 3
    c = engine.model.config
    windowed = c.attn_logit_softcap is not None or any(c.layer_window(i) for i in range(c.num_hidden_layers))
    assert engine.placement.attention_backend == ("torch" if windowed else "triton"), engine.placement.describe()
    agree = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
    assert agree >= 0.9 * 3 * NEW_TOKENS, f"{agree} of {3 * NEW_TOKENS} greedy tokens equal the CPU's: {got} vs {want}"
