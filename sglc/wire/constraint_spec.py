"""ConstraintSpec: what a request asks its output to match, validated, with a cache key.

Three ways in: a precompiled FSM (the ``fsm`` attribute the compiler's lower_constraints pass
stores on a gen, as a plain dict), a raw regex, or a JSON schema (a JSON string, a dict or a
pydantic model class) for HTTP/API users; ``choices`` (one of several strings) is a convenience
that lowers to a regex; ``ebnf`` is a context-free grammar in GBNF/EBNF text (issue 27: SGLang's
``ebnf`` field, llama.cpp's ``grammar``, and what the compiler lowers every grammar syntax to),
compiled by ``sglc.grammar``'s engine rather than to an FSM. The spec is cheap to build and hash; compiling it is the grammar
cache's job (``sglc_runtime.constrained.grammar_cache``), once per distinct constraint.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from sglc import fsm
from sglc.wire.json_schema_text import plain_json, schema_text


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    """One request's constraint. ``text`` is the regex, the compact JSON schema, the JSON list
    of choices, the grammar's GBNF/EBNF text (kind "ebnf"), or (kind "fsm") a digest of the FSM
    dict; ``data`` holds the FSM dict itself.

    ``key`` identifies equal constraints for caching; two specs with equal keys compile to the
    same FSM.
    """

    kind: str
    text: str
    data: Any = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.text)

    @classmethod
    def of(
        cls,
        *,
        regex: str | None = None,
        json_schema: Any = None,
        fsm: dict | None = None,
        choices: Sequence[str] | None = None,
        ebnf: str | None = None,
    ) -> ConstraintSpec | None:
        """The spec for whichever one argument is given; None when none is.

        Raises TypeError / ValueError (naming the argument) for wrong types, several
        constraints at once, or a JSON schema that is not JSON.
        """
        given = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("fsm", fsm),
                                ("choices", choices), ("ebnf", ebnf)) if v is not None]
        if not given:
            return None
        if len(given) > 1:
            raise ValueError(f"a request takes at most one constraint, got {', '.join(given)}")
        if regex is not None:
            if not isinstance(regex, str):
                raise TypeError(f"regex must be a str, got {type(regex).__name__}")
            return cls("regex", regex)
        if json_schema is not None:
            return cls("json_schema", schema_text(json_schema))
        if ebnf is not None:
            if not isinstance(ebnf, str):
                raise TypeError(f"ebnf must be a str (a GBNF/EBNF grammar), got {type(ebnf).__name__}")
            return cls("ebnf", ebnf)
        if choices is not None:
            if isinstance(choices, str) or not isinstance(choices, (list, tuple)) or not choices:
                raise TypeError("choices must be a non-empty list of str")
            if not all(isinstance(c, str) for c in choices):
                raise TypeError("choices must contain only str")
            return cls("choices", json.dumps(list(choices), ensure_ascii=False))
        if not isinstance(fsm, dict):
            raise TypeError(f"fsm must be the dict written by sglc.fsm.fsm_to_dict, got {type(fsm).__name__}")
        return cls("fsm", _digest(fsm), fsm)

    def compile(self, meter: fsm.CompileMeter | None = None) -> fsm.FSM:
        """Build the FSM (uncached) under ``meter``'s budget (the default one when none is
        given). Raises a ``sglc.fsm.FSMError`` (a ValueError) naming the problem; over budget,
        a ``CompileBudgetError`` naming the limit. A grammar (kind "ebnf") is no FSM: the
        runtime compiles it with ``sglc.grammar``."""
        if self.kind == "ebnf":
            raise ValueError("an ebnf grammar compiles with sglc.grammar, not to an FSM")
        if self.kind == "regex":
            return fsm.compile_regex_metered(self.text, meter)
        if self.kind == "json_schema":
            return fsm.compile_json_schema(self.text, meter=fsm.budget.as_meter(meter))
        if self.kind == "choices":
            return fsm.compile_choices(json.loads(self.text), fsm.budget.as_meter(meter))
        # NOTE: no recompilation: the compiler's table is checked and rebuilt as is.
        return fsm.fsm_from_dict(self.data, meter)

    def describe(self) -> str:
        """A short human-readable form for error messages."""
        shown = self.text if self.kind != "fsm" else str(self.data.get("pattern", "?"))
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{self.kind} {shown!r}"


def _digest(data: dict) -> str:
    return hashlib.sha256(plain_json(data, "fsm", sort_keys=True).encode()).hexdigest()
