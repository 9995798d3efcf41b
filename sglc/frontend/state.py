"""ProgramState (`s` in a program) and ProgramStateGroup (the result of `s.fork(n)`).

Both are mode-agnostic: they decode what the user writes and delegate every primitive to a
:class:`StreamSink` (tracing today; eager execution later), mirroring SGLang's user-facing API.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Iterator, Optional

from sglc.frontend.errors import trace_error, user_source
from sglc.frontend.expr import Concat, check_appendable
from sglc.frontend.formatted import FormattedText
from sglc.frontend.primitives import Gen, Image, RoleBegin, RoleEnd, Select, Video, assistant, system, user
from sglc.frontend.sink import StreamSink
from sglc.frontend.symbolic import SymbolicValue

JOIN_MODES = ("gather_variable", "concate_and_append")
_END = object()  # the end of a text_iter, as seen by text_async_iter


class ProgramState:
    """The prompt state of one stream: append with `+=`, read variables with `s["name"]`."""

    def __init__(self, sink: StreamSink) -> None:
        self._sink = sink
        self.ret_value: Any = None

    @property
    def sink(self) -> StreamSink:
        return self._sink

    # ----- appending -----
    def __iadd__(self, other: Any) -> "ProgramState":
        check_appendable(other)
        self._append(other)
        return self

    def _append(self, item: Any) -> None:
        sink = self._sink
        if isinstance(item, str):
            if item:
                sink.append_text(item)
        elif isinstance(item, Concat):
            for part in item.parts:
                self._append(part)
        elif isinstance(item, SymbolicValue):
            sink.append_value(item)
        elif isinstance(item, FormattedText):
            sink.append_formatted(item)
        elif isinstance(item, Gen):
            sink.gen(item)
        elif isinstance(item, Select):
            sink.select(item)
        elif isinstance(item, RoleBegin):
            sink.role_begin(item.role)
        elif isinstance(item, RoleEnd):
            sink.role_end(item.role)
        elif isinstance(item, Image):
            sink.image(item.path)
        elif isinstance(item, Video):
            sink.video(item.path, item.num_frames)
        else:  # pragma: no cover - check_appendable() admits only the types above
            raise TypeError(f"{user_source()}: cannot append {item!r}")

    # ----- roles and scopes -----
    def _role_common(self, role: str, expr: Any) -> Any:
        if expr is not None:
            wrapped = {"system": system, "user": user, "assistant": assistant}[role](expr)
            self += wrapped
            return wrapped
        return self._role_scope(role)

    @contextlib.contextmanager
    def _role_scope(self, role: str) -> Iterator[None]:
        self._sink.role_begin(role)
        yield
        self._sink.role_end(role)

    def system(self, expr: Any = None) -> Any:
        """Append `expr` as a system message, or (no expr) return a `with` block for one."""
        return self._role_common("system", expr)

    def user(self, expr: Any = None) -> Any:
        """Append `expr` as a user message, or (no expr) return a `with` block for one."""
        return self._role_common("user", expr)

    def assistant(self, expr: Any = None) -> Any:
        """Append `expr` as an assistant message, or (no expr) return a `with` block for one."""
        return self._role_common("assistant", expr)

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """Text appended inside the block becomes variable `name`."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"{user_source()}: var_scope name must be a non-empty str, got {name!r}")
        self._sink.var_scope_begin(name)
        yield
        self._sink.var_scope_end(name)

    # ----- variables -----
    def __getitem__(self, name: str) -> Any:
        return self.get_var(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.set_var(name, value)

    def __contains__(self, name: str) -> bool:
        return self._sink.has_var(name)

    def get_var(self, name: str) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"{user_source()}: variable names are str, got {type(name).__name__}")
        return self._sink.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{user_source()}: variable names are str, got {type(name).__name__}")
        self._sink.set_var(name, value)

    def get_meta_info(self, name: str) -> Any:
        return self._sink.get_meta_info(name)

    def text(self) -> Any:
        """The text so far (symbolic while tracing)."""
        return self._sink.text()

    def messages(self) -> Any:
        """The chat messages so far (not available while tracing; see docs/frontend.md)."""
        return self._sink.messages()

    def sync(self) -> None:
        self._sink.sync()

    def text_iter(self, var_name: Optional[str] = None) -> Iterator[str]:
        """The text (or variable `var_name`) in pieces as it is produced. A state from
        `run(stream=True)` streams; any other state yields its current value once (SGLang)."""
        return self._pieces(var_name, False)

    def _pieces(self, var_name: Optional[str], with_meta: bool) -> Iterator[Any]:
        """What text_iter / text_async_iter yield: here the value once (SGLang's non-streaming
        path, which yields no meta even when asked); a streaming state overrides it."""
        value = self.text() if var_name is None else self.get_var(var_name)
        if isinstance(value, SymbolicValue):
            raise trace_error("s.text_iter() reads a running program's text; it cannot be used while tracing")
        yield value if isinstance(value, str) else str(value)

    async def text_async_iter(self, var_name: Optional[str] = None, return_meta_data: bool = False
                              ) -> AsyncIterator[Any]:
        """`text_iter` for asyncio: each piece is awaited without blocking the event loop.
        `return_meta_data=True` (with a variable, on a streaming state): (piece, meta) pairs, the
        meta holding the piece's tokens (``completion_tokens`` so far and, for a gen that asked
        for logprobs, the piece's ``output_token_logprobs``), as SGLang yields them."""
        pieces = self._pieces(var_name, return_meta_data and var_name is not None)
        loop = asyncio.get_running_loop()
        while True:
            piece = await loop.run_in_executor(None, next, pieces, _END)
            if piece is _END:
                return
            yield piece

    # ----- streams -----
    def fork(self, size: int = 1, position_ids_offset: Optional[list[int]] = None) -> "ProgramStateGroup":
        """`size` copies of this state that continue independently; join them with `.join()`."""
        if isinstance(size, SymbolicValue):
            raise trace_error(
                f"cannot use {size.describe()} as the size of s.fork() while tracing: the number of "
                "streams must be known at compile time; bind it or run the program with the eager interpreter",
                size.argument_name,
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{user_source()}: s.fork(size) needs an int >= 1, got {size!r}")
        # NOTE: SGLang's fork takes position_ids_offset and does nothing with it; so do we.
        children = self._sink.fork(size)
        return ProgramStateGroup([ProgramState(c) for c in children], self)

    @contextlib.contextmanager
    def copy(self) -> Iterator["ProgramState"]:
        """A one-child fork joined at the end of the block (SGLang's `s.copy()`)."""
        group = self.fork(1)
        yield group[0]
        group.join()

    def __repr__(self) -> str:
        return f"ProgramState({self._sink.describe()})"


class ProgramStateGroup:
    """The children of one fork, indexable and iterable; `join()` brings them back."""

    def __init__(self, states: list[ProgramState], src_state: ProgramState) -> None:
        self.states = states
        self.src_state = src_state

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __setitem__(self, i: int, value: ProgramState) -> None:
        # NOTE: `forks[i] += x` ends with forks[i] = forks[i]; anything else is a mistake.
        if value is not self.states[i]:
            raise TypeError(f"{user_source()}: cannot replace fork child {i}; append to it with forks[{i}] += ...")

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __iadd__(self, other: Any) -> "ProgramStateGroup":
        """Append to every child: the same expr, `other(i)` for a callable, or `other[i]` for a list."""
        if isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"{user_source()}: appending {len(other)} items to a fork of {len(self.states)}")
            for state, item in zip(self.states, other):
                state += item
        elif callable(other) and not isinstance(other, SymbolicValue):
            for i, state in enumerate(self.states):
                state += other(i)
        else:
            for state in self.states:
                state += other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for the children; `gather_variable` makes each new child variable a list in the
        parent, `concate_and_append` appends the children's new text to the parent."""
        if mode not in JOIN_MODES:
            raise ValueError(f"{user_source()}: join mode must be one of {JOIN_MODES}, got {mode!r}")
        self.src_state.sink.join([s.sink for s in self.states], mode)

    def __repr__(self) -> str:
        return f"ProgramStateGroup(n={len(self.states)})"

