"""JSON-schema normalisation, once for every edge: the DSL's ``gen(json_schema=...)``, the
runtime's ConstraintSpec (gRPC, HTTP, the in-process engine) and the executor's GenParams.

A schema may be JSON text, a dict, a bool (``true`` accepts any JSON value, ``false`` none, as
JSON Schema says) or a pydantic model class; it becomes compact JSON text. Key order is kept
(never sorted): the order of ``properties`` decides the order in which a constrained generation
writes the fields, so reordering would change outputs.
"""
from __future__ import annotations

import json
from typing import Any

from sglc import fsm


def schema_text(schema: Any) -> str:
    """`schema` as compact JSON text. TypeError for a value of another kind; ValueError for text
    that is not JSON, a value that is not plain JSON data (NaN included); a CompileBudgetError
    (a ValueError) for nesting deeper than the compile budget allows."""
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as err:
            raise ValueError(f"json_schema is not valid JSON: {err}") from None
        except RecursionError:  # NOTE: a clean refusal, never a traceback
            limit = fsm.DEFAULT_BUDGET.max_nesting_depth
            raise fsm.CompileBudgetError("max_nesting_depth", limit, "json_schema text nested too deeply to parse") from None
    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"json_schema must be JSON text, a dict, a bool or a pydantic model class, "
                        f"got {type(schema).__name__}")
    return plain_json(schema, "json_schema", sort_keys=False)


def plain_json(value: Any, what: str, sort_keys: bool) -> str:
    """Compact JSON text of a request's value; ValueError naming ``what`` when it is not plain
    JSON data or nests too deeply to write (never a RecursionError)."""
    limit = fsm.DEFAULT_BUDGET.max_nesting_depth
    if fsm.budget.nesting_depth(value, 4 * limit) > 4 * limit:
        raise fsm.CompileBudgetError("max_nesting_depth", limit, f"{what} nested more than {4 * limit} levels")
    try:
        return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is not plain data: {err}") from None
