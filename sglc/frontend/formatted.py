"""Formatted text over run-time values: what `f"Question: {question}"` is while tracing.

An f-string, `str.format`, `%` or `str()` over a symbolic value (an argument, a gen's text, ...)
cannot be a Python `str` at compile time: its text exists only when the program runs. The tracer
rewrites the program's f-strings, `%`, `.format`, `.join`, `str()`, `repr()` and `format()` calls
(rewrite.py) into the functions below, which return a :class:`FormattedText` when a symbolic value
is involved and exactly what Python returns otherwise.

A FormattedText is constant pieces and references (:class:`Piece`: a value, its conversion
``!s``/``!r``/``!a``, its format spec or printf spec). Appending it to a state records constant
text and APPEND / FORMAT nodes (trace_sink.py), whose run-time meaning is Python's: a piece is
``format(convert(value), spec)`` (or ``printf % (value,)``), so the prompt is byte for byte the one
eager execution builds. Every other operation on it (every `str` method, `len`, slicing, `in`,
comparisons) either gives exactly the eager result or raises a TraceError at the user's line:
never a silently different prompt.
"""
from __future__ import annotations

import builtins
import re
import string
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

from sglc.frontend.errors import trace_error
from sglc.frontend.expr import Concat, Expr
from sglc.frontend.symbolic import SymbolicValue


