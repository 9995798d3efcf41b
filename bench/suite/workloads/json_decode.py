"""JSON decoding: extract a person record from a generated biography with a regex-constrained gen.

The shape of SGLang's JSON decoding benchmark (Fig. 5): a pretty-printed record (4-space indent,
one field per line, a nested object) whose regex fixes the keys, their order, the layout and the
value formats, with enums where the values come from a known set (occupation, city). A constant
instruction and solved examples (biography -> record) are shared by every program. Keys,
punctuation, indentation and the rest of an enum value once its first tokens decide it are what
jump-forward decoding emits without the model.
"""
from __future__ import annotations

import json
import random
from typing import Any, Union

import sglc as sgl
from bench.suite.workload import Workload, WorkloadInstance, by_size, make_instance
from bench.suite.workloads.synthetic import CITIES, OCCUPATIONS, bio, rng_for

NAME = "json_decode"

INSTRUCTION = (
    "Read each biography and extract the facts it states into a JSON record. Use the exact keys and layout "
    "shown in the examples, in the same order. Names and cities start with a capital letter; occupations and "
    "hobbies are lower case; the age is a whole number.\n\n"
)

#: A record layout: (key, value regex) or (key, nested layout), in output order.
Layout = list[tuple[str, Union[str, "Layout"]]]

NAME_RE = r'"[A-Z][a-z]{1,11} [A-Z][a-z]{1,11}"'
PHRASE_RE = r'"[a-z]{2,15}( [a-z]{2,15}){0,2}"'
CONTACT: Layout = [("email", r'"[a-z]{2,12}\.[a-z]{2,12}@example\.com"'), ("phone", r'"555-[0-9]{4}"')]
FIELDS: dict[str, Union[str, Layout]] = {
    "name": NAME_RE,
    "age": r"[1-9][0-9]",
    "occupation": '"(' + "|".join(OCCUPATIONS) + ')"',
    "city": '"(' + "|".join(CITIES) + ')"',
    "hobby": PHRASE_RE,
    "contact": CONTACT,
}

# programs, fields, solved examples, max tokens
SIZE = {
    "tiny": (2, ("name", "age"), 1, 32),
    "quick": (12, ("name", "age", "occupation", "city", "hobby", "contact"), 2, 112),
    "full": (32, ("name", "age", "occupation", "city", "hobby", "contact"), 3, 112),
}


def layout_regex(layout: Layout, depth: int = 0) -> str:
    """The regex of a record laid out like ``json.dumps(record, indent=4)``."""
    pad, end = "    " * (depth + 1), "    " * depth
    items = [f'{pad}"{key}": ' + (value if isinstance(value, str) else layout_regex(value, depth + 1))
             for key, value in layout]
    return r"\{\n" + r",\n".join(items) + r"\n" + end + r"\}"


def record_regex(fields: tuple[str, ...]) -> str:
    """The pretty-printed JSON object regex with `fields` in order."""
    return layout_regex([(f, FIELDS[f]) for f in fields])


def record_json(record: dict[str, Any], fields: tuple[str, ...]) -> str:
    return json.dumps({f: record[f] for f in fields}, indent=4)


def person_bio(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A biography that also states how to reach the person, and its full record."""
    text, record = bio(rng)
    first, last = record["name"].lower().split()
    record["contact"] = {"email": f"{first}.{last}@example.com", "phone": f"555-{rng.randint(0, 9999):04d}"}
    text += f" You can reach {record['name'].split()[0]} at {record['contact']['email']} or on {record['contact']['phone']}."
    return text, record


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
        text, record = person_bio(shots)
        prefix += f"Biography: {text}\nJSON: {record_json(record, fields)}\n\n"
    rng = rng_for(NAME, seed, "inputs")
    inputs = [{"biography": person_bio(rng)[0]} for _ in range(programs)]
    warmup = {"biography": person_bio(rng_for(NAME, seed, "warmup"))[0]}
    return make_instance(make_program(prefix, fields, max_tokens), size, warmup, inputs)


WORKLOAD = Workload(
    name=NAME, title="JSON decoding",
    shape="1 regex-constrained gen per program: a pretty-printed JSON record (tiny 2 fields; quick/full 6 with "
          "2 enums and a nested object, as in the paper's character-profile regex); instruction + solved "
          "examples shared by all programs",
    prefix_heavy=False, has_forks=False, has_constraints=True, build=build,
)
