#!/usr/bin/env bash
# sglc serve against llama-server at each CPU level, one server at a time, alternating:
# llama-server then sglc, for the native level and the forced-AVX2 one, REPEATS times over.
#
#   LLAMA_DIR=/work/llamacpp [FIRST_RUN=1] [LEVELS="native avx2"] [OUT=bench/out/levels] \
#       bash bench/run_levels_vs_llamacpp.sh [REPEATS] [WORKLOADS]
#
# LLAMA_DIR holds native/ and avx2/ (each a llama-server with its libggml-cpu-*.so variants; see
# docs/benchmarks.md for the build). The forced-AVX2 sglc runs with SGLC_CPU_LEVEL=avx2 and torch's
# own kernels held to AVX2 too (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS:
# capabilities.torch_env_for), so an AVX512 machine runs what an AVX2 one would. Each run's JSON
# goes to $OUT/<level>-<server>-<run>.json (`python bench/levels_table.py $OUT` tabulates them).
# Run it alone on a quiet machine (uptime); every server gets 2 threads.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-2}"
workloads="${2:-1,2,3,4,5,6,7,8}"
llama_dir="${LLAMA_DIR:?set LLAMA_DIR to the folder holding native/ and avx2/ llama-server builds}"
gguf="$(python -c 'from sglc_runtime.model.default_model import find_default_gguf; print(find_default_gguf())')"
out="${OUT:-bench/out/levels}"
mkdir -p "$out"
llama_port=8080
sglc_port=30001

wait_http() {  # url, pid
    for _ in $(seq 1 600); do
        if curl -sf "$1/v1/models" >/dev/null 2>&1; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "server $2 died" >&2; return 1; }
        sleep 0.5
    done
    echo "server at $1 did not come up" >&2
    return 1
}

stop() {  # pid
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

run_bench() {  # name, url, json, note
    python bench/bench_vs_llamacpp.py --server "$1=$2" --workloads "$workloads" --json "$3" --note "$4"
}

first="${FIRST_RUN:-1}"
for run in $(seq "$first" $((first + repeats - 1))); do
    for level in ${LEVELS:-native avx2}; do
        echo "=== run $run, level $level: llama-server ($(uptime))"
        # NOTE: -c 131072 / -np 32 = 4,096 tokens per slot: workload 8's ~4k-token prompt fits.
        (cd "$llama_dir/$level" && exec ./llama-server -m "$gguf" --port "$llama_port" -t 2 -np 32 -c 131072 \
            --cont-batching >"/tmp/llama-$level.log" 2>&1) &
        pid=$!
        wait_http "http://127.0.0.1:$llama_port" "$pid"
        run_bench llama.cpp "http://127.0.0.1:$llama_port" "$out/$level-llama-$run.json" \
            "llama-server $level dir, -t 2 -np 32 -c 131072" || true
        stop "$pid"

        echo "=== run $run, level $level: sglc serve ($(uptime))"
        env_level=()
        if [ "$level" = avx2 ]; then
            env_level=(SGLC_CPU_LEVEL=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
        fi
        env "${env_level[@]}" sglc serve --port 0 --http-port "$sglc_port" --threads 2 >"/tmp/sglc-$level.log" 2>&1 &
        pid=$!
        wait_http "http://127.0.0.1:$sglc_port" "$pid"
        grep -m1 "model kernels" "/tmp/sglc-$level.log" || true
        run_bench sglc "http://127.0.0.1:$sglc_port" "$out/$level-sglc-$run.json" \
            "sglc serve (level $level), --threads 2" || true
        stop "$pid"
    done
done
