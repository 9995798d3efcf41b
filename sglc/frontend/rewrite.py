"""What the tracer runs instead of a program's function: the same code, with its string formatting
made traceable.

Python builds an f-string, a `%` or a `str.format` result as a plain `str`, asking each value for
its text (`__format__`), so a symbolic value cannot take part: its text exists only at run time.
:func:`traceable` recompiles the function (its own source, its line numbers, its globals and
closure cells) with these expressions routed through sglc.frontend.formatted, which returns
exactly what Python returns for concrete values and a FormattedText over symbolic ones:

    f"...{x!r:>10}..."      ->  fstring("...", (x, "r", ">10"), "...")
    a % b                   ->  printf(a, b)
    obj.format(...)         ->  method(obj, "format")(...)     (also format_map, join)
    str(x), repr(x), ascii(x), format(x, spec), len(x), enumerate(x), range(x)
                            ->  call(str)(x), ...              (the builtin itself unless tracing needs it)

Functions defined inside the program (nested defs, lambdas) are part of its source and rewritten
with it. Functions it merely calls are not: an f-string over a symbolic value there still fails
loudly (symbolic.py says where to build the text instead). A function whose source is unavailable
(defined in a REPL or by exec) runs unchanged.
"""
from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
import weakref
from typing import Any, Callable

from sglc.frontend import formatted, loops

#: Names the rewritten code reaches the helpers by (a closure cell of the new function).
HELPERS = "__sglc_trace__"
#: Builtins whose calls go through `call` (it returns the builtin itself unless an argument is symbolic).
CALLS = frozenset({"str", "repr", "ascii", "format", "len", "enumerate", "range"})
#: Methods whose calls go through `method` (only a str's are treated; others are the method itself).
METHODS = frozenset({"format", "format_map", "join"})

_cache: "weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Any]]" = weakref.WeakKeyDictionary()


class _Helpers:
    """The namespace the rewritten code calls (one object, so one closure cell)."""

    fstring = staticmethod(formatted.fstring)
    printf = staticmethod(formatted.printf)
    method = staticmethod(formatted.method)

    @staticmethod
    def call(fn: Any) -> Any:
        return loops.call(formatted.call(fn))


def traceable(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` recompiled so that its string formatting traces (cached); `func` itself when its source
    cannot be read or rewritten."""
    try:
        return _cache[func]
    except (KeyError, TypeError):
        pass
    try:
        rewritten = _rewrite(func)
    except Exception:  # NOTE: no source, a construct ast cannot round-trip, ...: trace it unchanged
        rewritten = func
    try:
        _cache[func] = rewritten
    except TypeError:
        pass
    return rewritten


class _Transformer(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def _helper(self, name: str, node: ast.AST) -> ast.expr:
        self.changed = True
        return ast.copy_location(ast.Attribute(ast.Name(HELPERS, ast.Load()), name, ast.Load()), node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.expr:  # noqa: N802 - ast's naming
        args: list[ast.expr] = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                conversion = "" if value.conversion == -1 else chr(value.conversion)
                spec: ast.expr = ast.Constant("")
                if value.format_spec is not None:
                    spec = self.visit(value.format_spec)
                args.append(ast.Tuple([self.visit(value.value), ast.Constant(conversion), spec], ast.Load()))
            else:
                args.append(value)
        return ast.copy_location(ast.Call(self._helper("fstring", node), args, []), node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:  # noqa: N802
        self.generic_visit(node)
        if not isinstance(node.op, ast.Mod):
            return node
        return ast.copy_location(ast.Call(self._helper("printf", node), [node.left, node.right], []), node)

    def visit_Call(self, node: ast.Call) -> ast.expr:  # noqa: N802
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in CALLS:
            node.func = ast.copy_location(ast.Call(self._helper("call", func), [func], []), func)
        elif isinstance(func, ast.Attribute) and func.attr in METHODS:
            node.func = ast.copy_location(
                ast.Call(self._helper("method", func), [func.value, ast.Constant(func.attr)], []), func)
        return node


def _fingerprint(code: types.CodeType) -> tuple:
    """What must agree between a function's code and its source compiled again: its variables,
    names, constants and the lines its instructions come from (the bytecode itself may differ: the
    compiler calls a module attribute differently when it sees the module's imports)."""
    consts = tuple(repr(c) for c in code.co_consts if not isinstance(c, types.CodeType))
    # NOTE: the first line (the function's RESUME: the def, or its first decorator) is left out
    lines = tuple(sorted({line for _, _, line in code.co_lines() if line is not None}))[1:]
    return (code.co_argcount, code.co_kwonlyargcount, code.co_varnames, tuple(sorted(set(code.co_names))), consts,
            lines, code.co_freevars)


def _compiled(definition: ast.AST, code: types.CodeType, first_line: int) -> types.CodeType:
    """The code object of `definition` compiled where the original was (file, lines, free variables).

    NOTE: the helpers and the original free variables become parameters of a factory, so the new
    code has them as free variables; the function is then built with the ORIGINAL cells."""
    freevars = [name for name in code.co_freevars if name != HELPERS]
    factory = ast.FunctionDef(
        name="__sglc_factory__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(HELPERS)] + [ast.arg(n) for n in freevars],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[definition, ast.Return(ast.Name(code.co_name, ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, first_line - 1)
    compiled = compile(module, code.co_filename, "exec", dont_inherit=True)
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    return next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name)


def _rewrite(func: Callable[..., Any]) -> Callable[..., Any]:
    code = func.__code__
    lines, first_line = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    definition = tree.body[0]
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)) or definition.name != code.co_name:
        return func
    definition.decorator_list = []
    # NOTE: the source must be the code that runs (a file edited since it was imported is not):
    # compiled as it is, it must give the function's own bytecode, else nothing is rewritten
    if _fingerprint(_compiled(copy.deepcopy(definition), code, first_line)) != _fingerprint(code):
        return func
    transformer = _Transformer()
    transformer.visit(definition)
    if not transformer.changed:
        return func
    new_code = _compiled(definition, code, first_line)
    cells = dict(zip(code.co_freevars, func.__closure__ or ()))
    cells[HELPERS] = types.CellType(_Helpers)
    closure = tuple(cells[name] for name in new_code.co_freevars)
    new = types.FunctionType(new_code, func.__globals__, func.__name__, func.__defaults__, closure)
    new.__kwdefaults__ = func.__kwdefaults__
    new.__qualname__ = func.__qualname__
    new.__dict__.update(func.__dict__)
    new.__wrapped__ = func  # type: ignore[attr-defined]
    return new
