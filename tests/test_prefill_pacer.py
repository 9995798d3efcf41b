"""PrefillPacer: "auto" prefill chunks follow the measured rate toward a step-time target."""
from __future__ import annotations

import pytest

from sglc_runtime.engine.prefill_pacer import CHUNK_QUANTUM, PrefillPacer


def test_the_chunk_follows_the_rate_toward_the_target_in_multiples_of_32():
    """After the dropped warm-up sample, a steady rate r gives chunks of r x target (rounded down
    to 32), inside the bounds."""
    pacer = PrefillPacer(target_s=0.15, initial=256, min_chunk=64, max_chunk=4096, smoothing=1.0)
    assert pacer.chunk == 256
    assert pacer.observe(256, 5.0) == 256  # warm-up: a fresh engine's first step is ~10x slow
    assert pacer.observe(256, 0.5) == 64  # 512 tok/s x 0.15 s = 76 -> 64
    assert pacer.observe(256, 0.1) == 384  # 2560 tok/s -> 384
    assert pacer.observe(256, 0.001) == 4096  # capped
    assert pacer.observe(256, 100.0) == 64  # floored
    assert all(c % CHUNK_QUANTUM == 0 for c in (64, 384, 4096))


def test_small_steps_and_zero_times_teach_nothing():
    pacer = PrefillPacer(target_s=0.15, initial=256)
    pacer.observe(256, 1.0)  # warm-up dropped
    assert pacer.observe(8, 10.0) == 256 and pacer.rate is None  # decode-sized prefill
    assert pacer.observe(512, 0.0) == 256 and pacer.rate is None


def test_the_rate_is_smoothed():
    """One slow step (a long prefix's attention, a noisy neighbour) moves the chunk part way."""
    pacer = PrefillPacer(target_s=0.1, initial=256, smoothing=0.5)
    pacer.observe(256, 1.0)
    pacer.observe(1000, 0.5)  # 2000 tok/s -> 200 -> 192
    assert pacer.chunk == 192
    pacer.observe(1000, 1.0)  # 1000 tok/s: the average 1500 -> 150 -> 128
    assert pacer.chunk == 128


@pytest.mark.parametrize("kwargs", [{"target_s": 0}, {"target_s": 0.1, "min_chunk": 0},
                                    {"target_s": 0.1, "min_chunk": 100, "max_chunk": 50},
                                    {"target_s": 0.1, "smoothing": 0}])
def test_bad_settings_are_named(kwargs):
    with pytest.raises(ValueError, match="PrefillPacer"):
        PrefillPacer(initial=256, **kwargs)
