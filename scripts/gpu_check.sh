#!/usr/bin/env bash
# The GPU checks, as one device call (see docs/attention_backends.md "GPU runs"): the triton- and
# gpu-marked tests with compiled kernels on CUDA tensors (every architecture's GGUF fixture on
# CUDA against the CPU among them), constrained decoding on CUDA (bench/check_constraints_gpu.py's
# table: regex, JSON schemas, EBNF grammars) and bench/bench_attention_gpu.py (its table). Each step has its own
# time limit; a failing step does not stop the next. Results and logs go to $OUT.
#
# Prepared on the development machine (the device machine reaches no package index):
#   mkdir -p .gpu/smollm2 && cp <resolve_model_path('default')>/* .gpu/smollm2/  # config + tokenizer
#   pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl gguf==X lark==Y
# and run with carry [".whl", ".gpu"]:  bash scripts/gpu_check.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/sglc_gpu_out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sglc_site .whl/*.whl
    export PYTHONPATH=/tmp/sglc_site${PYTHONPATH:+:$PYTHONPATH}
fi
# NOTE: runtime/ imports as sglc_runtime (setup.py's package_dir); a link does it without installing
mkdir -p /tmp/sglc_pp && ln -sfn "$PWD/runtime" /tmp/sglc_pp/sglc_runtime
export PYTHONPATH=/tmp/sglc_pp:$PWD:$PYTHONPATH
export SGLC_GPU_CONFIG_DIR=$PWD/.gpu/smollm2  # tests/test_constraints_on_gpu.py: no model wheel there
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"

echo "== tests (compiled kernels) =="
timeout -k 5 ${TESTS_S:-240} python3 -m pytest -p no:cacheprovider -q -m "not model" \
    tests/test_attention_triton.py tests/test_cuda_graph.py tests/test_placement.py tests/test_gguf_on_gpu.py \
    tests/test_constraints_on_gpu.py 2>&1 | tee "$OUT/tests.log" | tail -25
echo "== constraints on CUDA =="
timeout -k 5 ${CONSTRAINTS_S:-90} python3 bench/check_constraints_gpu.py --config-dir .gpu/smollm2 --out "$OUT" 2>&1 \
    | tee "$OUT/constraints.log" | tail -12
echo "== bench_attention_gpu =="
timeout -k 5 ${BENCH_S:-240} python3 bench/bench_attention_gpu.py --config-dir .gpu/smollm2 --out "$OUT" 2>&1 \
    | tee "$OUT/bench.log" | tail -45
