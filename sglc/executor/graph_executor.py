"""The graph executor: runs a compiled Graph for one input, streams and branches concurrently.

Scheduling (DESIGN §5): every node waits only on its inputs, its stream predecessor (the
previous node of its stream in graph order; arguments sit outside stream order) and, if it is
guarded, its BRANCH. A node whose dependencies are done is *ready*: text ops run at once, model
calls (GEN, SELECT, CACHE_PREFIX) go to a thread pool, at most `max_parallel` at a time per
program, earliest node first. So independent fork branches (and batch items, see batch.py)
run concurrently, and no node waits on an unrelated stream.

Skipping: a guarded node whose BRANCH took another case is skipped, as is every node with a
skipped input and every node of a stream that was never created (its fork was skipped).

Per-op behaviour lives in :class:`~sglc.executor.semantics.Semantics` (shared with eager
execution); this module only decides *when* each node runs. Methods are dispatched by op name
(``_op_<op>``), fx-Interpreter style. A failing node fails the run with
``while executing %node (op) at file.py:line: reason``.
"""
from __future__ import annotations

import contextlib
import heapq
import threading
from typing import Any, Callable, ContextManager, Iterator, Optional

from sglc.executor.continuation import known_continuation
from sglc.executor.errors import ExecutionError, wrap
from sglc.executor.execution_plan import CALL_OPS, ExecutionPlan, is_batch_hint
from sglc.executor.live_text import LiveText
from sglc.executor.pool import DaemonPool
from sglc.executor.program_hints import end_program, new_program_id
from sglc.executor.results import RETURNS_STATE, CallRecord, ProgramResult
from sglc.executor.semantics import Semantics
from sglc.executor.stream_state import StreamState
from sglc.ir import format_pieces, output_value
from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.wire.backend import Backend
from sglc.wire.program_hint import NEVER, ProgramHint

from .defaults import DEFAULT_MAX_PARALLEL



class GraphExecutor:
    """Runs one graph on one backend; `run` may be called from many threads at once.

    `program_hints` (issue 28, program_hints.py): each run gets a fresh program id, every call's
    prompt carries ``ProgramHint(program_id, next_use)`` and the run ends with
    ``backend.end_program(program_id)``; False sends no hint and no end. `continues`: this graph
    is a segment of a program with graph breaks that a later segment continues (graph_breaks.py).
    """

    def __init__(self, graph: Graph, backend: Backend, *, max_parallel: int = DEFAULT_MAX_PARALLEL,
                 sampling: Optional[dict[str, Any]] = None, pool: Optional[DaemonPool] = None,
                 timeout: Optional[float] = None, seed: Optional[int] = None, program_hints: bool = True,
                 continues: bool = False) -> None:
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        self.plan = ExecutionPlan(graph, continues)
        self.backend = backend
        self.program_hints = bool(program_hints)
        # NOTE: @sgl.function(num_api_spec_tokens=N) travels in graph.meta; each run gets its own state
        spec = graph.meta.get("num_api_spec_tokens")
        self.semantics = Semantics(backend, sampling, seed, num_api_spec_tokens=int(spec) if spec else None)
        self.max_parallel = max_parallel
        self.timeout = timeout
        self._own_pool = pool is None
        self.pool = pool if pool is not None else DaemonPool(max_parallel)

    @property
    def graph(self) -> Graph:
        return self.plan.graph

    def run_segment(self, arguments: dict[str, Any], root: StreamState,
                    program_id: Optional[str] = None) -> tuple[ProgramResult, dict[str, Any]]:
        """Run the graph continuing `root` (stream 0's state, changed in place): one segment of a
        program with graph breaks (graph_breaks.py). Also returns each node's value by name.
        `program_id`: the program's (its segments share it; the caller ends it), None: no hints."""
        run = _Run(self, dict(arguments), 0, None, root, program_id if self.program_hints else None)
        result = run.execute()
        with run.lock:
            return result, {self.plan.nodes[i].name: v for i, v in run.values.items()}

    def run(self, arguments: dict[str, Any], index: int = 0, live: Optional[LiveText] = None,
            on_root: Optional[Callable[[Callable[[], Optional[StreamState]]], None]] = None) -> ProgramResult:
        """Execute the graph for one input; never raises for execution problems (see .error).

        `live` (streaming, `run(stream=True)`): gens stream their text into it; `on_root` gets a
        reader of stream 0's state before anything runs. NOTE: batch-scoped CACHE_PREFIX nodes
        are no-ops here: the batch runner sends that hint once before its items start (see
        batch.py); a single run has nothing to share it with. With program hints the run ends
        with ``backend.end_program`` once (success, failure or timeout), if it made any call.
        """
        program_id = new_program_id(self.graph.name) if self.program_hints else None
        run = _Run(self, dict(arguments), index, live, program_id=program_id)
        if live is not None:
            live.root_streams = self.plan.root_streams
        if on_root is not None:
            on_root(lambda: run.streams[0])
        result: Optional[ProgramResult] = None
        try:
            result = run.execute()
            return result
        finally:
            if program_id is not None and run.hinted:
                end_program(self.backend, program_id)
            if live is not None:
                live.finish(failed=result is None or result.error is not None)

    def constant_prefix(self) -> Optional[StreamState]:
        """Stream 0's text before its batch hint (identical for every input), or None."""
        hints = [n for n in self.plan.batch_hints() if n.stream == 0 and n.guard is None]
        if not hints:
            return None
        st = StreamState()
        for node in self.plan.nodes:
            if node is hints[0]:
                return st
            if node.stream != 0 or node.op is Op.ARGUMENT:
                continue
            if node.op is Op.CONSTANT_TEXT:
                self.semantics.append_text(st, node.attrs["text"])  # type: ignore[arg-type]
            elif node.op is Op.ROLE_BEGIN:
                self.semantics.role_begin(st, node.attrs["role"])  # type: ignore[arg-type]
            elif node.op is Op.ROLE_END:
                self.semantics.role_end(st, node.attrs["role"])  # type: ignore[arg-type]
            else:
                return None  # not a constant prefix after all: no batch hint
        return None

    def close(self) -> None:
        if self._own_pool:
            self.pool.shutdown()


