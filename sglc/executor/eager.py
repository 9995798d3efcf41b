"""The eager interpreter: run an @sgl.function primitive by primitive on a backend.

:class:`EagerSink` implements the frontend's StreamSink with the same per-op code as the graph
executor (:class:`~sglc.executor.semantics.Semantics`). Each stream's primitives go to its own
:class:`SerialQueue`, so the user's Python keeps running while the model works, fork branches
run concurrently, and reading a value (``s["x"]``, ``s.text()``) waits for it — SGLang's
interpreter model. Programs the tracer refuses (Python code on generated text, tool calls)
run here unchanged: values read from the state are real strings.

Mistakes the tracer would report at your line (nested roles, unbalanced scopes, a bad join) are
reported the same way here, at submission, before anything runs.

Program hints (issue 28) are not sent here: an eager run sees one primitive at a time and cannot
know which later call extends a call's text, so its prompts carry no ProgramHint and no
end_program follows (the runtime treats such calls as before). Compile the program to send them.
"""
from __future__ import annotations

import contextvars
import os
import threading
import traceback
from typing import Any, Callable, Optional

from sglc.executor.errors import ExecutionError, describe
from sglc.executor.live_text import LiveText
from sglc.executor.pool import DaemonPool
from sglc.executor.results import CallRecord, ProgramResult
from sglc.executor.semantics import Semantics
from sglc.executor.serial_queue import SerialQueue
from sglc.executor.stream_state import StreamState
from sglc.frontend.errors import user_source
from sglc.frontend.primitives import Gen, Select
from sglc.frontend.sink import StreamSink
from sglc.frontend.state import ProgramState
from sglc.wire.backend import Backend

_SGLC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


#: The eager run whose program is executing in this thread: a program it calls without a state
#: (`d = other(x=...)`) runs on the same backend with the same run-level sampling.
_CURRENT_RUN: contextvars.ContextVar[Optional["EagerRun"]] = contextvars.ContextVar("sglc_eager_run", default=None)


def current_run() -> Optional["EagerRun"]:
    return _CURRENT_RUN.get()


class EagerRun:
    """What all streams of one eager program run share: backend semantics, pool, records."""

    def __init__(self, backend: Backend, sampling: Optional[dict[str, Any]] = None, max_parallel: int = 16,
                 seed: Optional[int] = None, num_api_spec_tokens: Optional[int] = None,
                 live: Optional[LiveText] = None) -> None:
        self.semantics = Semantics(backend, sampling, seed, num_api_spec_tokens)
        self.backend = backend
        self.sampling = dict(sampling or {})  # the run-level keywords, inherited by programs it calls
        #: Set for `run(stream=True)`: gens stream their text here, every change wakes readers.
        self.live = live
        self.speculation = self.semantics.speculation()  # API speculative execution state of this run
        self.pool = DaemonPool(max_parallel, name="sglc-eager")
        self.calls: list[CallRecord] = []
        self.sinks: list[EagerSink] = []
        self._lock = threading.Lock()
        self._num_streams = 0
        self._anonymous = 0

    def new_stream_id(self) -> int:
        with self._lock:
            self._num_streams += 1
            return self._num_streams - 1

    def anonymous_name(self, kind: str) -> str:
        """`_gen_N` / `_select_N`, numbered like the tracer numbers them."""
        with self._lock:
            self._anonymous += 1
            return f"_{kind}_{self._anonymous - 1}"

    def record(self, call: CallRecord) -> None:
        with self._lock:
            self.calls.append(call)

    def root(self) -> "EagerSink":
        return EagerSink(self, StreamState(stream_id=self.new_stream_id()), SerialQueue(self.pool))

    def sync_all(self) -> None:
        """Wait for every stream (joined or not); raise the first error."""
        for sink in list(self.sinks):
            sink.queue.sync()

    def close(self) -> None:
        self.pool.shutdown()


