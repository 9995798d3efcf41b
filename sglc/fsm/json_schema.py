"""JSON schema (a dict, a JSON string, or a pydantic model) -> regex of conforming JSON text.

Whitespace policy: the output is the ``json.dumps`` default layout. Separators are exactly
``", "`` between items and ``": "`` between key and value (override with ``separators``, e.g.
``(",", ":")`` for compact JSON), and there is no other whitespace: no newlines, no
indentation, none around brackets. Objects list their properties in declared order; optional
properties may be left out. Strings allow any character except ``"``, ``\\`` and control
characters raw, plus the JSON escapes (``\\uXXXX`` for non-surrogates).

Supported: ``type`` (one or a list), objects (``properties``, ``required``,
``additionalProperties`` false / true / a schema), strings (``minLength``, ``maxLength``,
``pattern``, ``format`` in date, time, date-time, uuid, email, uri), integers (``minimum``,
``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``), numbers (``minimum: 0`` only),
booleans, null, ``enum``, ``const``, arrays (``items``, ``prefixItems``, ``minItems``,
``maxItems``), ``$ref`` into ``$defs``/``definitions`` (not recursive), ``anyOf``, ``oneOf``
(treated as ``anyOf``: a value matching several branches is not prevented), one-element
``allOf``, and ``{}`` / ``true`` (any JSON value, nested at most ``max_nesting`` deep).
Anything else raises :class:`UnsupportedSchemaError` with the keyword and its JSON path.

Budget (``meter``): schema levels (nested schemas and ``$ref`` chains alike) count against
``max_nesting_depth`` as the converter descends, and every piece of regex it builds against
``max_pattern_chars`` as it is built, so ``$ref`` fan-out (each definition using the previous one
twice) stops at the limit instead of doubling the text thirty times.
"""
from __future__ import annotations

import json
import math
from typing import Any

from .budget import CompileMeter, as_meter
from .errors import (
    CompileBudgetError,
    InvalidRegexError,
    InvalidSchemaError,
    RecursiveSchemaError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)
from .int_range import int_range_regex
from .json_string_escape import json_escaped
from .regex_ast import escape, to_regex
from .regex_parser import parse_regex

_HEX = "[0-9a-fA-F]"
# One JSON string character: raw (not " \ or a control char) or an escape (no surrogates).
STRING_CHAR = (
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
)
STRING = f'"{STRING_CHAR}*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
BOOLEAN = r"(?:true|false)"
NULL = "null"
NOTHING = r"[^\s\S]"  # the empty language (schema `false`)
#: Integer bounds from here on are refused by name (the range regex grows with their digits; at
#: 4,300 digits Python's int -> str itself refuses). The grammar path shares it.
MAX_INTEGER_BOUND = 10**40

_DATE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?"
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "email": r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
    "uri": r"[a-zA-Z][a-zA-Z0-9+.-]*:[^\x00-\x20\"\\<>]+",
}

_ANNOTATIONS = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "nullable", "discriminator",
}
_KEYWORDS = {
    "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf",
    "properties", "required", "additionalProperties",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
}
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


def _short(path: str, keep: int = 30) -> str:
    """A JSON path cut to its ends for one-line messages (deep paths run to kilobytes)."""
    return path if len(path) <= 2 * keep + 3 else f"{path[:keep]}...{path[-keep:]}"


def _alt(options: list[str]) -> str:
    options = list(dict.fromkeys(options))
    return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"


