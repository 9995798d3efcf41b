"""The torch-free RoPE tables (runtime/model/rope_tables.py) against the torch ones
(models/rope.py, themselves equal to transformers' bit for bit): every scheme, within float32
rounding at every position, past the original window too."""
from __future__ import annotations

import numpy as np
import pytest

from sglc_runtime.model.models.rope import RotaryEmbedding
from sglc_runtime.model.rope_tables import rope_tables

ROPES = [
    None,
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
    {"rope_type": "dynamic", "factor": 3.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "beta_fast": 16, "beta_slow": 2,
     "mscale": 0.7, "mscale_all_dim": 1.0},
    {"rope_type": "longrope", "original_max_position_embeddings": 16,
     "short_factor": [1.0 + 0.1 * i for i in range(16)], "long_factor": [2.0 + 0.3 * i for i in range(16)]},
]


@pytest.mark.parametrize("rotary_dim", [32, 16])
@pytest.mark.parametrize("scaling", ROPES, ids=lambda s: "default" if s is None else s["rope_type"])
def test_tables_equal_the_torch_ones_within_float32_rounding(scaling, rotary_dim):
    if scaling is not None and scaling["rope_type"] == "longrope" and rotary_dim != 32:
        pytest.skip("longrope's factors are sized for the whole rotary dimension")
    theta, max_pos, positions = 10000.0, 64, 200
    ours = rope_tables(32, theta, scaling, max_pos, positions, rotary_dim)
    torch_rope = RotaryEmbedding(32, theta, scaling, max_pos, rotary_dim=rotary_dim)
    want = [t[:positions].numpy() for t in torch_rope.tables(positions - 1)]
    for got, ref in zip(ours, want):
        assert got.shape == ref.shape == (positions, rotary_dim) and got.dtype == np.float32
        # NOTE: a float32 angle near 200 rad carries ~1e-5 of its own rounding; cos/sin follow it
        np.testing.assert_allclose(got, ref, rtol=0, atol=4e-5)
        np.testing.assert_allclose(got[:40], ref[:40], rtol=0, atol=2e-6)


def test_an_unknown_type_is_named():
    with pytest.raises(ValueError, match="proportional"):
        rope_tables(32, 10000.0, {"rope_type": "proportional"}, 64, 8)