class EagerSink(StreamSink):
    """One stream of an eager run: primitives are queued in order, reads wait for them."""

    def __init__(self, run: EagerRun, state: Optional[StreamState], queue: SerialQueue, stream_id: int = 0,
                 role: Optional[str] = None) -> None:
        self.run = run
        self.state = state  # None for a fork child until its parent's fork task runs
        self.queue = queue
        self.stream_id = state.stream_id if state is not None else stream_id
        self.role = state.role if state is not None else role  # as submitted (checked at the user's line)
        self.scopes: list[str] = []
        self.joined = False
        run.sinks.append(self)

    # ----- queueing -----
    def _submit(self, op: str, label: str, fn: Callable[[StreamState], None]) -> None:
        if self.joined:
            raise ValueError(f"{user_source()}: cannot use a fork child after its fork was joined")
        source = user_source()

        def task() -> None:
            try:
                fn(self.state)  # type: ignore[arg-type]
            except ExecutionError:
                raise
            except Exception as err:
                raise ExecutionError(label, op, source, describe(err)) from err
            finally:
                if self.run.live is not None:
                    self.run.live.touch()

        self.queue.submit(task)

    def _read(self) -> StreamState:
        self.queue.sync()
        assert self.state is not None, "a synced stream has its state"
        return self.state

    # ----- appending -----
    def append_text(self, text: str) -> None:
        self._submit("constant_text", "constant_text", lambda st: self.run.semantics.append_text(st, text))

    def append_value(self, value: Any) -> None:
        self._submit("append", "append", lambda st: self.run.semantics.append_value(st, value))

    def gen(self, expr: Gen) -> None:
        name = expr.name or self.run.anonymous_name("gen")
        attrs = {"name": name, **expr.attrs}

        def do(st: StreamState) -> None:
            live = self.run.live
            if live is None:
                _, record = self.run.semantics.gen(st, attrs, name, speculation=self.run.speculation)
            else:
                _, record = self.run.semantics.gen(st, attrs, name, guard=live.committing(st.stream_id),
                                                   speculation=self.run.speculation,
                                                   on_text=live.on_text(st.stream_id, name))
            self.run.record(record)

        self._submit("gen", name, do)

    def select(self, expr: Select) -> None:
        name = expr.name or self.run.anonymous_name("select")
        attrs = {"name": name, "choices": expr.choices, "temperature": expr.temperature,
                 "choices_method": expr.choices_method}

        def do(st: StreamState) -> None:
            _, record = self.run.semantics.select(st, attrs, name)
            self.run.record(record)

        self._submit("select", name, do)

    def role_begin(self, role: str) -> None:
        if self.role is not None:
            raise ValueError(f"{user_source()}: cannot begin the {role} role inside the open {self.role} role: "
                             "roles do not nest")
        self.role = role
        self._submit("role_begin", "role_begin", lambda st: self.run.semantics.role_begin(st, role))

    def role_end(self, role: str) -> None:
        if self.role != role:
            state = "no role is open" if self.role is None else f"the open role is {self.role}"
            raise ValueError(f"{user_source()}: cannot end the {role} role: {state}")
        self.role = None
        self._submit("role_end", "role_end", lambda st: self.run.semantics.role_end(st, role))

    def image(self, path: Any) -> None:
        self._submit("image", "image", lambda st: self.run.semantics.media(st, "image", path))

    def video(self, path: Any, num_frames: int) -> None:
        self._submit("video", "video", lambda st: self.run.semantics.media(st, "video", path, num_frames))

    def var_scope_begin(self, name: str) -> None:
        self.scopes.append(name)
        self._submit("var_scope_begin", name, lambda st: self.run.semantics.var_scope_begin(st, name))

    def var_scope_end(self, name: str) -> None:
        if not self.scopes or self.scopes[-1] != name:
            raise ValueError(f'{user_source()}: cannot end var_scope "{name}": it is not the innermost open scope')
        self.scopes.pop()
        self._submit("var_scope_end", name, lambda st: self.run.semantics.var_scope_end(st, name))

    # ----- reading back -----
    def get_var(self, name: str) -> Any:
        st = self._read()
        if name not in st.variables:
            known = ", ".join(sorted(st.variables)) or "none"
            raise KeyError(f'{user_source()}: no variable "{name}" in this state (defined so far: {known})')
        return st.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        # NOTE: like the tracer's binding: readable here and in later forks, never gathered by a join.
        self._submit("set_var", name, lambda st: st.variables.__setitem__(name, value))

    def has_var(self, name: str) -> bool:
        return name in self._read().variables

    def text(self) -> str:
        return self._read().text

    def messages(self) -> list[dict[str, Any]]:
        return [dict(m) for m in self._read().messages]

    def get_meta_info(self, name: str) -> Any:
        return self._read().meta_info.get(name)  # NOTE: None when no call produced it (SGLang)

    def sync(self) -> None:
        self.queue.sync()

    # ----- streams -----
    def fork(self, n: int) -> list[StreamSink]:
        ids = [self.run.new_stream_id() for _ in range(n)]
        children = [EagerSink(self.run, None, SerialQueue(self.run.pool, held=True), i, self.role) for i in ids]
        for child in children:
            self.queue.add_dependent(child.queue)

        def do(st: StreamState) -> None:
            for child, state in zip(children, self.run.semantics.fork(st, ids)):
                child.state = state
                child.queue.release()

        self._submit("fork", "fork", do)
        return list(children)

    def join(self, children: list[StreamSink], mode: str) -> None:
        sinks = [c for c in children if isinstance(c, EagerSink)]
        if len(sinks) != len(children) or any(c.run is not self.run for c in sinks):
            raise ValueError(f"{user_source()}: join() needs the children of a fork of this state")
        if any(c.joined for c in sinks):
            raise ValueError(f"{user_source()}: this fork was joined already")
        for child in sinks:
            child.queue.sync()  # NOTE: in the user's thread, like SGLang; raises a child's error here
            child.joined = True
        states = [c.state for c in sinks]
        self._submit("join", "join", lambda st: self.run.semantics.join(st, states, mode))  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"eager stream {self.stream_id}"


