#!/usr/bin/env bash
# The README's sample: compile the SGLang paper's essay judge to graph.pb and print its IR.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
sglc compile samples/essay_judge.py -o out/essay_judge.pb
sglc inspect out/essay_judge.pb
