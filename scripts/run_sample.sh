#!/usr/bin/env bash
# The README's sample: compile the SGLang paper's essay judge to graph.pb, print its IR, then run
# it on the embedded runtime (the default model, SmolLM2-135M, converted once and cached).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
sglc compile samples/essay_judge.py -o out/essay_judge.pb
sglc inspect out/essay_judge.pb
sglc run out/essay_judge.pb --input samples/essay_judge.args.jsonl --output out/essay_judge.jsonl
python - <<'PY'
import json
for line in open("out/essay_judge.jsonl"):
    result = json.loads(line)
    print(json.dumps({"index": result["index"], "variables": result["variables"], "error": result["error"]},
                     ensure_ascii=False)[:400])
PY
