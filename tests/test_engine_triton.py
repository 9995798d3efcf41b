"""The engine on the real model gives the same greedy tokens with torch and Triton attention.

Without a GPU the Triton kernels run in Triton's interpreter (conftest), which is slow: the run
is kept to a few short prompts and a few tokens.
"""
from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install 'sglc[triton]')")

from attention_cases import DEVICE  # noqa: E402

from sglc_runtime.engine import Engine  # noqa: E402
from sglc_runtime.model.attention import create_backend  # noqa: E402
from sglc_runtime.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.triton]

SHARED = "You are a terse assistant. Answer in one word.\n"
FIRST = SHARED + "Q: the color of the sky?"
THEN = [SHARED + "Q: two plus two?", SHARED + "Q: the capital of France?"]


def _run(engine: Engine) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_new_tokens=2, ignore_eos=True)
    # NOTE: the first prompt alone (plain prefill, then decode); the next two then extend over
    # its cached prefix (the radix cache's slots) and decode as a ragged batch of two.
    tokens = [o.token_ids for o in engine.generate([FIRST], params)]
    return tokens + [o.token_ids for o in engine.generate(THEN, params)]


def test_greedy_tokens_match_between_torch_and_triton_on_a_shared_prefix_run():
    """Prefill, prefill over a cached prefix and ragged decode give the same greedy tokens."""
    reference = Engine(device=DEVICE, attention_backend="torch", num_kv_slots=512, max_running_requests=4)
    ref = _run(reference)
    # NOTE: the same weights (one load, not two): only the model's attention backend changes; the
    # second engine has its own empty cache, pool and scheduler.
    model = reference.model
    c = model.config
    model.attn = create_backend("triton", c.num_attention_heads, c.num_key_value_heads, c.head_dim)
    engine = Engine(share_model_with=reference, num_kv_slots=512, max_running_requests=4)
    assert _run(engine) == ref
    assert engine.stats().cached_tokens == reference.stats().cached_tokens > 0
