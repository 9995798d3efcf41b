"""The DSL's primitives, source-compatible with SGLang's `sglang.lang.api`.

Each function returns an inert :class:`Expr`; nothing happens until it is appended to a program
state (`s += gen("x")`). Arguments are validated here, at the user's line, so mistakes surface
before tracing or running. Only parameters the user set are stored: unset means "backend default".
"""
from __future__ import annotations

from typing import Any, Optional, Union

from sglc.frontend.choices import ChoicesSamplingMethod, choices_method_name, token_length_normalized
from sglc.frontend.errors import not_supported, trace_error, user_source
from sglc.frontend.expr import Concat, Expr
from sglc.frontend.formatted import FormattedText
from sglc.frontend.params import (
    SAMPLING_CHECKS,
    canonical_json_schema,
    check_grammar,
    check_regex,
    dtype_name,
)
from sglc.frontend.symbolic import SymbolicValue
from sglc.ir.types import ValueType
from sglc.wire import sampling_table



class Gen(Expr):
    """Generate text into variable `name`; `attrs` holds the parameters the user set."""

    __slots__ = ("name", "attrs", "type")

    def __init__(self, name: Optional[str], attrs: dict[str, Any], type: ValueType) -> None:
        self.name = name
        self.attrs = attrs
        self.type = type

    def __repr__(self) -> str:
        return f"Gen({self.name!r})"


class Select(Expr):
    """Choose one of `choices` by likelihood into variable `name`. While tracing, `choices` may be
    a symbolic value (a program argument): the choices are then a runtime input of the SELECT."""

    __slots__ = ("name", "choices", "temperature", "choices_method")

    def __init__(self, name: Optional[str], choices: Union[list[str], SymbolicValue], temperature: float,
                 choices_method: str) -> None:
        self.name = name
        self.choices = choices
        self.temperature = temperature
        self.choices_method = choices_method

    def __repr__(self) -> str:
        return f"Select({self.name!r}, choices={self.choices!r})"


class Image(Expr):
    """An image by path or URL (a str, or a symbolic program argument)."""

    __slots__ = ("path",)

    def __init__(self, path: Any) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"Image({self.path!r})"


class Video(Expr):
    """A video by path or URL, sampled to `num_frames` frames."""

    __slots__ = ("path", "num_frames")

    def __init__(self, path: Any, num_frames: int) -> None:
        self.path = path
        self.num_frames = num_frames

    def __repr__(self) -> str:
        return f"Video({self.path!r}, {self.num_frames})"


class RoleBegin(Expr):
    __slots__ = ("role",)

    def __init__(self, role: str) -> None:
        self.role = role

    def __repr__(self) -> str:
        return f"RoleBegin({self.role!r})"


class RoleEnd(Expr):
    __slots__ = ("role",)

    def __init__(self, role: str) -> None:
        self.role = role

    def __repr__(self) -> str:
        return f"RoleEnd({self.role!r})"


# ----- gen and its typed forms -----

def gen(
    name: Optional[str] = None,
    max_tokens: Optional[int] = None,
    stop: Optional[Union[str, list[str]]] = None,
    *,
    dtype: Optional[Union[type, str]] = None,
    choices: Optional[list[str]] = None,
    choices_method: Optional[ChoicesSamplingMethod] = None,
    regex: Optional[str] = None,
    json_schema: Any = None,
    ebnf: Optional[str] = None,
    grammar: Any = None,
    lark: Optional[str] = None,
    **sampling: Any,
) -> Union[Gen, Select]:
    """Call the model to generate into variable `name` (SGLang's `gen`).

    With `choices` it is a :func:`select` (temperature defaults to 0). At most one constraint of
    `regex`, `json_schema` (a JSON string, a dict, a bool or a pydantic model class), `dtype`
    (int/float/bool/str), `ebnf` (a context-free grammar in GBNF / xgrammar EBNF text, SGLang's
    field), `grammar` (such text, or a ``sglc.grammar.Grammar``) or `lark` (a lark grammar) may be
    given; a typed gen's value is the generated string, as in SGLang. A grammar is parsed here, so
    a syntax error names the argument, line and column at your call.
    Sampling parameters (`max_tokens`, `stop`, `temperature`, ...) are the DSL rows of
    sglc.wire.sampling_table (listed below); unknown ones are a TypeError.
    """
    sampling = {"max_tokens": max_tokens, "stop": stop, **sampling}
    _check_typed_kwargs("gen", sampling)
    grammars = {"ebnf": ebnf, "grammar": grammar, "lark": lark}
    params = dict(name=name, dtype=dtype, choices=choices, regex=regex, json_schema=json_schema, **grammars,
                  **sampling)
    for key, value in params.items():
        if key != "choices":  # NOTE: select() accepts choices given as a program argument
            _reject_symbolic("gen", key, value)
    if choices is not None:
        temperature = sampling.get("temperature")
        return select(name, choices, 0.0 if temperature is None else temperature,
                      token_length_normalized if choices_method is None else choices_method)
    _check_name("gen", name)
    try:
        sampling_table.at_most_one_constraint({"regex": regex, "json_schema": json_schema, "dtype": dtype, **grammars},
                                              "gen")
    except ValueError as err:
        raise ValueError(f"{user_source()}: {err}") from None
    # NOTE: stored under the table's name (the DSL's max_tokens is the IR's max_new_tokens)
    attrs: dict[str, Any] = {sampling_table.BY_DSL[key].name: SAMPLING_CHECKS[key](key, value)
                             for key, value in sampling.items() if value is not None}
    if regex is not None:
        attrs["regex"] = check_regex(regex)
    if json_schema is not None:
        attrs["json_schema"] = canonical_json_schema(json_schema)
    if dtype is not None:
        attrs["dtype"] = dtype_name(dtype)
    for key, value in grammars.items():
        if value is not None:
            attrs.update(check_grammar(key, value))
    return Gen(name, attrs, ValueType.STR)


