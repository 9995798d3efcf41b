"""Constraint cases shared by the constrained-engine tests and bench/bench_constrained.py.

Each case: a name, the constraint (a regex, or a JSON schema whose regex the FSM library
gives), a user question that invites a matching answer, and a max_new_tokens that the longest
match fits in (a generation cut by the length limit counts as a failure).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pydantic

from sglc import fsm


class Address(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=16)
    zip_code: str = pydantic.Field(pattern=r"^[0-9]{5}$")


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    age: int = pydantic.Field(ge=0, le=120)
    address: Address
    tags: list[str] = pydantic.Field(max_length=2)


_TAG = {"type": "string", "maxLength": 8}
PERSON_SCHEMA: dict[str, Any] = Person.model_json_schema()
PERSON_SCHEMA["$defs"]["Address"]["properties"]["city"]["maxLength"] = 16
PERSON_SCHEMA["properties"]["tags"]["items"] = _TAG

BOOK_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 24},
        "genre": {"enum": ["fiction", "science", "history", "poetry"]},
        "year": {"type": "integer", "minimum": 1800, "maximum": 2025},
        "in_print": {"type": "boolean"},
        "pages": {"type": "integer", "minimum": 1, "maximum": 2000},
    },
    "required": ["title", "genre", "year", "in_print"],
}

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99999},
        "items": {"type": "array", "minItems": 1, "maxItems": 3,
                  "items": {"type": "object",
                            "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                                           "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                            "required": ["sku", "qty"]}},
        "status": {"anyOf": [{"const": "open"}, {"const": "shipped"}, {"type": "null"}]},
    },
    "required": ["id", "items", "status"],
}

SGLANG_CHARACTER_REGEX = (
    r'\{\n  "name": "[\w\d\s]{1,16}",\n  "house": "(Gryffindor|Slytherin|Ravenclaw|Hufflepuff)",\n'
    r'  "blood status": "(Pure-blood|Half-blood|Muggle-born)",\n'
    r'  "occupation": "(student|teacher|auror|ministry of magic|death eater|order of the phoenix)",\n'
    r'  "wand": \{\n    "wood": "[\w\d\s]{1,16}",\n    "core": "[\w\d\s]{1,16}",\n'
    r'    "length": [0-9]{1,2}\.[0-9]{0,2}\n  \},\n  "alive": "(Alive|Deceased)",\n'
    r'  "patronus": "[\w\d\s]{1,16}",\n  "bogart": "[\w\d\s]{1,16}"\n\}'
)


@dataclass(frozen=True)
class Case:
    name: str
    regex: str
    question: str
    max_new_tokens: int
    schema: Any = None  # set for JSON-schema cases (the request sends the schema, not the regex)
    sampling: tuple[tuple[str, Any], ...] = ()  # extra SamplingParams fields

    def params(self) -> dict[str, Any]:
        """The constraint (and any extra sampling fields) as SamplingParams fields."""
        constraint = {"json_schema": self.schema} if self.schema is not None else {"regex": self.regex}
        return {**constraint, **dict(self.sampling)}

    def matches(self, text: str) -> bool:
        """Python re is the oracle; schema cases must also parse as JSON."""
        if re.fullmatch(self.regex, text) is None:
            return False
        if self.schema is not None:
            json.loads(text)
        return True


def _schema(name: str, schema: Any, question: str, max_new_tokens: int) -> Case:
    return Case(name, fsm.regex_from_json_schema(schema), question, max_new_tokens, schema)


CASES: list[Case] = [
    Case("ipv4", r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)", "Give me an IPv4 address.", 24),
    Case("date", r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", "When did the first moon landing happen? (YYYY-MM-DD)", 16),
    Case("time", r"([01]\d|2[0-3]):[0-5]\d", "What time is lunch?", 10),
    Case("email", r"[a-z0-9._]{1,16}@[a-z0-9]{1,12}\.(com|org|net)", "Make up an email address for Alice.", 40),
    Case("int", r"-?(0|[1-9][0-9]{0,6})", "How many legs does a spider have?", 12),
    Case("float", r"-?(0|[1-9][0-9]{0,4})\.[0-9]{1,4}", "What is the value of pi?", 16),
    Case("enum", r"(red|green|blue|yellow|purple)", "Name a color.", 8),
    Case("phone", r"\(\d{3}\) \d{3}-\d{4}", "Invent a US phone number.", 20),
    Case("hex_color", r"#[0-9a-f]{6}", "Give me a hex color code.", 12),
    Case("zip", r"\d{5}(-\d{4})?", "Give me a US zip code.", 16),
    Case("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", "Generate a UUID.", 48),
    Case("semver", r"[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{1,2}", "What version is the software?", 12),
    Case("url", r"https://(www\.)?[a-z]{3,10}\.(com|org|net)(/[a-z]{1,8}){0,2}", "Give me a website URL.", 40),
    Case("int_list", r"\[(-?[0-9]{1,3}, ){0,4}-?[0-9]{1,3}\]", "List a few small numbers.", 40),
    Case("non_ascii", "(café|naïve|日本語)-[0-9]{2}", "Pick a word.", 16),
    Case("non_ascii_forced", "日本語: (はい|いいえ), [0-9]{1,2}€", "Answer in Japanese.", 24),
    # NOTE: on a cycle the model may repeat "bc" until the length limit; a frequency penalty
    # (applied before the mask) makes ending at one of the final states likely, as intended.
    Case("cycle_final", "a(bc)*d?", "Write a short code.", 64, sampling=(("frequency_penalty", 1.0),)),
    Case("bool", "True|False", "Is water wet?", 4),
    Case("quoted", r'"[A-Za-z ,.!?]{0,24}"', "Say something nice in quotes.", 40),
    _schema("json_book", BOOK_SCHEMA, "Describe a book as JSON.", 80),
    _schema("json_person_pydantic", PERSON_SCHEMA, "Describe a person as JSON.", 112),
    _schema("json_order_nested", ORDER_SCHEMA, "Describe an order as JSON.", 128),
    Case("sglang_character", SGLANG_CHARACTER_REGEX, "Describe a Harry Potter character as JSON.", 200),
]