class _Converter:
    def __init__(self, root: dict, separators: tuple[str, str], max_nesting: int, meter: CompileMeter) -> None:
        self.root = root
        self.meter = meter
        self.depth = 0
        self.item_sep = escape(separators[0])
        self.key_sep = escape(separators[1])
        self.separators = separators
        self.max_nesting = max_nesting
        self.ref_stack: list[str] = []

    # -- dispatch ----------------------------------------------------------------------
    def convert(self, schema: Any, path: str) -> str:
        """The regex of ``schema`` (at JSON path ``path``), within the budget."""
        self.depth += 1
        try:
            self.meter.check("max_nesting_depth", self.depth, f"nested JSON schema levels (at {_short(path)})")
            regex = self._convert(schema, path)
        finally:
            self.depth -= 1
        self.meter.check("max_pattern_chars", len(regex), f"regex characters for the schema at {_short(path)}")
        self.meter.check_time("turning the JSON schema into a regex")
        return regex

    def _convert(self, schema: Any, path: str) -> str:
        if schema is True:
            return self.any_value(self.max_nesting)
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"a schema must be an object or a boolean, got {schema!r}", path)
        for key in schema:
            if key not in _KEYWORDS and key not in _ANNOTATIONS:
                raise UnsupportedSchemaError(key, f"{path}/{key}")
        constraints = {k: v for k, v in schema.items() if k in _KEYWORDS}
        if "$ref" in constraints:
            self._only(constraints, "$ref", path)
            return self.ref(schema["$ref"], path)
        if "allOf" in constraints:
            self._only(constraints, "allOf", path)
            branches = schema["allOf"]
            if not isinstance(branches, list) or len(branches) != 1:
                raise UnsupportedSchemaError("allOf", f"{path}/allOf", "only a one-schema allOf")
            return self.convert(branches[0], f"{path}/allOf/0")
        for key in ("anyOf", "oneOf"):
            if key in constraints:
                self._only(constraints, key, path)
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise InvalidSchemaError(f"{key} must be a non-empty list", f"{path}/{key}")
                return _alt([self.convert(b, f"{path}/{key}/{i}") for i, b in enumerate(branches)])
        if "const" in constraints:
            return self.literal_value(schema["const"])
        if "enum" in constraints:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise InvalidSchemaError("enum must be a non-empty list", f"{path}/enum")
            return _alt([self.literal_value(v) for v in values])
        kind = schema.get("type")
        if kind is None:
            if not constraints:
                return self.any_value(self.max_nesting)
            kind = self._infer_type(constraints, path)
        kinds = kind if isinstance(kind, list) else [kind]
        for k in kinds:
            if k not in _TYPES:
                raise InvalidSchemaError(f"unknown type {k!r}", f"{path}/type")
        return _alt([getattr(self, f"type_{k}")(schema, path) for k in kinds])

    def _only(self, constraints: dict, key: str, path: str) -> None:
        others = sorted(set(constraints) - {key})
        if others:
            raise UnsupportedSchemaError(others[0], f"{path}/{others[0]}", f"alongside {key}")

    def _infer_type(self, constraints: dict, path: str) -> str:
        for kind, keys in (
            ("object", {"properties", "required", "additionalProperties"}),
            ("array", {"items", "prefixItems", "minItems", "maxItems"}),
            ("string", {"minLength", "maxLength", "pattern", "format"}),
            ("number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
        ):
            if keys & set(constraints):
                return kind
        key = sorted(constraints)[0]
        raise UnsupportedSchemaError(key, f"{path}/{key}", "cannot tell which type it constrains")

    def ref(self, ref: Any, path: str) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            detail = f"only local references are supported, got {ref!r}"
            raise UnsupportedSchemaError("$ref", f"{path}/$ref", detail)
        if ref in self.ref_stack:
            raise RecursiveSchemaError(ref, f"{path}/$ref")
        target: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise InvalidSchemaError(f"$ref {ref!r} points nowhere", f"{path}/$ref")
            target = target[part]
        self.ref_stack.append(ref)
        try:
            return self.convert(target, ref)
        finally:
            self.ref_stack.pop()

    # -- values ------------------------------------------------------------------------
    def literal_value(self, value: Any) -> str:
        return escape(json.dumps(value, separators=self.separators, ensure_ascii=False))

    def any_value(self, depth: int) -> str:
        scalars = [STRING, NUMBER, BOOLEAN, NULL]
        if depth <= 0:
            return _alt(scalars)
        inner = self.any_value(depth - 1)
        array = rf"\[(?:{inner}(?:{self.item_sep}{inner})*)?\]"
        member = f"{STRING}{self.key_sep}{inner}"
        obj = rf"\{{(?:{member}(?:{self.item_sep}{member})*)?\}}"
        return _alt(scalars + [array, obj])

    # -- types -------------------------------------------------------------------------
    def type_null(self, schema: dict, path: str) -> str:
        return NULL

    def type_boolean(self, schema: dict, path: str) -> str:
        return BOOLEAN

    def type_integer(self, schema: dict, path: str) -> str:
        lo, hi = None, None
        for key, up in (("minimum", math.ceil), ("exclusiveMinimum", None)):
            if key in schema:
                v = self._bound(schema, key, path)
                cand = up(v) if up else math.floor(v) + 1
                lo = cand if lo is None else max(lo, cand)
        for key, down in (("maximum", math.floor), ("exclusiveMaximum", None)):
            if key in schema:
                v = self._bound(schema, key, path)
                cand = down(v) if down else math.ceil(v) - 1
                hi = cand if hi is None else min(hi, cand)
        if lo is None and hi is None:
            return INTEGER
        if lo is not None and hi is not None and lo > hi:
            return NOTHING
        rng = int_range_regex(lo, hi)
        return f"(?:{rng})" if "|" in rng else rng

    def _bound(self, schema: dict, key: str, path: str) -> float:
        v = schema[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidSchemaError(f"{key} must be a number, got {v!r}", f"{path}/{key}")
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidSchemaError(f"{key} must be a finite number, got {v!r}", f"{path}/{key}")
        if abs(v) >= MAX_INTEGER_BOUND:  # NOTE: the range regex grows with the bound's digits
            raise UnsupportedSchemaError(key, f"{path}/{key}", "integer bounds of 10^40 or more")
        return v

    def type_number(self, schema: dict, path: str) -> str:
        bounds = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema]
        if not bounds:
            return NUMBER
        if bounds == ["minimum"] and self._bound(schema, "minimum", path) == 0:
            return NUMBER[2:]  # drop the optional minus sign: every number left is >= 0
        key = bounds[0]
        raise UnsupportedSchemaError(key, f"{path}/{key}", "bounds on numbers other than minimum 0")

    def type_string(self, schema: dict, path: str) -> str:
        lo = self._count(schema, "minLength", path, 0)
        hi = self._count(schema, "maxLength", path, None)
        pattern, fmt = schema.get("pattern"), schema.get("format")
        if pattern is not None and fmt is not None:
            raise UnsupportedSchemaError("format", f"{path}/format", "together with pattern")
        if pattern is not None or fmt is not None:
            if lo or hi is not None:
                key = "minLength" if lo else "maxLength"
                raise UnsupportedSchemaError(key, f"{path}/{key}", "together with pattern or format")
            if fmt is not None:
                if fmt not in FORMATS:
                    raise UnsupportedSchemaError("format", f"{path}/format", f"unknown format {fmt!r}")
                return f'"{FORMATS[fmt]}"'
            return '"' + self.string_pattern(pattern, f"{path}/pattern") + '"'
        if hi is not None and lo > hi:
            return NOTHING
        if (lo, hi) == (0, None):
            return STRING
        count = f"{{{lo},}}" if hi is None else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
        return f'"{STRING_CHAR}{count}"'

    def _count(self, schema: dict, key: str, path: str, default: int | None) -> int | None:
        if key not in schema:
            return default
        v = schema[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidSchemaError(f"{key} must be a non-negative integer, got {v!r}", f"{path}/{key}")
        return v

    def string_pattern(self, pattern: Any, path: str) -> str:
        """A JSON ``pattern`` (search semantics on the decoded string) as a regex over the
        JSON-escaped string body."""
        if not isinstance(pattern, str):
            raise InvalidSchemaError("pattern must be a string", path)
        body, start, end = pattern, False, False
        if body.startswith("^"):
            body, start = body[1:], True
        if body.endswith("$"):
            before = body[:-1]
            if (len(before) - len(before.rstrip("\\"))) % 2 == 0:  # the $ is not escaped
                body, end = before, True
        try:
            tree = parse_regex(body, allow_anchors=False, meter=self.meter)
        except InvalidRegexError as err:
            raise InvalidSchemaError(f"pattern is not a valid regex: {err.reason}", path) from None
        except UnsupportedRegexError as err:
            raise UnsupportedSchemaError("pattern", path, err.construct) from None
        content = to_regex(json_escaped(tree))
        free = f"{STRING_CHAR}*"
        return ("" if start else free) + f"(?:{content})" + ("" if end else free)

    def type_array(self, schema: dict, path: str) -> str:
        if schema.get("uniqueItems") is True:
            raise UnsupportedSchemaError("uniqueItems", f"{path}/uniqueItems")
        lo = self._count(schema, "minItems", path, 0) or 0
        hi = self._count(schema, "maxItems", path, None)
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", True)
        if hi is not None and lo > hi:
            return NOTHING
        if prefix:
            if not isinstance(prefix, list):
                raise InvalidSchemaError("prefixItems must be a list", f"{path}/prefixItems")
            # NOTE: we always emit every prefix item (a shorter tuple is valid too, but a
            # subset of the language is all constrained generation needs).
            if hi is not None:
                prefix = prefix[:hi]
            n = len(prefix)
            parts = [self.convert(s, f"{path}/prefixItems/{i}") for i, s in enumerate(prefix)]
            extra_lo = max(0, lo - n)
            if items is False:
                if extra_lo:
                    return NOTHING
                return r"\[" + self.item_sep.join(parts) + r"\]"
            extra_hi = extra_lo if "items" not in schema else (None if hi is None else hi - n)
            item = self.convert(items, f"{path}/items")
            count = f"{{{extra_lo},}}" if extra_hi is None else f"{{{extra_lo},{extra_hi}}}"
            return r"\[" + self.item_sep.join(parts) + f"(?:{self.item_sep}{item}){count}" + r"\]"
        if items is False:
            return r"\[\]"
        item = self.convert(items, f"{path}/items")
        if hi == 0:
            return r"\[\]"
        rest_lo = max(lo - 1, 0)
        rest_hi = None if hi is None else hi - 1
        count = f"{{{rest_lo},}}" if rest_hi is None else f"{{{rest_lo},{rest_hi}}}"
        body = f"{item}(?:{self.item_sep}{item}){count}"
        return rf"\[{body}\]" if lo > 0 else rf"\[(?:{body})?\]"

    def type_object(self, schema: dict, path: str) -> str:
        props = schema.get("properties")
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if not isinstance(required, list):
            raise InvalidSchemaError("required must be a list", f"{path}/required")
        if not props:
            if required:
                detail = "required keys without properties"
                raise UnsupportedSchemaError("required", f"{path}/required", detail)
            if extra is False:
                return r"\{\}"
            value = self.convert(extra, f"{path}/additionalProperties")
            member = f"{STRING}{self.key_sep}{value}"
            return rf"\{{(?:{member}(?:{self.item_sep}{member})*)?\}}"
        if not isinstance(props, dict):
            raise InvalidSchemaError("properties must be an object", f"{path}/properties")
        missing = [r for r in required if r not in props]
        if missing:
            detail = f"{missing[0]!r} is not in properties"
            raise UnsupportedSchemaError("required", f"{path}/required", detail)
        parts: list[tuple[str, bool]] = []
        for name, sub in props.items():
            value = self.convert(sub, f"{path}/properties/{name}")
            if value == NOTHING and name not in required:
                continue  # a property that can never be valid is simply left out
            key = escape(json.dumps(name, ensure_ascii=False))
            parts.append((f"{key}{self.key_sep}{value}", name in required))
        return r"\{" + self._members(parts) + r"\}"

    def _members(self, parts: list[tuple[str, bool]]) -> str:
        """Declared-order members with optional ones omittable, commas placed correctly."""
        sep = self.item_sep
        if not parts:
            return ""
        first_required = next((i for i, (_, req) in enumerate(parts) if req), None)
        if first_required is not None:
            out = "".join(f"(?:{p}{sep})?" for p, _ in parts[:first_required])
            out += parts[first_required][0]
            for p, req in parts[first_required + 1 :]:
                out += f"{sep}{p}" if req else f"(?:{sep}{p})?"
            return out
        options = []
        for k, (p, _) in enumerate(parts):
            options.append(p + "".join(f"(?:{sep}{q})?" for q, _ in parts[k + 1 :]))
        return "(?:" + "|".join(options) + ")?"


def regex_from_json_schema(
    schema: Any, *, separators: tuple[str, str] = (", ", ": "), max_nesting: int = 2,
    meter: CompileMeter | None = None,
) -> str:
    """The regex of JSON texts valid under ``schema`` (dict, JSON string, bool, or a pydantic
    model class). See the module docstring for the layout and what is supported; over
    ``meter``'s budget (the default one when none is given) raises CompileBudgetError."""
    meter = as_meter(meter)
    if isinstance(schema, str):
        meter.check("max_pattern_chars", len(schema), "JSON schema characters")
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as err:
            raise InvalidSchemaError(f"not valid JSON: {err}", "#") from None
        except RecursionError:
            limit = meter.budget.max_nesting_depth
            raise CompileBudgetError("max_nesting_depth", limit, "JSON schema text nested too deeply to parse") from None
    elif hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError(f"expected a schema object, got {type(schema).__name__}", "#")
    root = schema if isinstance(schema, dict) else {}
    return _Converter(root, separators, max_nesting, meter).convert(schema, "#")
