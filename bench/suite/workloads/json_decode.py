"""JSON decoding: extract a person record from a generated biography with a regex-constrained gen.

A constant instruction and solved examples (biography -> JSON) are shared by every program; the
regex fixes keys, order and value formats, so the keys and punctuation are what jump-forward
decoding can emit without the model (SGLang's JSON decoding benchmark, Fig. 5).
"""
from __future__ import annotations

import json
from typing import Any

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import bio, rng_for

NAME = "json_decode"

INSTRUCTION = (
    "Read each biography and extract the facts it states into a JSON record on one line. Use the exact keys "
    "shown in the examples, in the same order. Names and cities start with a capital letter; occupations and "
    "hobbies are lower case; the age is a whole number.\n\n"
)
FIELD_REGEX = {
    "name": r'"[A-Z][a-z]{1,11} [A-Z][a-z]{1,11}"',
    "age": r"[1-9][0-9]",
    "occupation": r'"[a-z]{2,15}( [a-z]{2,15}){0,2}"',
    "city": r'"[A-Z][a-z]{1,11}"',
    "hobby": r'"[a-z]{2,15}( [a-z]{2,15}){0,2}"',
}

# programs, fields, solved examples, max tokens
SIZE = {
    "tiny": (2, ("name", "age"), 1, 32),
    "quick": (8, ("name", "age", "occupation", "city"), 3, 64),
    "full": (32, ("name", "age", "occupation", "city", "hobby"), 4, 96),
}


def record_regex(fields: tuple[str, ...]) -> str:
    """The one-line JSON object regex with `fields` in order."""
    return r"\{" + ", ".join(f'"{f}": {FIELD_REGEX[f]}' for f in fields) + r"\}"


def record_json(record: dict[str, Any], fields: tuple[str, ...]) -> str:
    return json.dumps({f: record[f] for f in fields})


def make_program(prefix: str, fields: tuple[str, ...], max_tokens: int) -> Any:
    regex = record_regex(fields)

    @sgl.function
    def json_decode(s, biography):
        s += prefix + "Biography: " + biography + "\nJSON: "
        s += sgl.gen("record", max_tokens=max_tokens, regex=regex)
    return json_decode


def build(size: str, seed: int) -> WorkloadInstance:
    programs, fields, num_examples, max_tokens = by_size(size, SIZE)
    shots = rng_for(NAME, seed, "examples")
    prefix = INSTRUCTION
    for _ in range(num_examples):
        text, record = bio(shots)
        prefix += f"Biography: {text}\nJSON: {record_json(record, fields)}\n\n"
    rng = rng_for(NAME, seed, "inputs")
    inputs = [{"biography": bio(rng)[0]} for _ in range(programs)]
    warmup = {"biography": bio(rng_for(NAME, seed, "warmup"))[0]}
    return make_instance(make_program(prefix, fields, max_tokens), size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="JSON decoding",
    shape="1 regex-constrained gen per program (a one-line JSON record: 2 fields tiny, 4 quick, 5 full); "
          "instruction + solved examples shared by all programs",
    prefix_heavy=False, has_forks=False, has_constraints=True, build=build,
)