class _Run:
    """The state of one execution: node values, streams, readiness, in-flight calls."""

    def __init__(self, executor: GraphExecutor, arguments: dict[str, Any], index: int,
                 live: Optional[LiveText] = None, root: Optional[StreamState] = None,
                 program_id: Optional[str] = None) -> None:
        self.ex = executor
        self.program_id = program_id  # None: no program hints
        self.hinted = False  # a call with a hint was sent
        self.live = live
        self.plan = executor.plan
        self.sem = executor.semantics
        self.speculation = self.sem.speculation()  # API speculative execution state of this run
        self.arguments = arguments
        self.index = index
        self.values: dict[int, Any] = {}
        self.skipped: set[int] = set()
        self.remaining = list(self.plan.num_deps)
        self.num_done = 0
        self.streams: dict[int, StreamState] = {0: StreamState() if root is None else root}
        self.calls: list[tuple[int, CallRecord]] = []
        self.ready_calls: list[int] = []
        self.in_flight: set[int] = set()
        self.error: Optional[str] = None
        self.ret_value: Any = None
        self.loop_items: dict[int, list[Any]] = {}  # loop_begin index -> the items it iterates
        self.loop_pos: dict[int, int] = {}  # loop_begin index -> the current iteration
        self.empty_loops: set[int] = set()  # loops iterating nothing (their bodies are skipped)
        self.lock = threading.Lock()
        self.finished = threading.Event()

    # ----- driving -----
    def execute(self) -> ProgramResult:
        unknown = [k for k in self.arguments if k not in self.plan.arg_names]
        fixed = [k for k in unknown if k in (self.plan.graph.meta.get("fixed_args") or [])]
        if fixed:
            return self._result(f"argument(s) {', '.join(sorted(fixed))} of {self.plan.graph.name} were fixed at compile "
                                "time (bound when it was traced: compile(...=...) or sglc compile --bind); their values "
                                "are part of the graph and cannot be passed at run time (compile again to change them)")
        if unknown:
            takes = ", ".join(self.plan.arg_names) or "no arguments"
            return self._result(f"unknown argument(s) {', '.join(sorted(unknown))}; the program takes {takes}")
        with self.lock:
            if not self.plan.nodes:
                self.finished.set()
            self._advance([i for i, n in enumerate(self.remaining) if n == 0])
        if not self.finished.wait(self.ex.timeout):
            with self.lock:
                if self.error is None:
                    self._fail_timeout()
        with self.lock:  # NOTE: an abandoned call may still finish; it sees self.error and touches nothing
            return self._result(self.error)

    def _fail_timeout(self) -> None:
        waiting = sorted(self.in_flight) or sorted(self.ready_calls)
        reason = f"no result within the program timeout of {self.ex.timeout:g} s"
        if waiting:
            node = self.plan.nodes[waiting[0]]
            self.error = str(ExecutionError(node.name, node.op.value, node.source, reason))
        else:
            self.error = reason
        self.finished.set()

    def _result(self, error: Optional[str]) -> ProgramResult:
        main = self.streams[0]
        return ProgramResult(
            index=self.index,
            arguments=self.arguments,
            variables=dict(main.variables),
            text=main.text,
            messages=[dict(m) for m in main.messages],
            calls=[record for _, record in sorted(self.calls, key=lambda c: c[0])],
            error=error,
            meta_info=dict(main.meta_info),
            ret_value=self.ret_value,
        )

    def _advance(self, ready: list[int]) -> None:
        """Run ready nodes (lock held): text ops inline, calls queued; then dispatch calls."""
        heap = list(ready)
        heapq.heapify(heap)
        while heap and self.error is None:
            i = heapq.heappop(heap)
            node = self.plan.nodes[i]
            if i in self.plan.loop_of_end and i not in self.skipped and self._next_iteration(i, heap):
                continue  # NOTE: the body runs again; this loop_end waits for its last node once more
            if self._should_skip(i, node):
                self.skipped.add(i)
            elif node.op in CALL_OPS and not self._is_noop_hint(node):
                heapq.heappush(self.ready_calls, i)
                continue
            else:
                try:
                    self.values[i] = getattr(self, f"_op_{node.op.value}")(node)
                except Exception as err:  # NOTE: any failure of a node fails the program, named
                    self._fail(wrap(err, node.name, node.op.value, node.source))
                    return
            for j in self._complete(i):
                heapq.heappush(heap, j)
        if self.live is not None:
            self.live.touch()  # NOTE: lock order: the run's lock, then the live text's
        self._dispatch()

    def _next_iteration(self, end: int, heap: list[int]) -> bool:
        """At a loop_end whose body has finished: start the next item's iteration (True), or let
        the loop end (False). Lock held."""
        b = self.plan.loop_of_end[end]
        if b in self.skipped or b in self.empty_loops or self.loop_pos[b] + 1 >= len(self.loop_items[b]):
            return False
        body = self.plan.loop_body[b]
        self.loop_pos[b] += 1
        for j in body + [end]:
            self.remaining[j] = self.plan.inner_deps[b, j]
            self.skipped.discard(j)
        self.num_done -= len(body) + 1  # NOTE: the body and the loop_begin complete again
        self.values[b] = self.loop_items[b][self.loop_pos[b]]
        for j in self._complete(b):
            heapq.heappush(heap, j)
        return True

    def _complete(self, i: int) -> list[int]:
        self.num_done += 1
        newly = []
        for j in self.plan.dependents[i]:
            self.remaining[j] -= 1
            if self.remaining[j] == 0:
                newly.append(j)
        if self.num_done == len(self.plan.nodes):
            self.finished.set()
        return newly

    def _dispatch(self) -> None:
        while self.ready_calls and len(self.in_flight) < self.ex.max_parallel and self.error is None:
            i = heapq.heappop(self.ready_calls)
            self.in_flight.add(i)
            hint = self._hint(i)
            self.ex.pool.submit(lambda i=i, hint=hint: self._call(i, hint))

    def _hint(self, i: int) -> Optional[ProgramHint]:
        """Call `i`'s program hint, now (lock held: the loops' positions decide wrap-arounds)."""
        if self.program_id is None:
            return None
        next_use = self.plan.next_uses[i].value(self._has_next_iteration)
        self.hinted = True
        continuation = ""
        if next_use != NEVER and i in self.plan.continuations:
            continuation = known_continuation(self.plan.nodes, self.plan.continuations[i], self._argument_value,
                                              self._role_text)
        return ProgramHint(self.program_id, next_use, continuation=continuation)

    def _argument_value(self, node: Node) -> Any:
        """An argument's value in this run (None if not bound yet)."""
        return self.values.get(self.plan.index[node])

    def _role_text(self, kind: str, role: str) -> str:
        template = self.sem.chat_template
        if template is None:
            return ""
        return (template.role_prefix if kind == "begin" else template.role_suffix).get(role, "")

    def _has_next_iteration(self, begin: int) -> bool:
        items = self.loop_items.get(begin)
        return items is None or self.loop_pos.get(begin, 0) + 1 < len(items)

    def _call(self, i: int, hint: Optional[ProgramHint] = None) -> None:
        node = self.plan.nodes[i]
        st = self.streams[node.stream]
        value: Any = None
        record: Optional[CallRecord] = None
        failure: Optional[ExecutionError] = None
        try:
            if node.op is Op.GEN and self.live is not None:
                committing = _both(self.lock, self.live.committing(st.stream_id))
                value, record = self.sem.gen(st, node.attrs, node.name, guard=committing, speculation=self.speculation,
                                             on_text=self.live.on_text(st.stream_id, node.attrs["name"]), hint=hint)
            elif node.op is Op.GEN:
                value, record = self.sem.gen(st, node.attrs, node.name, guard=self.lock,
                                             speculation=self.speculation, hint=hint)
            elif node.op is Op.SELECT:
                attrs = node.attrs if "choices" in node.attrs else {**node.attrs, "choices": self._input(node)}
                value, record = self.sem.select(st, attrs, node.name, guard=self.lock, hint=hint)
            else:
                record = self.sem.cache_prefix(st, node.name, hint=hint)
        except Exception as err:
            failure = wrap(err, node.name, node.op.value, node.source)
        with self.lock:
            self.in_flight.discard(i)
            if self.error is not None:
                return
            if failure is not None:
                self._fail(failure)
                return
            self.values[i] = value
            if record is not None:
                self.calls.append((i, record))
            self._advance(self._complete(i))

    def _fail(self, err: ExecutionError) -> None:
        if self.error is None:
            self.error = str(err)
        self.finished.set()

    # ----- skipping -----
    def _should_skip(self, i: int, node: Node) -> bool:
        if any(self.plan.index[inp] in self.skipped for inp in node.inputs):
            return True
        if node.guard is not None:
            b = self.plan.index[node.guard.branch]
            if b in self.skipped or self.values.get(b) != node.guard.case:
                return True
        if any(b in self.empty_loops or b in self.skipped for b in self.plan.enclosing.get(i, ())):
            return True
        return node.op is not Op.GET_FORK_ITEM and node.stream not in self.streams

    def _is_noop_hint(self, node: Node) -> bool:
        return is_batch_hint(node)

    # ----- ops (dispatched by name) -----
    def _input(self, node: Node, k: int = 0) -> Any:
        return self.values[self.plan.index[node.inputs[k]]]

    def _st(self, node: Node) -> StreamState:
        return self.streams[node.stream]

    def _op_argument(self, node: Node) -> Any:
        name = node.attrs["name"]
        if name in self.arguments:
            return self.arguments[name]
        if "default" in node.attrs:
            return node.attrs["default"]
        raise ValueError(f"missing argument {name!r} (the input gives: {', '.join(sorted(self.arguments)) or 'nothing'})")

    def _op_constant_text(self, node: Node) -> None:
        self.sem.append_text(self._st(node), node.attrs["text"])  # type: ignore[arg-type]

    def _op_append(self, node: Node) -> None:
        self.sem.append_value(self._st(node), self._input(node))

    def _op_role_begin(self, node: Node) -> None:
        self.sem.role_begin(self._st(node), node.attrs["role"])  # type: ignore[arg-type]

    def _op_role_end(self, node: Node) -> None:
        self.sem.role_end(self._st(node), node.attrs["role"])  # type: ignore[arg-type]

    def _op_image(self, node: Node) -> None:
        path = self._input(node) if node.inputs else node.attrs.get("path")
        self.sem.media(self._st(node), "image", path)

    def _op_video(self, node: Node) -> None:
        path = self._input(node) if node.inputs else node.attrs.get("path")
        self.sem.media(self._st(node), "video", path, node.attrs.get("num_frames"))  # type: ignore[arg-type]

    def _op_variable(self, node: Node) -> Any:
        producer = node.inputs[0]
        value = self._input(node)
        if producer.op is Op.LOOP_END:
            name = node.attrs["name"]
            if name not in value:
                raise KeyError(f"variable {name!r} was never set: the loop %{producer.inputs[0].name} ran no iteration "
                               "and nothing set it before")
            return value[name]
        if producer.op is Op.JOIN:
            name = node.attrs["name"]
            if not isinstance(value, dict) or name not in value:
                raise KeyError(f"%{producer.name} gathered no variable {name!r}")
            return value[name]
        return value

    def _op_format(self, node: Node) -> str:
        return format_pieces.render(node.attrs["pieces"], [self._input(node, k) for k in range(len(node.inputs))])

    def _op_get_item(self, node: Node) -> Any:
        key = node.attrs["key"] if "key" in node.attrs else self._input(node, 1)
        return self._input(node)[key]

    def _op_length(self, node: Node) -> int:
        return len(self._input(node))

    def _op_loop_begin(self, node: Node) -> Any:
        i = self.plan.index[node]
        value = self._input(node)
        items = list(range(value)) if node.attrs.get("range") else list(value)
        if not items and node.attrs.get("empty_error"):
            raise ValueError(node.attrs["empty_error"])
        self.loop_items[i], self.loop_pos[i] = items, 0
        if items:
            self.empty_loops.discard(i)
            return items[0]
        self.empty_loops.add(i)
        return None

    def _op_loop_index(self, node: Node) -> int:
        return self.loop_pos[self.plan.index[node.inputs[0]]] + int(node.attrs.get("start") or 0)

    def _op_loop_end(self, node: Node) -> dict[str, Any]:
        st = self._st(node)
        return {name: st.variables[name] for name in node.attrs.get("variables") or [] if name in st.variables}

    def _op_stream_text(self, node: Node) -> str:
        return self._st(node).text

    def _op_var_scope_begin(self, node: Node) -> None:
        self.sem.var_scope_begin(self._st(node), node.attrs["name"])  # type: ignore[arg-type]

    def _op_var_scope_end(self, node: Node) -> str:
        return self.sem.var_scope_end(self._st(node), node.attrs["name"])  # type: ignore[arg-type]

    def _op_fork(self, node: Node) -> StreamState:
        if node.attrs.get("program") is not None:  # a called program: its stream starts empty
            return StreamState(stream_id=node.stream)
        # NOTE: the snapshot is taken now; later appends to the parent do not reach the children.
        return self._st(node).fork_copy(node.stream)

    def _op_get_fork_item(self, node: Node) -> None:
        snapshot: StreamState = self._input(node)
        self.streams[node.stream] = self.sem.fork(snapshot, [node.stream])[0]

    def _op_join(self, node: Node) -> dict[str, list[Any]]:
        fork = node.inputs[0]
        children = [self.streams[child.stream] for child in node.inputs[1:]]
        return self.sem.join(self._st(node), children, node.attrs["mode"],  # type: ignore[arg-type]
                             node.attrs.get("variables") or [], passthrough=bool(fork.attrs.get("hoisted")))

    def _op_branch(self, node: Node) -> int:
        chosen = self._input(node)
        cases = list(node.attrs["cases"])  # type: ignore[arg-type]
        if chosen not in cases:
            raise ValueError(f"select result {chosen!r} is none of the branch cases {cases}")
        return cases.index(chosen)

    def _op_cache_prefix(self, node: Node) -> None:
        return None  # a batch hint already sent by the batch (see _is_noop_hint)

    def _op_output(self, node: Node) -> None:
        inputs = [self._input(node, k) for k in range(len(node.inputs))]
        self.ret_value = output_value.build(node.attrs["value"], inputs, lambda: RETURNS_STATE)


@contextlib.contextmanager
def _both(first: ContextManager[Any], second: ContextManager[Any]) -> Iterator[None]:
    """Hold `first`, then `second` (a streaming gen commits under the run's lock and the live text's)."""
    with first, second:
        yield
