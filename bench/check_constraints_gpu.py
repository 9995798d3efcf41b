"""Constrained decoding on a CUDA GPU: regex, JSON schema (flat: the FSM path; recursive: the
grammar engine) and EBNF grammars, with every output checked by an independent parser.

The masks are built on the host (the FSM's token index, the grammar engine's per-position
classes) and applied to logits on the device, jump-forward splices forced text into a running
request: this is the path a GPU changes. A SmolLM2-shaped model with RANDOM weights (the real
checkpoint cannot travel to the device machine; a constraint must hold whatever the weights)
samples at temperature 1, seeded, many requests in flight together, on ``--device`` (CUDA graphs
as auto picks them). Checks per output:

- finished by the constraint ("stop"): the text parses: ``re.fullmatch`` for a regex, ``json`` +
  a structural check of the schema for JSON, lark's Earley parser on the same grammar for EBNF;
- cut by max_new_tokens ("length"): the text is a prefix the constraint can continue (our CPU
  matcher decides: a check that the device applied the host's masks).

    python bench/check_constraints_gpu.py --config-dir DIR_WITH_CONFIG_AND_TOKENIZER [--out DIR]

Prints one JSON row per constraint and a table; returns 1 if any output broke its constraint.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # grammar_oracle: the IR printed as a lark grammar

from bench.random_model import write_random_model  # noqa: E402
from sglc.grammar import parse_gbnf  # noqa: E402
from sglc_runtime.constrained import ConstraintSpec  # noqa: E402
from sglc_runtime.engine import Engine  # noqa: E402
from sglc_runtime.sampling.sampling_params import SamplingParams  # noqa: E402

GRAMMARS = ROOT / "tests" / "fixtures" / "grammars"
NESTED = 'root ::= list\nlist ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9] | list'
ARITH = ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
         'factor ::= [0-9]{1,3} | "(" expr ")"')
#: Forces a long literal (jump-forward) around a recursive rule (the grammar engine).
FORCED = 'root ::= "The final answer, after careful thought, is: " n "."\nn ::= [0-9]{1,4} | "(" n ")"'
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
TREE = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
    "required": ["name", "children"], "additionalProperties": False}
YEAR = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])"


def _person_ok(v) -> bool:
    return (isinstance(v, dict) and set(v) == {"name", "age"} and isinstance(v["name"], str)
            and len(v["name"]) <= 12 and type(v["age"]) is int and 0 <= v["age"] <= 120)


def _tree_ok(v) -> bool:
    return (isinstance(v, dict) and set(v) == {"name", "children"} and isinstance(v["name"], str)
            and len(v["name"]) <= 10 and isinstance(v["children"], list) and len(v["children"]) <= 2
            and all(_tree_ok(c) for c in v["children"]))


def _lark(grammar: str):
    # NOTE: the tests' IR -> lark oracle, a repository module (not a dependency): imported by path,
    # as bench_grammar.py imports the engine tests' helpers
    oracle = importlib.import_module("grammar_oracle")
    return oracle.lark_parser_for(parse_gbnf(grammar)).accepts


def cases() -> list[tuple[str, dict, object]]:
    """(name, SamplingParams constraint fields, whole-output check)."""
    json_gbnf = (GRAMMARS / "json.gbnf").read_text()
    return [
        ("regex", {"regex": YEAR}, lambda t: re.fullmatch(YEAR, t) is not None),
        ("json_schema_flat", {"json_schema": json.dumps(PERSON)}, lambda t: _person_ok(json.loads(t))),
        ("json_schema_recursive", {"json_schema": json.dumps(TREE)}, lambda t: _tree_ok(json.loads(t))),
        ("ebnf_nested_lists", {"ebnf": NESTED}, _lark(NESTED)),
        ("ebnf_arithmetic", {"ebnf": ARITH}, _lark(ARITH)),
        ("ebnf_forced_literal", {"ebnf": FORCED}, _lark(FORCED)),
        ("gbnf_json", {"ebnf": json_gbnf}, _lark(json_gbnf)),
    ]


def _continuable(engine: Engine, fields: dict, token_ids: list[int]) -> bool:
    """The tokens are a path the host's constraint state takes (each one allowed in turn)."""
    compiled = engine.grammars.get(ConstraintSpec.of(**fields))
    state = compiled.new_cursor()
    for t in token_ids:
        if not state.is_allowed(t):
            return False
        state.advance(t)
    return True


def check(engine: Engine, name: str, fields: dict, accepts, samples: int, max_new_tokens: int) -> dict:
    rids = [engine.submit("Answer: ", SamplingParams(temperature=1.0, seed=100 + i, max_new_tokens=max_new_tokens,
                                                     **fields)) for i in range(samples)]
    outs = [engine.wait(r) for r in rids]
    bad = []
    finished = 0
    for o in outs:
        if o.finish_reason["type"] == "stop":
            finished += 1
            try:
                ok = bool(accepts(o.text))
            except Exception:  # a parser's error is a refusal
                ok = False
        else:
            ok = _continuable(engine, fields, list(o.token_ids))
        if not ok:
            bad.append({"text": o.text, "finish": o.finish_reason})
    return {"constraint": name, "samples": samples, "finished": finished, "broken": len(bad), "examples": bad[:3]}


def run_checks(config_dir: str | Path, device: str, samples: int = 32, max_new_tokens: int = 64) -> tuple[list[dict], int]:
    """One row per constraint (see :func:`check`) and the number of jump-forward jumps made."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_random_model(config_dir, Path(tmp) / "model", seed=0)
        t0 = time.perf_counter()
        engine = Engine(model=str(model_dir), device=device, max_running_requests=64)
        print(f"engine on {device}: {engine.placement.describe()} ({time.perf_counter() - t0:.1f} s)", flush=True)
        jumps = engine.jump_counts["jumps"]
        try:
            for name, fields, accepts in cases():
                t0 = time.perf_counter()
                try:
                    row = check(engine, name, fields, accepts, samples, max_new_tokens)
                except Exception as e:  # one constraint failing must not hide the others
                    traceback.print_exc()
                    row = {"constraint": name, "error": f"{type(e).__name__}: {e}"}
                row["seconds"] = round(time.perf_counter() - t0, 2)
                print(json.dumps(row), flush=True)
                rows.append(row)
            jumps = engine.jump_counts["jumps"] - jumps
        finally:
            engine.shutdown()
    return rows, jumps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config-dir", required=True, help="folder with config.json and tokenizer files")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows, jumps = run_checks(args.config_dir, args.device, args.samples, args.max_new_tokens)
    print(f"\njump-forward jumps: {jumps}\nconstraint | finished / samples | broken | s | error")
    for r in rows:
        print(f"{r['constraint']} | {r.get('finished', '')}/{r.get('samples', '')} | {r.get('broken', '')} | "
              f"{r['seconds']} | {r.get('error', '')}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "constraints_gpu.json").write_text(json.dumps({"rows": rows, "jumps": jumps}, indent=1))
    return 1 if any(r.get("broken") or r.get("error") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