class Piece(NamedTuple):
    """A run-time value inside formatted text: ``format(convert(value), spec)``, or with ``printf``
    (a `%`-format spec such as ``"%5.2f"``) ``printf % (convert(value),)``."""

    value: Any  # a SymbolicValue or a FormattedText (a nested f-string with a conversion/spec)
    conversion: str = ""  # "", "s", "r" or "a"
    spec: str = ""
    printf: str = ""
    join: Optional[str] = None  # `sep.join(value)` of a list known at run time

    @property
    def plain(self) -> bool:
        """No conversion, spec or join: the value's own text."""
        return not (self.conversion or self.spec or self.printf or self.join is not None)

    def attrs(self, index: int) -> dict[str, Any]:
        """The piece as a FORMAT node's ``pieces`` entry, its value being input `index`."""
        out: dict[str, Any] = {"input": index}
        for key in ("conversion", "spec", "printf"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.join is not None:
            out["join"] = self.join
        return out


Part = Union[str, Piece]


def _describe(parts: Sequence[Part]) -> str:
    names = [p.value.describe() if isinstance(p.value, SymbolicValue) else "formatted text"
             for p in parts if isinstance(p, Piece)]
    return "text formatted over " + (", ".join(dict.fromkeys(names)) or "nothing")


class FormattedText(Expr):
    """Constant text and run-time values (pieces), in order; appendable like a str.

    Adjacent constants are merged and a plain piece holding formatted text is inlined, so equal
    texts have equal parts."""

    __slots__ = ("parts",)

    def __init__(self, parts: Sequence[Part]) -> None:
        merged: list[Part] = []
        for part in parts:
            if isinstance(part, Piece) and part.plain and isinstance(part.value, FormattedText):
                for inner in part.value.parts:
                    _push(merged, inner)
            else:
                _push(merged, part)
        self.parts = tuple(merged)

    # ----- what works exactly -----
    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return FormattedText((*self.parts, other))
        if isinstance(other, FormattedText):
            return FormattedText((*self.parts, *other.parts))
        return Concat.of(self, other)

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return FormattedText((other, *self.parts))
        return Concat.of(other, self)

    def __mul__(self, times: Any) -> "FormattedText":
        if isinstance(times, bool) or not isinstance(times, int):
            raise self._refuse(f"* {type(times).__name__}")
        return FormattedText(self.parts * max(times, 0)) if times > 0 else FormattedText(())

    __rmul__ = __mul__

    def __bool__(self) -> bool:
        # NOTE: exact when some constant part is non-empty (the text is then non-empty at run time)
        if any(isinstance(p, str) and p for p in self.parts):
            return True
        return bool(self._concrete("as a condition (bool())"))

    def startswith(self, prefix: Any, *bounds: Any) -> bool:
        head = self.parts[0] if self.parts and isinstance(self.parts[0], str) else ""
        prefixes = prefix if isinstance(prefix, tuple) else (prefix,)
        if not bounds and all(isinstance(p, str) and len(p) <= len(head) for p in prefixes):
            return head.startswith(prefixes)  # NOTE: decided by the constant head alone
        return self._concrete(".startswith(...) beyond its constant beginning").startswith(prefix, *bounds)

    def endswith(self, suffix: Any, *bounds: Any) -> bool:
        tail = self.parts[-1] if self.parts and isinstance(self.parts[-1], str) else ""
        suffixes = suffix if isinstance(suffix, tuple) else (suffix,)
        if not bounds and all(isinstance(s, str) and len(s) <= len(tail) for s in suffixes):
            return tail.endswith(suffixes)
        return self._concrete(".endswith(...) beyond its constant end").endswith(suffix, *bounds)

    def join(self, items: Any) -> "FormattedText":
        """`sep.join([...])` with this text as the separator, over a concrete list."""
        if isinstance(items, SymbolicValue):
            raise self._refuse(".join() over a list known only at run time")
        parts: list[Part] = []
        for i, item in enumerate(list(items)):
            if i:
                parts.extend(self.parts)
            parts.extend(_as_parts(item, ".join() of an item"))
        return FormattedText(parts)

    def __repr__(self) -> str:
        return "FormattedText(" + ", ".join(repr(p) if isinstance(p, str) else f"{{{p.value!r}}}" for p in self.parts) + ")"

    # ----- what is refused (its result depends on the run-time text) -----
    def _concrete(self, construct: str) -> str:
        """The run-time text, in a run with graph breaks; a TraceError otherwise."""
        handler = _handler(self)
        if handler is not None:
            return handler.render(self)
        raise self._refuse(construct)

    def _refuse(self, construct: str) -> Exception:
        err = trace_error(
            f"cannot use {construct} on {_describe(self.parts)} while tracing: the result depends on the "
            "values at run time, and a compiled program would build a different prompt; format the value "
            "where you append it (f\"...{x}...\"), bind the argument, or run the program eagerly (prog.run)")
        err.breakable = any(isinstance(p, Piece) and (isinstance(p.value, FormattedText) or p.value.generated)
                            for p in self.parts)
        return err

    def __str__(self) -> str:
        return self._concrete("str() outside the program's own code")

    def __format__(self, spec: str) -> str:
        return format(self._concrete("an f-string or format() outside the program's own code"), spec)

    def __len__(self) -> int:
        return len(self._concrete("len()"))

    def __iter__(self) -> Any:
        return iter(self._concrete("iteration"))

    def __getitem__(self, key: Any) -> Any:
        return self._concrete("[...] (indexing or slicing)")[key]

    def __contains__(self, item: Any) -> bool:
        return item in self._concrete("`in`")

    def __hash__(self) -> int:
        return hash(self._concrete("hash() (a dict key or set member)"))

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        return self._concrete("==") == _plain(other)

    def __ne__(self, other: Any) -> bool:  # type: ignore[override]
        return self._concrete("!=") != _plain(other)

    def __lt__(self, other: Any) -> bool:
        return self._concrete("<") < _plain(other)

    def __le__(self, other: Any) -> bool:
        return self._concrete("<=") <= _plain(other)

    def __gt__(self, other: Any) -> bool:
        return self._concrete(">") > _plain(other)

    def __ge__(self, other: Any) -> bool:
        return self._concrete(">=") >= _plain(other)

    def __mod__(self, other: Any) -> Any:
        return self._concrete("% formatting with it as the format") % other

    def __rmod__(self, other: Any) -> Any:
        return other % self._concrete("% formatting outside the program's own code")


def _plain(value: Any) -> Any:
    return value._concrete("comparison") if isinstance(value, FormattedText) else value


def _handler(text: "FormattedText") -> Any:
    """The break handler of the trace a formatted text belongs to (None while compiling)."""
    for part in text.parts:
        if isinstance(part, Piece):
            value = part.value
            if isinstance(value, FormattedText):
                return _handler(value)
            return value.context.break_handler
    return None


def _refused_method(name: str) -> Callable[..., Any]:
    def method(self: FormattedText, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._concrete(f".{name}()"), name)(*args, **kwargs)

    method.__name__ = name
    return method


#: Every other str method is refused (the text it works on exists only at run time).
for _name in dir(str):
    if not _name.startswith("_") and _name not in vars(FormattedText):
        setattr(FormattedText, _name, _refused_method(_name))


def _push(parts: list[Part], part: Part) -> None:
    if isinstance(part, str):
        if not part:
            return
        if parts and isinstance(parts[-1], str):
            parts[-1] += part
            return
    parts.append(part)


def is_symbolic(value: Any) -> bool:
    return isinstance(value, (SymbolicValue, FormattedText))


def _as_parts(value: Any, what: str) -> tuple[Part, ...]:
    """`value` as text parts, where Python would use it as a str (`+`, join)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, FormattedText):
        return value.parts
    if isinstance(value, SymbolicValue):
        return (Piece(value),)
    raise TypeError(f"{what}: expected str instance, {type(value).__name__} found")


def _piece(value: Any, conversion: str, spec: Any, construct: str) -> Part:
    """One replacement field: a constant when the value is concrete, else a Piece."""
    if is_symbolic(spec):
        raise trace_error(f"cannot use {_describe(spec.parts if isinstance(spec, FormattedText) else [Piece(spec)])} "
                          f"as the format spec of {construct} while tracing: the spec must be known at compile time")
    if not is_symbolic(value):
        return format(_convert(value, conversion), spec)
    if isinstance(value, FormattedText) and conversion in ("", "s") and not spec:
        return Piece(value)  # NOTE: str() of a str is itself: inlined by FormattedText
    return Piece(value, conversion if conversion != "s" or isinstance(value, SymbolicValue) else "", spec)


def _convert(value: Any, conversion: str) -> Any:
    return {"": lambda v: v, "s": str, "r": repr, "a": ascii}[conversion](value)


# ----- what the rewritten program calls (rewrite.py) -----

def fstring(*parts: Any) -> Any:
    """An f-string: each part is a constant str or (value, conversion, spec) for a replacement field."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        else:
            value, conversion, spec = part
            out.append(_piece(value, conversion or "", spec, "an f-string"))
    if not any(isinstance(p, Piece) for p in out):
        return "".join(out)  # type: ignore[arg-type]
    return FormattedText(out)


_FORMATTER = string.Formatter()


def str_format(template: str, args: Sequence[Any], kwargs: dict[str, Any], construct: str = "str.format()") -> Any:
    """`template.format(*args, **kwargs)` (exactly str.format's fields, conversions and specs)."""
    if not any(is_symbolic(v) for v in (*args, *kwargs.values())):
        return template.format(*args, **kwargs)
    out: list[Part] = []
    auto, mode = 0, ""
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        out.append(literal)
        if field is None:
            continue
        first, rest = _split_field(field)
        if first == "":
            if mode == "manual":
                raise ValueError("cannot switch from manual field specification to automatic field numbering")
            first, auto, mode = str(auto), auto + 1, "auto"
        elif first.isdigit():
            if mode == "auto":
                raise ValueError("cannot switch from automatic field numbering to manual field specification")
            mode = "manual"
        value = args[int(first)] if first.isdigit() else kwargs[first]
        for kind, key in rest:
            if is_symbolic(value):
                raise trace_error(f"cannot use {'.' + key if kind == 'attr' else f'[{key}]'} on "
                                  f"{_describe([Piece(value)] if isinstance(value, SymbolicValue) else value.parts)} "
                                  f"in {construct} while tracing: its fields exist only at run time")
            value = getattr(value, key) if kind == "attr" else value[key]
        if spec and "{" in spec:
            spec = str_format(spec, args, kwargs, construct)
        out.append(_piece(value, conversion or "", spec or "", construct))
    return FormattedText(out)


def _split_field(field: str) -> tuple[str, list[tuple[str, Any]]]:
    """'0.name[2]' -> ('0', [('attr', 'name'), ('item', 2)]) (str.format's field grammar)."""
    first, rest_iter = string._string.formatter_field_name_split(field)  # type: ignore[attr-defined]
    return str(first), [("attr" if is_attr else "item", key) for is_attr, key in rest_iter]


_PRINTF = re.compile(r"%(?:\((?P<key>[^)]*)\))?(?P<flags>[#0\- +]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?"
                     r"[hlL]?(?P<type>[diouxXeEfFgGcrsa%])")


def printf(template: Any, values: Any) -> Any:
    """`template % values` (printf-style), exactly; a FormattedText when a value is symbolic."""
    if not isinstance(template, str) or not _has_symbolic(values):
        return template % values
    mapping = isinstance(values, dict)
    items = values if isinstance(values, tuple) else (values,)
    out: list[Part] = []
    position = 0
    last = 0
    for match in _PRINTF.finditer(template):
        out.append(template[last:match.start()])
        last = match.end()
        if match["type"] == "%":
            out.append("%")
            continue
        if "*" in (match["width"] or "") + (match["precision"] or ""):
            raise trace_error("cannot use a * width or precision in % formatting over run-time values while tracing")
        spec = match.group(0) if match["key"] is None else "%" + match.group(0)[len(match["key"]) + 3:]
        if match["key"] is not None:
            value = values[match["key"]]
        else:
            if mapping:
                value = values  # NOTE: a dict as the one argument of a format without keys
            else:
                if position >= len(items):
                    raise TypeError("not enough arguments for format string")
                value = items[position]
            position += 1
        out.append(spec % (value,) if not is_symbolic(value) else Piece(value, printf=spec))
    out.append(template[last:])
    if not mapping and position < len(items):
        raise TypeError("not all arguments converted during string formatting")
    return FormattedText(out)


def _has_symbolic(values: Any) -> bool:
    if is_symbolic(values):
        return True
    if isinstance(values, tuple):
        return any(is_symbolic(v) for v in values)
    if isinstance(values, dict):
        return any(is_symbolic(v) for v in values.values())
    return False


def call(fn: Any) -> Any:
    """A call the tracer intercepts: `str(x)`, `repr(x)`, `ascii(x)`, `format(x, spec)` of a
    symbolic value give formatted text; any other call (or argument) is the call itself."""
    if fn is builtins.str:
        return _str_call
    if fn is builtins.repr:
        return lambda *a, **k: _converted(a, k, "r", builtins.repr)
    if fn is builtins.ascii:
        return lambda *a, **k: _converted(a, k, "a", builtins.ascii)
    if fn is builtins.format:
        return _format_call
    return fn


def _str_call(*args: Any, **kwargs: Any) -> Any:
    if len(args) == 1 and not kwargs and is_symbolic(args[0]):
        return args[0] if isinstance(args[0], FormattedText) else FormattedText((Piece(args[0], "s"),))
    return builtins.str(*args, **kwargs)


def _converted(args: tuple, kwargs: dict, conversion: str, fn: Callable[..., Any]) -> Any:
    """repr(x) / ascii(x): a piece with that conversion for a symbolic x, else the builtin's result."""
    if len(args) == 1 and not kwargs and is_symbolic(args[0]):
        return FormattedText((Piece(args[0], conversion),))
    return fn(*args, **kwargs)


def _format_call(*args: Any, **kwargs: Any) -> Any:
    if args and not kwargs and len(args) <= 2 and is_symbolic(args[0]):
        return FormattedText((_piece(args[0], "", args[1] if len(args) == 2 else "", "format()"),))
    return builtins.format(*args, **kwargs)


def method(obj: Any, name: str) -> Any:
    """`obj.name(...)` where the tracer intercepts it: a str's ``format`` / ``format_map`` / ``join``
    over symbolic values give formatted text; anything else is the method itself."""
    if isinstance(obj, str):
        if name == "format":
            return lambda *a, **k: str_format(obj, a, k)
        if name == "format_map":
            return lambda mapping: (str_format(obj, (), mapping, "str.format_map()")
                                    if any(is_symbolic(v) for v in _values(mapping)) else obj.format_map(mapping))
        if name == "join":
            return lambda items: _join(obj, items)
    return getattr(obj, name)


def _values(mapping: Any) -> list[Any]:
    try:
        return list(mapping.values())
    except Exception:  # NOTE: a mapping-like object: str.format_map decides
        return []


def _join(sep: str, items: Any) -> Any:
    if isinstance(items, SymbolicValue):
        return join_symbolic(sep, items)
    items = list(items)
    if not any(is_symbolic(i) for i in items):
        return sep.join(items)
    return FormattedText((sep,)).join(items)


def join_symbolic(sep: str, items: SymbolicValue) -> Any:
    """`sep.join(items)` for a list known only at run time: one piece that joins it at run time."""
    return FormattedText((Piece(items, join=sep),))
