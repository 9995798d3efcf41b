"""The tracing sink: records one stream's primitives as IR nodes of the trace being built.

A :class:`ProgramState` hands every primitive to its sink (sink.py); this one appends nodes through
the :class:`TraceContext` and returns symbolic values for what exists only at run time. Reads of
another stream's result become VARIABLE nodes; joins gather the children's variables.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from sglc.frontend.errors import trace_error
from sglc.frontend.formatted import FormattedText
from sglc.frontend.primitives import Gen, Select
from sglc.frontend.sink import StreamSink
from sglc.frontend.symbolic import SymbolicValue
from sglc.frontend.trace_context import TraceContext
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.types import TEXT_LIKE, ValueType


#: Producers any stream reads directly (no VARIABLE node): arguments and the pure values made of
#: them, and s.text().
_DIRECT_OPS = frozenset({Op.ARGUMENT, Op.STREAM_TEXT, Op.GET_ITEM, Op.LENGTH, Op.LOOP_BEGIN, Op.LOOP_INDEX})


def _always_str(producer: Node) -> bool:
    """Whether the node's value is a str at every run (so appending it is formatting it): generated
    text, a chosen choice, captured text, formatted text; not an argument (any JSON value)."""
    while producer.op is Op.VARIABLE and producer.inputs and producer.inputs[0].op is not Op.JOIN:
        producer = producer.inputs[0]
    return producer.op in (Op.GEN, Op.SELECT, Op.VAR_SCOPE_END, Op.STREAM_TEXT, Op.FORMAT, Op.LOOP_END)


class TraceSink(StreamSink):
    """Records one stream's primitives as nodes of the trace's graph."""

    def __init__(self, ctx: TraceContext, stream: int, variables: Optional[dict[str, Any]] = None,
                 role: Optional[str] = None, fork: Optional[Node] = None, index: int = 0) -> None:
        self.ctx = ctx
        self.stream = stream
        self.variables: dict[str, Any] = dict(variables or {})
        self.defined: list[str] = []  # variables this stream produced, in order (what a join gathers)
        self.role = role
        self.scopes: list[str] = []
        self.fork_node = fork
        self.index = index
        self.joined = False
        #: The program's name once this stream, a called program's (program_call.py), has ended.
        self.finished_as: Optional[str] = None
        ctx.sinks[stream] = self

    # ----- helpers -----
    def _create(self, op: Op, inputs: Sequence[Node] = (), attrs: Optional[dict[str, Any]] = None,
                type: Optional[ValueType] = None) -> Node:
        if self.joined:
            raise trace_error(f"cannot use fork child {self.index} after its fork was joined")
        if self.finished_as is not None:
            raise trace_error(f"cannot append to the state program {self.finished_as} returned: it has finished "
                              "running; read its variables (d[\"name\"]) and append them to your own state")
        return self.ctx.create(op, self.stream, inputs, attrs, type)

    def _define(self, name: str, value: SymbolicValue) -> None:
        self.variables[name] = value
        if name not in self.defined:
            self.defined.append(name)
        for frame in self.ctx.loops:  # NOTE: what a loop_end passes out (loops.py)
            if name not in frame.defined:
                frame.defined.append(name)

    def rebind(self, name: str, value: SymbolicValue) -> None:
        """Variable `name` is now `value` (a loop's loop_end, once the loop that set it ends)."""
        self.variables[name] = value
        if name not in self.defined:
            self.defined.append(name)

    def _name(self, expr: Any, kind: str) -> str:
        if expr.name:
            return expr.name
        if self.ctx.loops:
            loop = self.ctx.loops[-1]
            raise trace_error(f"give this {kind} a name: inside the loop over {loop.what} at {loop.source} an unnamed "
                              f"{kind} would be _{kind}_0, _{kind}_1, ... once per item, which one compiled body cannot name")
        return self.ctx.anonymous_name(kind)

    def input_of(self, value: SymbolicValue) -> Node:
        """The node this stream reads `value` from (a VARIABLE node for another stream's result)."""
        if value.context is not self.ctx:
            raise trace_error(f"{value.describe()} belongs to another trace; values cannot cross traces")
        producer = value.producer
        # NOTE: s.text() is the text at the point it was called: a value any stream may read
        # (a called program given the caller's text, `other(context=s.text())`), not a variable;
        # likewise the pure values of arguments (items, lengths, loop indices).
        if producer.op in _DIRECT_OPS:
            return producer
        if producer.op is Op.LOOP_END:
            return self._create(Op.VARIABLE, [producer], {"name": value.var}, type=value.type)
        if producer.op is not Op.JOIN and producer.stream == self.stream:
            return producer
        return self._create(Op.VARIABLE, [producer], {"name": value.var}, type=value.type)

    def _text_input(self, value: SymbolicValue, what: str) -> Node:
        if value.type not in TEXT_LIKE:
            hint = ("read one child's value with forks[i][name] instead" if value.producer.op is Op.JOIN
                    else "only text-like values (str, int, float, bool) can be appended")
            raise trace_error(f"cannot use {value.describe()} (a {value.type.value}) {what}: {hint}")
        return self.input_of(value)

    # ----- appending -----
    def append_text(self, text: str) -> None:
        self._create(Op.CONSTANT_TEXT, attrs={"text": text})

    def append_value(self, value: Any) -> None:
        self._create(Op.APPEND, [self._text_input(value, "as prompt text")])

    def append_formatted(self, text: FormattedText) -> None:
        """Constant parts as CONSTANT_TEXT; a piece that is a run-time string as it is (APPEND);
        any other piece (an argument, a conversion, a spec) through a FORMAT node, whose text is
        Python's formatting of the value."""
        for part in text.parts:
            if isinstance(part, str):
                self.append_text(part)
            elif part.plain and isinstance(part.value, SymbolicValue) and _always_str(part.value.producer):
                self.append_value(part.value)
            else:
                self._create(Op.APPEND, [self.format_node(FormattedText((part,)))])

    def format_node(self, text: FormattedText) -> Node:
        """One FORMAT node whose output is `text` at run time (its references become inputs)."""
        inputs: list[Node] = []
        pieces: list[Any] = []
        for part in text.parts:
            if isinstance(part, str):
                pieces.append(part)
                continue
            value = part.value
            node = self.format_node(value) if isinstance(value, FormattedText) else self.input_of(value)
            if node in inputs:
                pieces.append(part.attrs(inputs.index(node)))
            else:
                inputs.append(node)
                pieces.append(part.attrs(len(inputs) - 1))
        return self._create(Op.FORMAT, inputs, {"pieces": pieces})

    def gen(self, expr: Gen) -> None:
        name = self._name(expr, "gen")
        node = self._create(Op.GEN, attrs={"name": name, **expr.attrs}, type=expr.type)
        label = f'gen("{name}")' if expr.name else "an unnamed gen"
        self._define(name, SymbolicValue(self.ctx, node, name, expr.type, f"the result of {label}"))

    def select(self, expr: Select) -> None:
        name = self._name(expr, "select")
        attrs = {"name": name, "temperature": expr.temperature, "choices_method": expr.choices_method}
        if isinstance(expr.choices, SymbolicValue):  # choices known only at run time: an input
            choices = expr.choices
            if choices.type not in (ValueType.LIST, ValueType.ANY):
                raise trace_error(f"cannot use {choices.describe()} (a {choices.type.value}) as select choices: "
                                  "they must be a list of strings")
            node = self._create(Op.SELECT, [self.input_of(choices)], attrs=attrs)
        else:
            node = self._create(Op.SELECT, attrs={**attrs, "choices": expr.choices})
        label = f'select("{name}")' if expr.name else "an unnamed select"
        self._define(name, SymbolicValue(self.ctx, node, name, ValueType.STR, f"the result of {label}"))

    def role_begin(self, role: str) -> None:
        if self.role is not None:
            raise trace_error(f"cannot begin the {role} role inside the open {self.role} role: roles do not nest")
        self._create(Op.ROLE_BEGIN, attrs={"role": role})
        self.role = role

    def role_end(self, role: str) -> None:
        if self.role != role:
            state = "no role is open" if self.role is None else f"the open role is {self.role}"
            raise trace_error(f"cannot end the {role} role: {state}")
        self._create(Op.ROLE_END, attrs={"role": role})
        self.role = None

    def image(self, path: Any) -> None:
        if isinstance(path, FormattedText):
            self._create(Op.IMAGE, [self.format_node(path)])
        elif isinstance(path, SymbolicValue):
            self._create(Op.IMAGE, [self._text_input(path, "as an image path")])
        else:
            self._create(Op.IMAGE, attrs={"path": path})

    def video(self, path: Any, num_frames: int) -> None:
        if isinstance(path, FormattedText):
            self._create(Op.VIDEO, [self.format_node(path)], {"num_frames": num_frames})
        elif isinstance(path, SymbolicValue):
            self._create(Op.VIDEO, [self._text_input(path, "as a video path")], {"num_frames": num_frames})
        else:
            self._create(Op.VIDEO, attrs={"path": path, "num_frames": num_frames})

    def var_scope_begin(self, name: str) -> None:
        self._create(Op.VAR_SCOPE_BEGIN, attrs={"name": name})
        self.scopes.append(name)

    def var_scope_end(self, name: str) -> None:
        if not self.scopes or self.scopes[-1] != name:
            raise trace_error(f'cannot end var_scope "{name}": it is not the innermost open scope of this state')
        self.scopes.pop()
        node = self._create(Op.VAR_SCOPE_END, attrs={"name": name})
        self._define(name, SymbolicValue(self.ctx, node, name, ValueType.STR, f'the var_scope "{name}"'))

    # ----- reading back -----
    def get_var(self, name: str) -> Any:
        if name not in self.variables:
            known = ", ".join(sorted(self.variables)) or "none"
            raise trace_error(f'no variable "{name}" in this state (defined so far: {known})')
        return self.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        # NOTE: a trace-time binding only; it creates no node and a join does not gather it.
        self.variables[name] = value

    def has_var(self, name: str) -> bool:
        return name in self.variables

    def text(self) -> Any:
        node = self._create(Op.STREAM_TEXT)
        return SymbolicValue(self.ctx, node, None, ValueType.STR, "s.text()")

    def messages(self) -> Any:
        if self.ctx.break_handler is not None:
            return self.ctx.break_handler.messages(self)
        err = trace_error(
            "cannot call s.messages() while tracing: messages hold generated text, which exists only when "
            "the program runs; call messages() on the state that run() returns, or pass text on with "
            "s.text() / s.var_scope(name); in Python, prog.compile() compiles around it (a graph break)")
        err.breakable = True
        raise err

    def get_meta_info(self, name: str) -> Any:
        if self.ctx.break_handler is not None:
            return self.ctx.break_handler.meta_info(self, name)
        err = trace_error(f'cannot read the meta info of "{name}" while tracing: it exists only after a run; '
                          "in Python, prog.compile() compiles around it (a graph break)")
        err.breakable = True
        raise err

    # ----- streams -----
    def fork(self, n: int) -> list[StreamSink]:
        fork = self._create(Op.FORK, attrs={"n": n})
        self.ctx.open_forks.append(fork)
        children = []
        for i in range(n):
            stream = self.ctx.graph.new_stream()
            self.ctx.create(Op.GET_FORK_ITEM, stream, [fork], {"index": i})
            children.append(TraceSink(self.ctx, stream, self.variables, self.role, fork, i))
        return children

    def join(self, children: list[StreamSink], mode: str) -> None:
        sinks = [c for c in children if isinstance(c, TraceSink)]
        fork = sinks[0].fork_node if sinks else None
        if (fork is None or len(sinks) != len(children) or any(c.fork_node is not fork for c in sinks)
                or fork.stream != self.stream or sorted(c.index for c in sinks) != list(range(fork.attrs["n"]))):  # type: ignore[arg-type]
            raise trace_error("join() needs all children of one fork of this state")
        if any(c.joined for c in sinks):
            raise trace_error("this fork was joined already")
        sinks.sort(key=lambda c: c.index)
        gathered: list[str] = []
        if mode == "gather_variable":
            for child in sinks:
                gathered += [n for n in child.defined if n not in self.variables and n not in gathered]
        inputs = [fork] + [self.ctx.last_in_stream[c.stream] for c in sinks]
        join = self._create(Op.JOIN, inputs, {"mode": mode, "variables": gathered})
        if fork in self.ctx.open_forks:
            self.ctx.open_forks.remove(fork)
        for child in sinks:
            child.joined = True
        for name in gathered:
            self._define(name, SymbolicValue(self.ctx, join, name, ValueType.LIST, f'the list "{name}" gathered by join()'))

    def describe(self) -> str:
        return f"tracing stream {self.stream}"