def run_program(func: Callable[..., Any], args: tuple, kwargs: dict[str, Any], backend: Backend, *,
                index: int = 0, arguments: Optional[dict[str, Any]] = None, sampling: Optional[dict[str, Any]] = None,
                max_parallel: int = 16, seed: Optional[int] = None, num_api_spec_tokens: Optional[int] = None,
                live: Optional[LiveText] = None,
                on_root: Optional[Callable[[Callable[[], Optional[StreamState]]], None]] = None,
                ) -> tuple[ProgramResult, Any, Optional[BaseException]]:
    """Run `func(s, *args, **kwargs)` eagerly; returns (result, return value, the exception if any).
    `num_api_spec_tokens`: the program's API speculation setting (see api_speculative.py).
    `live` (streaming): gens stream into it, and it is finished when the run ends; `on_root`
    receives a reader of the root stream's state before the program starts (what text_iter reads)."""
    run = EagerRun(backend, sampling, max_parallel, seed, num_api_spec_tokens, live)
    root = run.root()
    if on_root is not None:
        on_root(lambda: root.state)
    state = ProgramState(root)
    ret: Any = None
    failure: Optional[BaseException] = None
    token = _CURRENT_RUN.set(run)
    try:
        ret = func(state, *args, **kwargs)
        run.sync_all()
    except Exception as err:  # NOTE: user code may raise anything; it becomes the input's error
        failure = err
        try:
            root.queue.sync()
        except Exception:
            pass
    finally:
        _CURRENT_RUN.reset(token)
        run.close()
        if live is not None:
            live.finish(failed=failure is not None)
    st = root.state or StreamState()
    result = ProgramResult(
        index=index, arguments=dict(arguments if arguments is not None else kwargs),
        variables=dict(st.variables), text=st.text, messages=[dict(m) for m in st.messages],
        calls=list(run.calls), error=None if failure is None else locate(failure), meta_info=dict(st.meta_info),
    )
    return result, ret, failure


def locate(err: BaseException) -> str:
    """One line for an error: sglc's own message, or the user's innermost file:line and the exception."""
    message = describe(err)
    if isinstance(err, ExecutionError) or _has_location(message):
        return message
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not os.path.abspath(f.filename).startswith(_SGLC_DIR)]
    if frames:
        where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}"
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return f"{where}: {type(err).__name__}: {text}" if text else f"{where}: {type(err).__name__}"
    return message


def _has_location(message: str) -> bool:
    head = message.split(": ", 1)[0]
    return head.rpartition(":")[0].endswith(".py") and head.rpartition(":")[2].isdigit()
