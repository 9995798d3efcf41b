"""JSON Schema -> grammar IR: what the regex path (``sglc.fsm.json_schema``) does, plus what a
regular language cannot hold: recursive ``$ref`` (to ``#``, ``#/$defs/...``,
``#/definitions/...``) and any-JSON values of unbounded depth.

Conventions are the FSM path's, so one schema means the same text on both paths: the layout of
``json.dumps`` (separators ``", "`` and ``": "`` unless ``separators`` says otherwise, no other
whitespace), properties in declared order with optional ones omittable, additional properties
only where ``properties`` is absent, every ``prefixItems`` item emitted, ``oneOf`` treated as
``anyOf`` (a value matching several branches is not prevented), the same string formats (date,
time, date-time, uuid, email, uri), integer bounds through ``int_range``, numbers bounded only
by ``minimum: 0``, and the same refusals: :class:`UnsupportedSchemaError` naming the keyword and
its JSON path (``uniqueItems``, ``not``, ``if``, ``patternProperties``, number bounds other than
``minimum: 0``, more-than-one-schema ``allOf``, non-local ``$ref``, ...) and
:class:`InvalidSchemaError` for malformed schemas.

Lowering: each ``$ref`` target is one rule (converted once, however often it is used), so a
recursive schema is a recursive grammar. A reference back to a definition still being read with
nothing consumed since (``{"anyOf": [{"$ref": "#"}, ...]}``) is left recursion that adds no
string: it lowers to the empty language, which is what it contributes. Expressions used twice
(an array's item, a map's value) become rules too, so the grammar's size is what was built.

Budget (:class:`~sglc.grammar.budget.GrammarBudget`): schema text length before ``json.loads``;
nesting by an iterative scan before converting (``max_schema_depth``, four JSON levels a schema
level) and schema levels as the converter descends; rules, nodes and size bounds as built.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from sglc.fsm.budget import nesting_depth
from sglc.fsm.charset import CharSet
from sglc.fsm.errors import InvalidRegexError, InvalidSchemaError, UnsupportedRegexError, UnsupportedSchemaError
from sglc.fsm.int_range import int_range_regex
from sglc.fsm.json_schema import FORMATS, INTEGER, MAX_INTEGER_BOUND, NUMBER, STRING_CHAR
from sglc.fsm.json_string_escape import json_escaped

from .budget import GrammarBudget, GrammarMeter, as_meter
from .build import Builder
from .errors import GrammarBudgetError
from .ir import CharClass, Expr, Grammar, Literal, RuleRef
from .regex_grammar import expr_from_regex, expr_from_tree, parse_regex_tree

NOTHING = CharClass(CharSet())  # the empty language (schema ``false``)

ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "nullable", "discriminator",
})
KEYWORDS = frozenset({
    "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf",
    "properties", "required", "additionalProperties",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
})
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
# Rules every schema may share, defined on first use: name -> regex (None: built by a method).
_SHARED_REGEX = {"json-char": STRING_CHAR, "json-integer": INTEGER, "json-number": NUMBER}


def _short(path: str, keep: int = 30) -> str:
    return path if len(path) <= 2 * keep + 3 else f"{path[:keep]}...{path[-keep:]}"


class _Converter:
    def __init__(self, root: Any, separators: tuple[str, str], meter: GrammarMeter) -> None:
        self.root = root
        self.meter = meter
        self.build = Builder(meter)
        self.item_sep, self.key_sep = separators
        self.separators = separators
        self.depth = 0
        self.ref_rules: dict[str, str] = {"#": "root"}  # JSON pointer -> rule name
        self.unguarded: set[str] = {"#"}  # definitions being read with nothing consumed since
        self.fresh_count = 0

    # -- rules ---------------------------------------------------------------------------
    def fresh(self, stem: str) -> str:
        self.fresh_count += 1
        return f"{stem}-{self.fresh_count}"

    def shared(self, expr: Expr, stem: str) -> Expr:
        """``expr`` itself when it is one leaf, else a new rule holding it (for expressions
        used twice: the tree then holds each node once)."""
        if isinstance(expr, (RuleRef, Literal, CharClass)):
            return expr
        name = self.fresh(stem)
        self.build.add_rule(name, expr)
        return self.build.ref(name)

    def common(self, name: str) -> Expr:
        """A reference to one of the shared rules (json-string, json-value, ...), defined once."""
        if name not in self.build.rules:
            self.build.add_rule(name, NOTHING)  # NOTE: placeholder first: json-value is recursive
            if name in _SHARED_REGEX:
                body = expr_from_regex(_SHARED_REGEX[name], self.build)
            elif name == "json-string":
                body = self.build.seq([self.build.lit('"'), self.build.repeat(self.common("json-char")), self.build.lit('"')])
            else:
                body = self.any_value_body()
            self.build.rules[name] = body
        return self.build.ref(name)

    def any_value_body(self) -> Expr:
        b = self.build
        value = self.common("json-value")
        member = b.seq([self.common("json-string"), b.lit(self.key_sep), value])
        return b.choice([
            self.common("json-string"), self.common("json-number"), b.lit("true"), b.lit("false"), b.lit("null"),
            b.seq([b.lit("["), self.list_of(value, 0, None), b.lit("]")]),
            b.seq([b.lit("{"), self.list_of(self.shared(member, "json-member"), 0, None), b.lit("}")]),
        ])

    def list_of(self, item: Expr, lo: int, hi: int | None) -> Expr:
        """``lo`` to ``hi`` copies of ``item`` joined by the item separator (``item`` used twice:
        pass a leaf or a rule reference)."""
        b = self.build
        if hi == 0:
            return b.lit("")
        rest = b.repeat(b.seq([b.lit(self.item_sep), item]), max(lo - 1, 0), None if hi is None else hi - 1)
        body = b.seq([item, rest])
        return body if lo > 0 else b.optional(body)

    # -- dispatch ----------------------------------------------------------------------
    def convert(self, schema: Any, path: str) -> Expr:
        self.depth += 1
        try:
            self.meter.check("max_schema_depth", self.depth, f"nested JSON schema levels (at {_short(path)})")
            expr = self._convert(schema, path)
        finally:
            self.depth -= 1
        self.meter.check_time("turning the JSON schema into a grammar")
        return expr

    def guarded(self, schema: Any, path: str) -> Expr:
        """Convert a schema nested after consumed text (inside ``[`` or ``{``): references from
        there back to a definition being read are ordinary recursion."""
        saved, self.unguarded = self.unguarded, set()
        try:
            return self.convert(schema, path)
        finally:
            self.unguarded = saved

    def _convert(self, schema: Any, path: str) -> Expr:
        b = self.build
        if schema is True:
            return self.common("json-value")
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"a schema must be an object or a boolean, got {schema!r}", path)
        for key in schema:
            if key not in KEYWORDS and key not in ANNOTATIONS:
                raise UnsupportedSchemaError(key, f"{path}/{key}")
        constraints = {k: v for k, v in schema.items() if k in KEYWORDS}
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
                return self.alternatives([self.convert(s, f"{path}/{key}/{i}") for i, s in enumerate(branches)])
        if "const" in constraints:
            return self.literal_value(schema["const"])
        if "enum" in constraints:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise InvalidSchemaError("enum must be a non-empty list", f"{path}/enum")
            return b.choice([self.literal_value(v) for v in values])
        kind = schema.get("type")
        if kind is None:
            if not constraints:
                return self.common("json-value")
            kind = self._infer_type(constraints, path)
        kinds = kind if isinstance(kind, list) else [kind]
        for k in kinds:
            if k not in _TYPES:
                raise InvalidSchemaError(f"unknown type {k!r}", f"{path}/type")
        return self.alternatives([getattr(self, f"type_{k}")(schema, path) for k in kinds])

    def alternatives(self, options: list[Expr]) -> Expr:
        """A choice, leaving out options that match nothing (unless all do)."""
        kept = [o for o in options if o != NOTHING]
        return self.build.choice(kept) if kept else NOTHING

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

    def ref(self, ref: Any, path: str) -> Expr:
        if not isinstance(ref, str) or not ref.startswith("#"):
            detail = f"only local references are supported, got {ref!r}"
            raise UnsupportedSchemaError("$ref", f"{path}/$ref", detail)
        pointer = "#" + "/".join([""] + [p for p in ref[1:].split("/") if p]) if ref != "#" else "#"
        if pointer in self.unguarded:
            return NOTHING  # left recursion: adds no string (see the module docstring)
        if pointer in self.ref_rules:
            return self.build.ref(self.ref_rules[pointer])
        target: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise InvalidSchemaError(f"$ref {ref!r} points nowhere", f"{path}/$ref")
            target = target[part]
        name = self.rule_name(pointer)
        self.ref_rules[pointer] = name
        self.build.add_rule(name, NOTHING)  # placeholder while the definition is read
        saved, self.unguarded = self.unguarded, {pointer}
        try:
            self.build.rules[name] = self.convert(target, pointer)
        finally:
            self.unguarded = saved
        return self.build.ref(name)

    def rule_name(self, pointer: str) -> str:
        stem = re.sub(r"[^A-Za-z0-9]+", "-", pointer[1:]).strip("-")[:40] or "root"
        name = f"ref-{stem}"
        while name in self.build.rules:
            name = self.fresh(f"ref-{stem}")
        return name

    # -- values ------------------------------------------------------------------------
    def literal_value(self, value: Any) -> Expr:
        return self.build.lit(json.dumps(value, separators=self.separators, ensure_ascii=False))

    # -- types -------------------------------------------------------------------------
    def type_null(self, schema: dict, path: str) -> Expr:
        return self.build.lit("null")

    def type_boolean(self, schema: dict, path: str) -> Expr:
        return self.build.choice([self.build.lit("true"), self.build.lit("false")])

    def type_integer(self, schema: dict, path: str) -> Expr:
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
            return self.common("json-integer")
        if lo is not None and hi is not None and lo > hi:
            return NOTHING
        return expr_from_regex(int_range_regex(lo, hi), self.build)

    def _bound(self, schema: dict, key: str, path: str) -> float:
        v = schema[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidSchemaError(f"{key} must be a number, got {v!r}", f"{path}/{key}")
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidSchemaError(f"{key} must be a finite number, got {v!r}", f"{path}/{key}")
        if abs(v) >= MAX_INTEGER_BOUND:  # NOTE: int_range's grammar grows with the bound's digits
            raise UnsupportedSchemaError(key, f"{path}/{key}", "integer bounds of 10^40 or more")
        return v

    def type_number(self, schema: dict, path: str) -> Expr:
        bounds = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema]
        if not bounds:
            return self.common("json-number")
        if bounds == ["minimum"] and self._bound(schema, "minimum", path) == 0:
            return expr_from_regex(NUMBER[2:], self.build)  # no minus sign: every number left is >= 0
        key = bounds[0]
        raise UnsupportedSchemaError(key, f"{path}/{key}", "bounds on numbers other than minimum 0")

    def type_string(self, schema: dict, path: str) -> Expr:
        b = self.build
        lo = self._count(schema, "minLength", path, 0)
        hi = self._count(schema, "maxLength", path, None)
        pattern, fmt = schema.get("pattern"), schema.get("format")
        if pattern is not None and fmt is not None:
            raise UnsupportedSchemaError("format", f"{path}/format", "together with pattern")
        quote = b.lit('"')
        if pattern is not None or fmt is not None:
            if lo or hi is not None:
                key = "minLength" if lo else "maxLength"
                raise UnsupportedSchemaError(key, f"{path}/{key}", "together with pattern or format")
            if fmt is not None:
                if fmt not in FORMATS:
                    raise UnsupportedSchemaError("format", f"{path}/format", f"unknown format {fmt!r}")
                return b.seq([quote, expr_from_regex(FORMATS[fmt], b), quote])
            return b.seq([quote, self.string_pattern(pattern, f"{path}/pattern"), quote])
        if hi is not None and lo > hi:
            return NOTHING
        if (lo, hi) == (0, None):
            return self.common("json-string")
        return b.seq([quote, b.repeat(self.common("json-char"), lo, hi), quote])

    def _count(self, schema: dict, key: str, path: str, default: int | None) -> int | None:
        if key not in schema:
            return default
        v = schema[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidSchemaError(f"{key} must be a non-negative integer, got {v!r}", f"{path}/{key}")
        self.meter.check("max_repeat_bound", v, f"{key} at {_short(path)} is")
        return v

    def string_pattern(self, pattern: Any, path: str) -> Expr:
        """A JSON ``pattern`` (search semantics on the decoded string) over the JSON-escaped body."""
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
            tree = parse_regex_tree(body, self.meter)
        except InvalidRegexError as err:
            raise InvalidSchemaError(f"pattern is not a valid regex: {err.reason}", path) from None
        except UnsupportedRegexError as err:
            raise UnsupportedSchemaError("pattern", path, err.construct) from None
        content = expr_from_tree(json_escaped(tree), self.build)
        free = self.build.repeat(self.common("json-char"))
        return self.build.seq([free if not start else self.build.lit(""), content, free if not end else self.build.lit("")])

    def type_array(self, schema: dict, path: str) -> Expr:
        b = self.build
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
            if hi is not None:
                prefix = prefix[:hi]
            n = len(prefix)
            parts: list[Expr] = []
            for i, s in enumerate(prefix):
                if i:
                    parts.append(b.lit(self.item_sep))
                parts.append(self.guarded(s, f"{path}/prefixItems/{i}"))
            extra_lo = max(0, lo - n)
            if items is False:
                if extra_lo:
                    return NOTHING
                return b.seq([b.lit("["), *parts, b.lit("]")])
            extra_hi = extra_lo if "items" not in schema else (None if hi is None else hi - n)
            item = self.guarded(items, f"{path}/items")
            more = b.repeat(b.seq([b.lit(self.item_sep), item]), extra_lo, extra_hi)
            return b.seq([b.lit("["), *parts, more, b.lit("]")])
        if items is False:
            return b.lit("[]")
        item = self.shared(self.guarded(items, f"{path}/items"), "item")
        if hi == 0:
            return b.lit("[]")
        return b.seq([b.lit("["), self.list_of(item, lo, hi), b.lit("]")])

    def type_object(self, schema: dict, path: str) -> Expr:
        b = self.build
        props = schema.get("properties")
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if not isinstance(required, list):
            raise InvalidSchemaError("required must be a list", f"{path}/required")
        if not props:
            if required:
                raise UnsupportedSchemaError("required", f"{path}/required", "required keys without properties")
            if extra is False:
                return b.lit("{}")
            value = self.guarded(extra, f"{path}/additionalProperties")
            member = self.shared(b.seq([self.common("json-string"), b.lit(self.key_sep), value]), "member")
            return b.seq([b.lit("{"), self.list_of(member, 0, None), b.lit("}")])
        if not isinstance(props, dict):
            raise InvalidSchemaError("properties must be an object", f"{path}/properties")
        missing = [r for r in required if r not in props]
        if missing:
            raise UnsupportedSchemaError("required", f"{path}/required", f"{missing[0]!r} is not in properties")
        parts: list[tuple[Expr, bool]] = []
        for name, sub in props.items():
            value = self.guarded(sub, f"{path}/properties/{name}")
            if value == NOTHING and name not in required:
                continue  # a property that can never be valid is simply left out
            key = json.dumps(name, ensure_ascii=False) + self.key_sep
            parts.append((b.seq([b.lit(key), value]), name in required))
        return b.seq([b.lit("{"), self.members(parts), b.lit("}")])

    def members(self, parts: list[tuple[Expr, bool]]) -> Expr:
        """Declared-order members with optional ones omittable, separators placed correctly."""
        b = self.build
        if not parts:
            return b.lit("")
        sep = b.lit(self.item_sep)
        first_required = next((i for i, (_, req) in enumerate(parts) if req), None)
        if first_required is not None:
            out = [b.optional(b.seq([p, sep])) for p, _ in parts[:first_required]]
            out.append(parts[first_required][0])
            for p, req in parts[first_required + 1:]:
                out.append(b.seq([sep, p]) if req else b.optional(b.seq([sep, p])))
            return b.seq(out)
        # NOTE: all optional: the first member present picks the option; each member is used in
        # several options, so each becomes a rule (the tree then holds it once).
        shared = [self.shared(p, "member") for p, _ in parts]
        options = [b.seq([p, *(b.optional(b.seq([sep, q])) for q in shared[k + 1:])]) for k, p in enumerate(shared)]
        return b.optional(b.choice(options))


def grammar_from_json_schema(
    schema: Any, budget: GrammarBudget | GrammarMeter | None = None, *, separators: tuple[str, str] = (", ", ": "),
) -> Grammar:
    """The grammar (start rule ``root``) of the JSON texts valid under ``schema`` (a dict, a
    bool, a JSON string, or a pydantic model class). See the module docstring for the layout,
    what is supported and the budget; raises UnsupportedSchemaError / InvalidSchemaError (from
    ``sglc.fsm``, with the JSON path) or GrammarBudgetError."""
    meter = as_meter(budget)
    if isinstance(schema, str):
        meter.check("max_grammar_chars", len(schema), "JSON schema characters")
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as err:
            raise InvalidSchemaError(f"not valid JSON: {err}", "#") from None
        except RecursionError:
            limit = meter.budget.max_schema_depth
            raise GrammarBudgetError("max_schema_depth", limit, "JSON schema text nested too deeply to parse") from None
    elif hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError(f"expected a schema object, got {type(schema).__name__}", "#")
    limit = meter.budget.max_schema_depth
    if nesting_depth(schema, 4 * limit) > 4 * limit:  # NOTE: before any recursion into it
        raise GrammarBudgetError("max_schema_depth", limit, f"JSON schema nested more than {4 * limit} JSON levels")
    converter = _Converter(schema if isinstance(schema, dict) else {}, separators, meter)
    converter.build.add_rule("root", NOTHING)
    converter.build.rules["root"] = converter.convert(schema, "#")
    return converter.build.grammar("root")
