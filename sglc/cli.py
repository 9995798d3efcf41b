"""The `sglc` command: compile an LM program to graph.pb, and inspect a graph.pb.

    sglc compile program.py[:function] [-o graph.pb] [--bind NAME=JSON ...]
    sglc inspect graph.pb [--table] [--dot out.dot]
    sglc inspect program.py[:function]        # compiled in process: its graph breaks, if any
    sglc inspect-model PATH_OR_NAME [--json]  # a model's metadata and the kernels that would run it
    sglc models [PATH ...] [--json]           # the models that can be served here

Errors a user can cause (a bad program, a bad file) print one line, `sglc: error: ...`, and exit
with status 2; `--debug` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Sequence

from sglc.cli_args import binding
from sglc.errors import SglcError, one_line_error

EXIT_ERROR = 2
_LOCATED = re.compile(r"^\S+\.py:\d+: ")


class CliError(SglcError):
    """A problem with the command line's inputs (no such program, several programs, ...)."""


# ----- loading programs -----
def split_target(target: str) -> tuple[Path, Optional[str]]:
    """'dir/prog.py:fn' -> (Path('dir/prog.py'), 'fn'); 'prog.py' -> (Path('prog.py'), None)."""
    path, sep, name = target.rpartition(":")
    if sep and name.isidentifier() and not Path(target).exists():
        return Path(path), name
    return Path(target), None


def load_module(path: Path) -> ModuleType:
    """Import a Python file as a fresh module (its folder importable while it loads)."""
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    name = f"_sglc_program_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # NOTE: dataclasses/pydantic in the program look themselves up here
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SglcError:
        raise
    except Exception as err:
        raise CliError(f"loading {path} failed: {describe_exception(err, path)}") from err
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def find_program(module: ModuleType, path: Path, name: Optional[str], note: Optional[list] = None) -> Any:
    """The named SglFunction of the module, its only one, or the only one no other program of the
    module calls (said in `note`); CliError listing the choices otherwise."""
    from sglc.frontend.function import SglFunction

    found: dict[str, SglFunction] = {}
    for attr, value in vars(module).items():
        if isinstance(value, SglFunction) and (name == attr or value.__module__ == module.__name__):
            found.setdefault(attr, value)
    if name is not None:
        if name in found:
            return found[name]
        listed = ", ".join(sorted(found)) or "none"
        raise CliError(f"{path} has no @sgl.function named {name!r} (it has: {listed})")
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise CliError(f"{path} defines no @sgl.function")
    names = ", ".join(sorted(found))
    roots = [attr for attr, fn in found.items()
             if not any(other is not fn and calls(other, fn, module) for other in found.values())]
    if len(roots) == 1:
        called = ", ".join(sorted(a for a in found if a != roots[0]))
        if note is not None:
            note.append(f"{path.name} defines {len(found)} programs ({names}); compiling {roots[0]}, the one no other "
                        f"calls ({called} {'is' if len(found) == 2 else 'are'} called by it; pick another with "
                        f"{path.name}:NAME)")
        return found[roots[0]]
    uncalled = f"; {len(roots)} of them are called by no other ({', '.join(sorted(roots))})" if roots else ""
    raise CliError(f"{path} defines {len(found)} programs ({names}){uncalled}; pick one: sglc compile {path}:NAME")


