"""Per-op rules that `verify` applies: output types, attributes (with ranges), inputs.

Three tables, one row per op, so a new op adds three rows. Attribute rules map a key to
``(required, check)``; ``check(value)`` returns a problem description or None. A missing or None
optional attribute is "unset" and not checked. Attributes not listed are allowed (new sampling
options) as long as they are in the attribute domain. NODE_RULES holds the few rules that relate
several attributes of one node; GRAPH_META_RULES checks the graph's meta entries by key.

Numbers are finite and bounded: a graph.pb is untrusted input, and a sampling parameter such as
``max_new_tokens=10**30`` or ``temperature=inf`` must be refused here, naming the node, not deep in a
backend. The bounds are generous (no real program comes near them):
``MAX_GEN_TOKENS``, ``MAX_TEMPERATURE``, ``MAX_TOKEN_ID``, ``MAX_COUNT``.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from sglc.ir import format_pieces, output_value
from sglc.ir.gen_constraint import (
    GRAMMAR_ATTRS,
    constraint_attrs,
    constraint_grammar,
    constraint_pattern,
    lowered_pattern,
)
from sglc.ir.node import Node
from sglc.ir.ops import ROLES, VARIABLE_PRODUCING_OPS, Op
from sglc.ir.types import TEXT_LIKE, ValueType, is_grammar_value
from sglc.wire import sampling_table

Check = Callable[[Any], Optional[str]]

#: Values of ``gen``'s ``dtype`` attribute, and of ``join``'s ``mode``.
GEN_DTYPES = ("str", "int", "float", "bool")
JOIN_MODES = ("gather_variable", "concate_and_append")

#: Largest ``max_new_tokens`` of a gen (and ``num_api_spec_tokens`` of a graph), largest
#: temperature, token id (``stop_token_ids``) and ``top_k``: the sampling table's bounds.
MAX_GEN_TOKENS = sampling_table.MAX_NEW_TOKENS
MAX_TEMPERATURE = sampling_table.MAX_TEMPERATURE
MAX_TOKEN_ID = sampling_table.MAX_TOKEN_ID
#: Largest fork width, video frame count and fork item index.
MAX_COUNT = 2**16


class RuleError(Exception):
    """Raised by a rule; verify() turns it into a VerifyError naming the node."""


# ----- attribute checks -----
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _type(*types: type, nonempty: bool = False) -> Check:
    label = " or ".join(t.__name__ for t in types)

    def check(v: Any) -> Optional[str]:
        if not isinstance(v, types) or (bool in types) != isinstance(v, bool):
            return f"must be {label}"
        if nonempty and not v:
            return "must not be empty"
        return None

    return check


def _int_in(low: int, high: int) -> Check:
    return lambda v: None if _is_int(v) and low <= v <= high else f"must be an int in [{low}, {high}]"


def _one_of(options: tuple) -> Check:
    return lambda v: None if isinstance(v, str) and v in options else f"must be one of {list(options)}"


def _list_of(kind: Callable[[Any], bool], label: str, nonempty: bool = False, unique: bool = False) -> Check:
    def check(v: Any) -> Optional[str]:
        if not isinstance(v, list) or not all(kind(x) for x in v):
            return f"must be a list of {label}"
        if nonempty and not v:
            return "must not be empty"
        if unique and len(set(v)) != len(v):
            return "must not repeat an entry"
        return None

    return check


def _lowered_fsm(v: Any) -> Optional[str]:
    if lowered_pattern(v) is None:
        return "must be a lowered FSM (a dict from sglc.fsm.fsm_to_dict with its str 'pattern')"
    return None


def _lowered_grammar(v: Any) -> Optional[str]:
    if not is_grammar_value(v):
        return f"must be a lowered grammar (a sglc.grammar.Grammar), got {type(v).__name__}"
    return None


def _any(v: Any) -> Optional[str]:
    return None


_NAME = (True, _type(str, nonempty=True))
_STRS = lambda s: isinstance(s, str)  # noqa: E731


def _sampling(row: sampling_table.SamplingParam) -> Check:
    """A gen attribute checked by its row of the sampling table (the DSL's check)."""
    def check(v: Any) -> Optional[str]:
        try:
            row.check_gen(v, "")
        except (TypeError, ValueError) as err:
            return str(err).strip()
        return None

    return check


#: Sampling parameters of a gen (all optional): the DSL rows of sglc.wire.sampling_table.
SAMPLING_ATTRS: dict[str, tuple[bool, Check]] = {key: (False, _sampling(row)) for key, row in sampling_table.GEN_ATTRS.items()}


def _dsl_spelling(row: sampling_table.SamplingParam) -> Check:
    """The DSL's spelling of a parameter named otherwise inside (``max_tokens``): always refused,
    so a graph that carries it is not silently run with the default."""
    def check(v: Any) -> Optional[str]:
        return f"the IR spells {row.dsl!r} as {row.name!r} (gen(...)'s keyword is renamed when the gen is built)"

    return check


#: Edge spellings that must not appear as gen attributes (rows whose DSL keyword is not their name).
DSL_ONLY_ATTRS: dict[str, tuple[bool, Check]] = {
    row.dsl: (False, _dsl_spelling(row)) for row in sampling_table.GEN_ATTRS.values() if row.dsl != row.name}

ATTR_RULES: dict[Op, dict[str, tuple[bool, Check]]] = {
    Op.ARGUMENT: {"name": _NAME, "default": (False, _any)},
    Op.CONSTANT_TEXT: {"text": (True, _type(str))},
    Op.APPEND: {},
    Op.ROLE_BEGIN: {"role": (True, _one_of(ROLES))},
    Op.ROLE_END: {"role": (True, _one_of(ROLES))},
    Op.IMAGE: {"path": (False, _type(str, nonempty=True))},
    Op.VIDEO: {"path": (False, _type(str, nonempty=True)), "num_frames": (True, _int_in(1, MAX_COUNT))},
    Op.GEN: {
        "name": _NAME,
        **SAMPLING_ATTRS,
        **DSL_ONLY_ATTRS,
        "regex": (False, _type(str)),
        "json_schema": (False, _type(str, dict)),
        "dtype": (False, _one_of(GEN_DTYPES)),
        "choices": (False, _list_of(_STRS, "str", nonempty=True)),
        "ebnf": (False, _type(str, nonempty=True)),
        "lark": (False, _type(str, nonempty=True)),
        "fsm": (False, _lowered_fsm),
        "grammar": (False, _lowered_grammar),
    },
    Op.SELECT: {
        "name": _NAME,
        # NOTE: absent when the choices are the select's input (a program argument), known at run time
        "choices": (False, _list_of(_STRS, "str", nonempty=True, unique=True)),
        "temperature": SAMPLING_ATTRS["temperature"],
        "choices_method": (False, _type(str, nonempty=True)),
    },
    Op.VARIABLE: {"name": _NAME},
    Op.STREAM_TEXT: {},
    Op.VAR_SCOPE_BEGIN: {"name": _NAME},
    Op.VAR_SCOPE_END: {"name": _NAME},
    # NOTE: "program": a called program's stream (n=1), which starts empty (frontend/program_call.py)
    Op.FORK: {"n": (True, _int_in(1, MAX_COUNT)), "program": (False, _type(str, nonempty=True))},
    Op.GET_FORK_ITEM: {"index": (True, _int_in(0, MAX_COUNT))},
    Op.JOIN: {
        "mode": (True, _one_of(JOIN_MODES)),
        "variables": (False, _list_of(_STRS, "str", unique=True)),
    },
    Op.BRANCH: {"cases": (True, _list_of(_STRS, "str", nonempty=True, unique=True))},
    Op.CACHE_PREFIX: {},
    Op.OUTPUT: {"value": (True, _any)},  # NOTE: the template is checked against the inputs (NODE_RULES)
    Op.FORMAT: {"pieces": (True, _any)},  # NOTE: checked against the inputs (NODE_RULES)
    Op.GET_ITEM: {"key": (False, lambda v: None if isinstance(v, (int, str)) and not isinstance(v, bool)
                          else "must be an int or a str")},
    Op.LENGTH: {},
    Op.LOOP_BEGIN: {"range": (False, _type(bool)), "empty_error": (False, _type(str))},
    Op.LOOP_INDEX: {"start": (False, _int_in(-(2**31), 2**31))},
    Op.LOOP_END: {"variables": (False, _list_of(_STRS, "str", unique=True))},
}

# ----- rules over several attributes of one node -----
def _gen_constraint(node: Node) -> None:
    """A gen's grammar parses; a lowered gen runs its ``fsm`` or ``grammar``: it must be compiled
    from the one constraint the node shows."""
    present = constraint_attrs(node.attrs)
    for attr in present:
        if attr in GRAMMAR_ATTRS:
            _grammar_of(attr, node.attrs[attr])  # NOTE: cached: a grammar is parsed once per text
    lowered = [key for key in ("fsm", "grammar") if node.attrs.get(key) is not None]
    if not lowered:
        return
    if len(lowered) > 1:
        raise RuleError("has both a lowered fsm and a lowered grammar; a gen runs one")
    kinds = "ebnf, lark, json_schema" if lowered == ["grammar"] else "regex, json_schema, dtype, choices"
    if len(present) != 1 or present[0] not in kinds.split(", "):
        shown = ", ".join(present) or "none"
        raise RuleError(f"has a lowered {lowered[0]}, so it takes exactly one of {kinds} (got {shown})")
    attr = present[0]
    if lowered == ["grammar"]:
        if node.attrs["grammar"] != _grammar_of(attr, node.attrs[attr]):
            raise RuleError(f"grammar was not compiled from the {attr} it shows; recompile the program (sglc compile)")
        return
    try:
        pattern = constraint_pattern(attr, node.attrs[attr])
    except Exception as err:  # NOTE: FSMError, TypeError, ValueError: an invalid constraint
        raise RuleError(f"attribute {attr} is not a valid constraint: {str(err).splitlines()[0][:200]}") from None
    if lowered_pattern(node.attrs["fsm"]) != pattern:
        raise RuleError(f"fsm was compiled from {_short(lowered_pattern(node.attrs['fsm']))}, but {attr} gives "
                        f"{_short(pattern)}; recompile the program (sglc compile)")


def _grammar_of(attr: str, value: Any) -> Any:
    try:
        return constraint_grammar(attr, value)
    except (TypeError, ValueError) as err:  # NOTE: sglc.grammar's errors are ValueErrors (FSMError)
        raise RuleError(f"attribute {attr} is not a valid grammar: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


def _short(text: Optional[str], limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _program_fork(node: Node) -> None:
    """A called program's fork starts exactly one stream."""
    if node.attrs.get("program") is not None and node.attrs["n"] != 1:
        raise RuleError(f"starts called program {node.attrs['program']!r}, so n must be 1, got {node.attrs['n']}")


def _output(node: Node) -> None:
    """The return value's template refers only to the node's inputs; it lives in stream 0."""
    if node.stream != 0:
        raise RuleError(f"must be in stream 0 (the program's own), not stream {node.stream}")
    problem = output_value.check(node.attrs["value"], len(node.inputs))
    if problem:
        raise RuleError(f"attribute value {problem}")


def _format(node: Node) -> None:
    problem = format_pieces.check(node.attrs["pieces"], len(node.inputs))
    if problem:
        raise RuleError(f"attribute pieces {problem}")


NODE_RULES: dict[Op, Callable[[Node], None]] = {
    Op.FORMAT: _format,
    Op.GEN: _gen_constraint,
    Op.FORK: _program_fork,
    Op.OUTPUT: _output,
}

# ----- graph meta (entries the compiler writes; other keys are allowed in the attribute domain) -----
GRAPH_META_RULES: dict[str, Check] = {
    "num_api_spec_tokens": _int_in(1, MAX_GEN_TOKENS),
    "arg_names": _list_of(_STRS, "str", unique=True),
    "source_file": _type(str),
    "prompt_rewrites": _list_of(_STRS, "str"),
    # NOTE: parameters bound at compile time (trace(x=...), --bind): no longer arguments of the graph
    "fixed_args": _list_of(_STRS, "str", unique=True),
}

# ----- output types -----
_T = ValueType
_TEXT_OUT = frozenset({_T.STR, _T.INT, _T.FLOAT, _T.BOOL})
OUTPUT_TYPES: dict[Op, frozenset[ValueType]] = {
    Op.ARGUMENT: _TEXT_OUT | {_T.ANY, _T.LIST},
    Op.GEN: _TEXT_OUT,
    Op.SELECT: frozenset({_T.STR}),
    Op.VARIABLE: _TEXT_OUT | {_T.LIST},  # further: the producer's type (checked below)
    Op.STREAM_TEXT: frozenset({_T.STR}),
    Op.FORMAT: frozenset({_T.STR}),
    Op.GET_ITEM: frozenset({_T.ANY}),
    Op.LENGTH: frozenset({_T.INT}),
    Op.LOOP_BEGIN: frozenset({_T.ANY, _T.INT}),
    Op.LOOP_INDEX: frozenset({_T.INT}),
    Op.VAR_SCOPE_END: frozenset({_T.STR}),
    Op.FORK: frozenset({_T.FORK}),
    Op.GET_FORK_ITEM: frozenset({_T.STREAM}),
}
for _op in Op:
    OUTPUT_TYPES.setdefault(_op, frozenset({_T.NONE}))


# ----- inputs -----
def _arity(node: Node, count: int) -> None:
    if len(node.inputs) != count:
        raise RuleError(f"takes {count} input{'s' if count != 1 else ''}, got {len(node.inputs)}")


def _no_inputs(node: Node) -> None:
    _arity(node, 0)


def _text_input(node: Node) -> None:
    _arity(node, 1)
    inp = node.inputs[0]
    if inp.type not in TEXT_LIKE:
        raise RuleError(f"input %{inp.name} ({inp.op.value}) has type {inp.type.value}, not a text-like value")


def _media(node: Node) -> None:
    has_path = node.attrs.get("path") is not None
    if has_path == bool(node.inputs) or len(node.inputs) > 1:
        raise RuleError("takes either one text-like input or a 'path' attribute")
    if node.inputs:
        _text_input(node)


def _fork_input(node: Node) -> Node:
    fork = node.inputs[0] if node.inputs else None
    if fork is None or fork.op is not Op.FORK:
        got = "nothing" if fork is None else f"%{fork.name} ({fork.op.value})"
        raise RuleError(f"first input must be a fork, got {got}")
    return fork


def _get_fork_item(node: Node) -> None:
    _arity(node, 1)
    fork = _fork_input(node)
    if node.attrs["index"] >= fork.attrs["n"]:
        raise RuleError(f"index {node.attrs['index']} out of range for %{fork.name} (n={fork.attrs['n']})")
    if node.stream == fork.stream:
        raise RuleError(f"must start a new stream, but is in the fork's stream {fork.stream}")


def _join(node: Node) -> None:
    fork = _fork_input(node)
    if fork.stream != node.stream:
        raise RuleError(f"joins %{fork.name} of stream {fork.stream} from stream {node.stream}")
    if len(node.inputs) != 1 + fork.attrs["n"]:
        raise RuleError(f"takes the fork and the last node of each of its {fork.attrs['n']} streams, "
                        f"got {len(node.inputs)} inputs")


def _variable(node: Node) -> None:
    _arity(node, 1)
    producer, name = node.inputs[0], node.attrs["name"]
    if producer.op is Op.LOOP_END:
        if name not in (producer.attrs.get("variables") or []):
            raise RuleError(f"reads {name!r} from %{producer.name}, whose loop does not set it")
        expected = ValueType.STR
    elif producer.op is Op.JOIN:
        if name not in (producer.attrs.get("variables") or []):
            raise RuleError(f"reads {name!r} from %{producer.name}, which does not gather it")
        expected = ValueType.LIST
    elif producer.op in VARIABLE_PRODUCING_OPS:
        if producer.attrs.get("name") != name:
            raise RuleError(f"reads {name!r} from %{producer.name}, which produces {producer.attrs.get('name')!r}")
        expected = producer.type
    else:
        raise RuleError(f"reads {name!r} from %{producer.name} ({producer.op.value}), which produces no variable")
    if node.type is not expected:
        raise RuleError(f"has type {node.type.value}, but %{producer.name} gives {expected.value}")


def _branch(node: Node) -> None:
    _arity(node, 1)
    select = node.inputs[0]
    if select.op is not Op.SELECT:
        raise RuleError(f"input %{select.name} is a {select.op.value}, not a select")
    if node.attrs["cases"] != select.attrs.get("choices"):
        raise RuleError(f"cases {node.attrs['cases']!r} differ from %{select.name}'s choices "
                        f"{select.attrs.get('choices')!r} (a branch needs constant choices)")


def _select(node: Node) -> None:
    """Constant choices (attribute, no input), or one list input holding them at run time."""
    if "choices" in node.attrs:
        _arity(node, 0)
        return
    if len(node.inputs) != 1:
        raise RuleError(f"has no 'choices' attribute, so it takes one input holding the choices, got {len(node.inputs)}")
    inp = node.inputs[0]
    if inp.type not in (ValueType.LIST, ValueType.ANY):
        raise RuleError(f"choices input %{inp.name} ({inp.op.value}) has type {inp.type.value}, not a list")


def _values(node: Node) -> None:
    """Any number of inputs, each a value (not a fork or stream handle, not a text op)."""
    for inp in node.inputs:
        if inp.type in (ValueType.NONE, ValueType.FORK, ValueType.STREAM):
            raise RuleError(f"input %{inp.name} ({inp.op.value}) has type {inp.type.value}, not a value")


def _loop_part(node: Node) -> None:
    """loop_index / loop_end: one input, a loop_begin of the same stream."""
    _arity(node, 1)
    begin = node.inputs[0]
    if begin.op is not Op.LOOP_BEGIN:
        raise RuleError(f"input %{begin.name} is a {begin.op.value}, not a loop_begin")
    if begin.stream != node.stream:
        raise RuleError(f"belongs to %{begin.name} of stream {begin.stream}, but is in stream {node.stream}")


def _get_item(node: Node) -> None:
    if len(node.inputs) not in (1, 2) or (len(node.inputs) == 2) == ("key" in node.attrs):
        raise RuleError("takes the value and either a 'key' attribute or the key as a second input")
    _values(node)


def _one_value(node: Node) -> None:
    _arity(node, 1)
    _values(node)


INPUT_RULES: dict[Op, Callable[[Node], None]] = {
    Op.OUTPUT: _values,
    Op.FORMAT: _values,
    Op.GET_ITEM: _get_item,
    Op.LENGTH: _one_value,
    Op.LOOP_BEGIN: _one_value,
    Op.LOOP_INDEX: _loop_part,
    Op.LOOP_END: _loop_part,
    Op.SELECT: _select,
    Op.APPEND: _text_input,
    Op.IMAGE: _media,
    Op.VIDEO: _media,
    Op.VARIABLE: _variable,
    Op.GET_FORK_ITEM: _get_fork_item,
    Op.JOIN: _join,
    Op.BRANCH: _branch,
}
for _op in Op:
    INPUT_RULES.setdefault(_op, _no_inputs)
