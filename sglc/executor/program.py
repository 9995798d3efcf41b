"""The Python entry points of execution: the default backend, finished states, run / run_batch.

``prog.run(...)`` (eager) and ``prog.compile().run(...)`` (graph) both return an
:class:`ExecutedState`: a ProgramState over the finished result, so ``s["x"]``, ``s.text()``,
``s.messages()`` and ``s.get_meta_info("x")`` work as in SGLang; ``s.error()`` is the failure
(None when it succeeded) and ``s.result`` the JSON-ready :class:`ProgramResult`.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from sglc.errors import SglcError
from sglc.executor.results import RETURNS_STATE, ProgramResult
from sglc.frontend.errors import NotExecutableError, user_source
from sglc.frontend.primitives import Gen, Select
from sglc.frontend.sink import StreamSink
from sglc.frontend.state import ProgramState
from sglc.lang.global_config import global_config
from sglc.wire.backend import Backend



class NoBackendError(NotExecutableError):
    """A program was run with no backend given and no default backend set."""


class ProgramError(SglcError):
    """A program run failed; `.result` holds what was computed before the failure."""

    def __init__(self, result: ProgramResult) -> None:
        self.result = result
        super().__init__(result.error or "the program failed")


def set_default_backend(backend: Optional[Backend]) -> None:
    """The backend `run`/`run_batch` use when none is passed (None clears it).

    NOTE: stored in `sgl.global_config.default_backend`, where SGLang keeps it, so programs that
    assign that field directly work too.
    """
    if backend is not None and not isinstance(backend, Backend):
        raise TypeError(f"set_default_backend needs an sglc backend (e.g. sgl.Runtime() or "
                        f"sgl.RuntimeEndpoint(...)), got {type(backend).__name__}")
    global_config.default_backend = backend


def get_default_backend() -> Optional[Backend]:
    return global_config.default_backend


def resolve_backend(backend: Optional[Backend], what: str) -> Backend:
    """`backend`, else the default; a clear error when there is neither."""
    chosen = backend if backend is not None else get_default_backend()
    if chosen is None:
        raise NoBackendError(
            f"{user_source()}: {what} needs a backend: pass backend=... or call sgl.set_default_backend(...) "
            "first, e.g. sgl.set_default_backend(sgl.Runtime()) for the embedded runtime or "
            "sgl.RuntimeEndpoint('127.0.0.1:30000') for a `sglc serve` server"
        )
    if not isinstance(chosen, Backend):
        where = "" if backend is not None else " (sgl.global_config.default_backend)"
        raise TypeError(f"{what}: backend{where} must be an sglc backend such as sgl.Runtime() or "
                        f"sgl.RuntimeEndpoint(...), got {type(chosen).__name__}")
    return chosen


class FinishedSink(StreamSink):
    """The read-only stream of a finished program (what run() returns)."""

    def __init__(self, result: ProgramResult) -> None:
        self.result = result

    def _finished(self, what: str) -> SglcError:
        return SglcError(f"{user_source()}: cannot {what}: this program has finished running; "
                         "append inside the @sgl.function instead")

    def append_text(self, text: str) -> None:
        raise self._finished("append text")

    def append_value(self, value: Any) -> None:
        raise self._finished("append a value")

    def gen(self, expr: Gen) -> None:
        raise self._finished("generate")

    def select(self, expr: Select) -> None:
        raise self._finished("select")

    def role_begin(self, role: str) -> None:
        raise self._finished("begin a role")

    def role_end(self, role: str) -> None:
        raise self._finished("end a role")

    def image(self, path: Any) -> None:
        raise self._finished("append an image")

    def video(self, path: Any, num_frames: int) -> None:
        raise self._finished("append a video")

    def var_scope_begin(self, name: str) -> None:
        raise self._finished("open a var scope")

    def var_scope_end(self, name: str) -> None:
        raise self._finished("close a var scope")

    def get_var(self, name: str) -> Any:
        if name not in self.result.variables:
            known = ", ".join(sorted(self.result.variables)) or "none"
            suffix = f" (the program failed: {self.result.error})" if self.result.error else ""
            raise KeyError(f'no variable "{name}" in this state (defined: {known}){suffix}')
        return self.result.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        self.result.variables[name] = value

    def has_var(self, name: str) -> bool:
        return name in self.result.variables

    def text(self) -> str:
        return self.result.text

    def messages(self) -> list[dict[str, Any]]:
        return [dict(m) for m in self.result.messages]

    def get_meta_info(self, name: str) -> Any:
        return self.result.meta_info.get(name)  # NOTE: None when no call produced it (SGLang)

    def fork(self, n: int) -> list[StreamSink]:
        raise self._finished("fork")

    def join(self, children: list[StreamSink], mode: str) -> None:
        raise self._finished("join")

    def describe(self) -> str:
        status = "failed" if self.result.error else "finished"
        return f"{status} program, {len(self.result.variables)} variables"


class ExecutedState(ProgramState):
    """The state `run()` returns: read variables, text and messages of the finished program."""

    def __init__(self, result: ProgramResult, ret_value: Any = None) -> None:
        super().__init__(FinishedSink(result))
        self.result = result
        self.ret_value = self if ret_value is RETURNS_STATE else ret_value

    def error(self) -> Optional[str]:
        """The one-line failure of this run, or None."""
        return self.result.error

    def variables(self) -> dict[str, Any]:
        return dict(self.result.variables)

    def __repr__(self) -> str:
        return f"ExecutedState({self.sink.describe()})"


def batch_arguments(what: str, arg_names: Sequence[str], num_required: int, batch: Any) -> list[dict[str, Any]]:
    """SGLang's run_batch inputs as argument dicts: each is a dict of arguments, or a list/tuple of
    positional values (``run_batch([("Hi",), ("Yo",)])``) with at least the required ones."""
    if isinstance(batch, (str, bytes, dict)) or not isinstance(batch, (list, tuple)):
        raise TypeError(f"{what} takes a list of inputs (dicts of arguments or tuples of positional values), "
                        f"got {type(batch).__name__}")
    inputs: list[dict[str, Any]] = []
    for i, item in enumerate(batch):
        if isinstance(item, dict):
            inputs.append(dict(item))
        elif isinstance(item, (list, tuple)) and num_required <= len(item) <= len(arg_names):
            inputs.append(dict(zip(arg_names, item)))
        else:
            shown = repr(item) if len(repr(item)) <= 60 else repr(item)[:57] + "..."
            raise TypeError(f"{what}: input {i} ({shown}) does not match the program's parameters "
                            f"({', '.join(arg_names) or 'none'}): give a dict of arguments or a tuple of "
                            f"{num_required if num_required == len(arg_names) else f'{num_required} to {len(arg_names)}'} "
                            "positional values")
    return inputs


def bind_call(arg_names: Sequence[str], args: tuple, kwargs: dict[str, Any], what: str) -> dict[str, Any]:
    """Positional and keyword program arguments as one dict (SGLang's run(*args, **kwargs))."""
    if len(args) > len(arg_names):
        raise TypeError(f"{what} takes {len(arg_names)} program argument(s), got {len(args)} positional")
    bound = dict(zip(arg_names, args))
    for key, value in kwargs.items():
        if key in bound:
            raise TypeError(f"{what} got argument {key!r} twice")
        bound[key] = value
    return bound