def calls(caller: Any, callee: Any, module: ModuleType) -> bool:
    """Whether `caller`'s code (nested functions included) names `callee`: a global of the module
    bound to it, or a closure cell holding it."""
    func = caller.func
    cells = [c.cell_contents for c in (func.__closure__ or ()) if _filled(c)]
    if any(value is callee for value in cells):
        return True
    names: set[str] = set()
    stack = [func.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return any(func.__globals__.get(n) is callee or getattr(module, n, None) is callee for n in names)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def describe_exception(err: BaseException, path: Path) -> str:
    """One line for an exception raised by user code, located at the innermost line of `path`."""
    message = f"{err}".strip().splitlines()[0] if str(err).strip() else ""
    if _LOCATED.match(message):  # sglc already said where (file.py:line: ...)
        return message
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
    frame = (mine or frames or [None])[-1]
    where = f"{Path(frame.filename).name}:{frame.lineno}: " if frame is not None else ""
    return f"{where}{type(err).__name__}: {message}" if message else f"{where}{type(err).__name__}"


# ----- commands -----
def cmd_compile(args: argparse.Namespace) -> int:
    from sglc.frontend.errors import TraceError
    from sglc.ir.serialize import save
    from sglc.ir.verify import verify
    from sglc.passes.pipeline import default_pipeline

    path, name = split_target(args.program)
    note: list[str] = []
    fn = find_program(load_module(path), path, name, note)
    for line in note:
        print(f"sglc compile: {line}", file=sys.stderr)
    bound = dict(args.bind or [])
    unknown = [k for k in bound if k not in fn.arg_names]
    if unknown:
        raise CliError(f"--bind {', '.join(unknown)}: {fn.name} has no such parameter "
                       f"(its parameters: {', '.join(fn.arg_names) or 'none'})")
    try:
        # NOTE: a parameter needed at compile time (a fork count) falls back to its Python default
        graph, defaults = fn.trace_fixing_defaults(**bound)
    except TraceError as err:
        if err.argument is None:
            raise
        raise CliError(f"{err} (from the command line: sglc compile ... --bind {err.argument}=JSON)") from err
    except SglcError:
        raise
    except Exception as err:
        raise CliError(f"tracing {fn.name} failed: {describe_exception(err, path)}") from err
    for key, value in defaults.items():
        print(f"sglc compile: {key} is needed at compile time: fixed to its default {json.dumps(value)} "
              f"(choose another with --bind {key}=JSON)", file=sys.stderr)
    pipeline = default_pipeline(aggressive=args.aggressive)
    graph = pipeline.run(graph).graph
    verify(graph)
    out = Path(args.output) if args.output else Path(f"{fn.name}.pb")
    save(graph, out)
    changed = ", ".join(pipeline.changed_by) or "none"
    print(f"compiled {fn.name} ({path}) -> {out}: {len(graph)} nodes, {graph.num_streams} "
          f"stream{'s' if graph.num_streams != 1 else ''}; passes that changed the graph: {changed}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from sglc.ir.dot import to_dot
    from sglc.ir.printing import format_graph, format_tabular
    from sglc.ir.serialize import load

    path, name = split_target(args.graph)
    if path.suffix == ".py":  # NOTE: a program: compile it in process and explain it (graph breaks too)
        note: list[str] = []
        fn = find_program(load_module(path), path, name, note)
        for line in note:
            print(f"sglc inspect: {line}", file=sys.stderr)
        try:
            compiled = fn.compile()
        except SglcError:
            raise
        except Exception as err:
            raise CliError(f"tracing {fn.name} failed: {describe_exception(err, path)}") from err
        explanation = compiled.explain()
        print(explanation)
        graph = compiled.graph
    else:
        graph = load(args.graph)
        print(format_graph(graph))
    if args.table:
        print()
        print(format_tabular(graph))
    if args.dot:
        Path(args.dot).write_text(to_dot(graph), encoding="utf-8")
        print(f"wrote {args.dot} (render: dot -Tsvg {args.dot} -o graph.svg)", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglc", description="Compile LM programs (SGLang DSL) to graph.pb files and inspect them."
    )
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    comp = sub.add_parser("compile", help="trace an @sgl.function, run the passes, write graph.pb",
                          description="Trace one @sgl.function (the only one in the file, or the "
                                      "named one), run the default passes, verify and write graph.pb.")
    comp.add_argument("program", metavar="PROGRAM.py[:FUNCTION]", help="the program file, optionally :function")
    comp.add_argument("-o", "--output", metavar="GRAPH.pb", help="output file (default: FUNCTION.pb)")
    comp.add_argument("--aggressive", action="store_true",
                      help="also apply prefix rewrites that CHANGE prompt text (reorder constant text "
                           "ahead of argument reads); off by default")
    comp.add_argument("--bind", action="append", type=binding, metavar="NAME=JSON",
                      help="fix a program argument at compile time (repeatable), e.g. --bind n=3 for a fork "
                           "count; the graph no longer takes that argument")
    comp.set_defaults(handler=cmd_compile)

    insp = sub.add_parser("inspect", help="print a graph.pb as an SSA listing (and a table, DOT); or a program.py: "
                                          "compile it in process and list its graph breaks",
                          description="Print a graph.pb as an SSA listing. Given PROGRAM.py[:FUNCTION], compile it "
                                      "in process (prog.compile()) and explain it: its graph breaks (Python on "
                                      "generated text, which `sglc compile` refuses) and the graph traced before them.")
    insp.add_argument("graph", metavar="GRAPH.pb|PROGRAM.py[:FUNCTION]")
    insp.add_argument("--table", action="store_true", help="also print one table row per node")
    insp.add_argument("--dot", metavar="OUT.dot", help="write Graphviz DOT to this file")
    insp.set_defaults(handler=cmd_inspect)

    importlib.import_module("sglc.cli_run").add_run_parser(sub)  # sglc/cli_run.py
    importlib.import_module("sglc.cli_serve").add_serve_parser(sub)  # sglc/cli_serve.py
    importlib.import_module("sglc.cli_fleet").add_fleet_parser(sub)  # sglc/cli_fleet.py
    importlib.import_module("sglc.cli_models").add_models_parsers(sub)  # sglc/cli_models.py
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the `sglc` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # `sglc inspect g.pb | head`: the reader left; not an error of ours
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except (SglcError, OSError) as err:
        if args.debug:
            raise
        if isinstance(err, OSError) and err.filename is not None:
            message = f"{err.filename}: {err.strerror or err}"
        else:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"sglc: error: {one_line_error(message)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