gen.__doc__ += "\n    Sampling parameters:\n" + "\n".join(  # type: ignore[operator]
    f"      {p.dsl}: {p.described(p.dsl_low)}" + (f"; {p.doc}" if p.doc else "")
    for p in sampling_table.BY_DSL.values())


def gen_int(name: Optional[str] = None, **sampling: Any) -> Gen:
    """`gen` constrained to an integer (dtype int); takes gen's sampling parameters."""
    _check_typed_kwargs("gen_int", sampling)
    return gen(name, dtype=int, **sampling)  # type: ignore[return-value]


def gen_string(name: Optional[str] = None, **sampling: Any) -> Gen:
    """`gen` constrained to a quoted string (dtype str); takes gen's sampling parameters."""
    _check_typed_kwargs("gen_string", sampling)
    return gen(name, dtype=str, **sampling)  # type: ignore[return-value]


def select(
    name: Optional[str] = None,
    choices: Optional[list[str]] = None,
    temperature: float = 0.0,
    choices_method: Union[ChoicesSamplingMethod, str] = token_length_normalized,
) -> Select:
    """Choose one of `choices` (non-empty, distinct strings) by the model's likelihood.

    `choices` may be a program argument while tracing (HellaSwag's per-question endings): the
    graph then takes them at run time, and the result cannot be compared in a branch."""
    for key, value in (("name", name), ("temperature", temperature)):
        _reject_symbolic("select", key, value)
    _check_name("select", name)
    if isinstance(choices, SymbolicValue):
        try:
            method = choices_method_name(choices_method)
        except ValueError as err:
            raise ValueError(f"{user_source()}: {err}") from None
        return Select(name, choices, SAMPLING_CHECKS["temperature"]("temperature", temperature), method)
    if choices is None or isinstance(choices, str) or not isinstance(choices, (list, tuple)):
        raise TypeError(f"{user_source()}: select needs choices=[...] (a list of strings), got {choices!r}")
    for choice in choices:
        _reject_symbolic("select", "choices", choice)
    if not choices or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"{user_source()}: select choices must be a non-empty list of strings, got {choices!r}")
    if len(set(choices)) != len(choices):
        raise ValueError(f"{user_source()}: select choices must be distinct, got {choices!r}")
    temperature = SAMPLING_CHECKS["temperature"]("temperature", temperature)
    try:
        method = choices_method_name(choices_method)
    except ValueError as err:
        raise ValueError(f"{user_source()}: {err}") from None
    return Select(name, list(choices), temperature, method)


# ----- media and roles -----

def image(expr: Any) -> Image:
    """An image (file path or URL) appended to the prompt."""
    if not isinstance(expr, (str, SymbolicValue, FormattedText)):
        raise TypeError(f"{user_source()}: image() takes a path or URL string, got {type(expr).__name__}")
    return Image(expr)


def video(path: Any, num_frames: int) -> Video:
    """A video (file path or URL) appended to the prompt as `num_frames` frames."""
    if not isinstance(path, (str, SymbolicValue, FormattedText)):
        raise TypeError(f"{user_source()}: video() takes a path or URL string, got {type(path).__name__}")
    _reject_symbolic("video", "num_frames", num_frames)
    if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
        raise ValueError(f"{user_source()}: video num_frames must be an int >= 1, got {num_frames!r}")
    return Video(path, num_frames)


def _role(role: str, expr: Any = None) -> Concat:
    if expr is None:
        return Concat((RoleBegin(role), RoleEnd(role)))
    return Concat.of(RoleBegin(role), expr, RoleEnd(role))


def system(expr: Any = None) -> Concat:
    """`expr` wrapped in the system role (begin and end)."""
    return _role("system", expr)


def user(expr: Any = None) -> Concat:
    """`expr` wrapped in the user role (begin and end)."""
    return _role("user", expr)


def assistant(expr: Any = None) -> Concat:
    """`expr` wrapped in the assistant role (begin and end)."""
    return _role("assistant", expr)


def system_begin() -> RoleBegin:
    return RoleBegin("system")


def system_end() -> RoleEnd:
    return RoleEnd("system")


def user_begin() -> RoleBegin:
    return RoleBegin("user")


def user_end() -> RoleEnd:
    return RoleEnd("user")


def assistant_begin() -> RoleBegin:
    return RoleBegin("assistant")


def assistant_end() -> RoleEnd:
    return RoleEnd("assistant")



# ----- helpers -----

def _check_name(primitive: str, name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"{user_source()}: {primitive} name must be a non-empty str, got {name!r}")


def _reject_symbolic(primitive: str, key: str, value: Any) -> None:
    if isinstance(value, SymbolicValue):
        raise trace_error(
            f"cannot use {value.describe()} as {primitive}({key}=...) while tracing: parameters must be "
            "known at compile time; bind it (fn.trace(...=value)) or run the program with the eager interpreter"
        )


def _check_typed_kwargs(primitive: str, sampling: dict[str, Any]) -> None:
    # NOTE: SGLang's gen(n=...): one sample is all a gen makes here (n=None or 1 is that)
    n = sampling.pop("n", None)
    if n is not None and n != 1:
        raise not_supported(f"{primitive}(n={n!r}) (several samples of one gen)",
                            f"fork the state (forks = s.fork({n!r})) and gen in each child")
    bad = sorted(set(sampling) - set(SAMPLING_CHECKS))
    if bad:
        raise TypeError(f"{user_source()}: {primitive} got unexpected parameter(s) {', '.join(bad)}")
