"""Symbolic values: what a traced program sees instead of text that exists only at run time.

A :class:`SymbolicValue` stands for the output of one IR node (an argument, a gen, a select, a
var_scope, s.text(), or a list gathered by a join). It can be appended to a state and
concatenated with `+`. Everything that would need its actual value -- bool(), len(), iteration,
int()/float(), str(), f-strings, indexing, hashing, string methods, ordering -- raises a
one-line :class:`TraceError` that names the construct, the value and the user's file:line.

The one exception: a select result compared (==, !=, `in`) with one of its choices. The tracer
then fixes the select's outcome for this trace, returns a real bool, and traces the program once
per choice (see branching.py).
"""
from __future__ import annotations

import operator
from typing import Any, Optional

from sglc.frontend.errors import trace_error
from sglc.frontend.expr import Expr
from sglc.frontend.trace_context import TraceContext
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.ir.types import ValueType

_EAGER_HINT = "or run the program with the eager interpreter"
_BREAK_HINT = "; in Python, prog.compile() compiles around it (a graph break)"
#: Producers of values an argument determines (known when the program starts, not generated).
_ARGUMENT_OPS = frozenset({Op.ARGUMENT, Op.GET_ITEM, Op.LENGTH, Op.LOOP_BEGIN, Op.LOOP_INDEX})
#: Values a loop may iterate and index: a list known when the program starts (loops.py).
_LIST_OPS = frozenset({Op.ARGUMENT, Op.GET_ITEM, Op.LOOP_BEGIN})


class SymbolicValue(Expr):
    """The output of `producer` (a node of the graph being traced), readable as variable `var`.

    An :class:`Expr`: it can be appended, and `+` builds a Concat (inherited).
    """

    __slots__ = ("_producer", "_var", "_type", "_desc", "_ctx")

    def __init__(self, ctx: TraceContext, producer: Node, var: Optional[str], type: ValueType, desc: str) -> None:
        self._ctx = ctx
        self._producer = producer
        self._var = var
        self._type = type
        self._desc = desc

    # ----- for the tracer -----
    @property
    def producer(self) -> Node:
        return self._producer

    @property
    def var(self) -> Optional[str]:
        return self._var

    @property
    def type(self) -> ValueType:
        return self._type

    @property
    def context(self) -> TraceContext:
        return self._ctx

    def describe(self) -> str:
        """E.g. 'the result of gen("x")' or 'argument "question"'."""
        return self._desc

    @property
    def argument_name(self) -> Optional[str]:
        """The program parameter this value is, or None (a generated value)."""
        return self._producer.attrs["name"] if self._producer.op is Op.ARGUMENT else None  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<symbolic {self._desc}>"

    # ----- what works: concatenation (Expr's `+`) and select comparisons -----
    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        if self._ctx.break_handler is not None:  # NOTE: a run with graph breaks compares the values
            return self._need("with ==") == (other._need("with ==") if isinstance(other, SymbolicValue) else other)
        return self._compare_select(other, "==")

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        if self._ctx.break_handler is not None:
            return self._need("with !=") != (other._need("with !=") if isinstance(other, SymbolicValue) else other)
        return not self._compare_select(other, "!=")

    def _compare_select(self, other: object, operator: str) -> bool:
        producer = self._producer
        if producer.op is not Op.SELECT:
            err = trace_error(
                f"cannot compare {self._desc} with {operator} while tracing: only a select result can be "
                f"compared, with one of its choices; use select(...) to branch on model output, {_EAGER_HINT}"
                + (_BREAK_HINT if self.generated else ""), self.argument_name)
            err.breakable = self.generated
            raise err
        if "choices" not in producer.attrs:  # NOTE: choices from an input: one trace per choice is impossible
            source = producer.inputs[0]
            argument = source.attrs.get("name") if source.op is Op.ARGUMENT else None
            raise trace_error(
                f"cannot compare {self._desc} with {operator} while tracing: its choices come from "
                f"{'argument ' + repr(argument) if argument else '%' + source.name} at run time, and a branch needs "
                "them at compile time; write the choices as a list in the program, bind the argument "
                f"(sglc compile --bind {argument or 'NAME'}=JSON), {_EAGER_HINT}", argument)
        choices = producer.attrs["choices"]
        if isinstance(other, SymbolicValue):
            raise trace_error(
                f"cannot compare {self._desc} with {other.describe()} while tracing: compare it with one "
                f"of its choices {choices!r}"
            )
        if not isinstance(other, str) or other not in choices:
            raise trace_error(
                f"cannot compare {self._desc} with {other!r}: it is not one of its choices {choices!r}"
            )
        case = self._ctx.decide(producer)
        return choices[case] == other

    # ----- what fails, loudly (or, in a run with graph breaks, gets the run-time value) -----
    def _need(self, construct: str) -> Any:
        """The run-time value, for a construct that needs it: the value itself in a run with graph
        breaks (prog.compile(); sglc/executor/graph_breaks.py), a TraceError otherwise."""
        handler = self._ctx.break_handler
        if handler is not None:
            return handler.resolve(self, construct)
        raise self._fail(construct)

    def _fail(self, construct: str) -> "Exception":
        err = trace_error(f"cannot use {self._desc} {construct} while tracing: {self._hint()}", self.argument_name)
        err.breakable = self.generated
        return err

    @property
    def generated(self) -> bool:
        """Whether the value exists only once the model has run (not an argument or part of one)."""
        return self._producer.op not in _ARGUMENT_OPS

    def hint(self) -> str:
        """What to do instead of a construct that needs this value at compile time."""
        return self._hint()

    def _hint(self) -> str:
        op = self._producer.op
        if op is Op.ARGUMENT:
            name = self._producer.attrs["name"]
            return f"its value is bound only when the program runs; bind it (fn.trace({name}=...)) {_EAGER_HINT}"
        if op in _ARGUMENT_OPS:
            return f"it is part of an argument bound only when the program runs; bind the argument {_EAGER_HINT}"
        if op is Op.SELECT:
            return f"compare it with one of its choices (==, != or in) to branch, {_EAGER_HINT}{_BREAK_HINT}"
        if op is Op.JOIN:
            return f"read each child's value with forks[i][{self._var!r}] instead, {_EAGER_HINT}{_BREAK_HINT}"
        return f"its text exists only when the program runs; branch with a select instead, {_EAGER_HINT}{_BREAK_HINT}"

    def __bool__(self) -> bool:
        return bool(self._need("as a condition (bool())"))

    def __len__(self) -> int:
        return len(self._need("in len()"))

    def __iter__(self) -> Any:
        driver = self._ctx.loop_driver
        if driver is not None and self._producer.op in _LIST_OPS and self._ctx.break_handler is None:
            return driver(self)  # NOTE: a `for` over a run-time list compiles to a loop (loops.py)
        return iter(self._need("in a for loop or unpacking (iter())"))

    def __contains__(self, item: object) -> bool:
        return item in self._need("on the right of `in`")

    def __int__(self) -> int:
        return int(self._need("in int()"))

    def __float__(self) -> float:
        return float(self._need("in float()"))

    def __complex__(self) -> complex:
        return complex(self._need("in complex()"))

    def __index__(self) -> int:
        return operator.index(self._need("as an integer index (__index__)"))

    def __str__(self) -> str:
        if self._ctx.break_handler is not None:
            return str(self._need("in str()"))
        raise self._fail_outside("str() or % formatting")

    def __format__(self, spec: str) -> str:
        if self._ctx.break_handler is not None:
            return format(self._need("in an f-string or format()"), spec)
        raise self._fail_outside("an f-string or format()")

    def _fail_outside(self, construct: str) -> "Exception":
        # NOTE: the program's own code is rewritten so that these trace (rewrite.py); reaching
        # the dunder means code the tracer did not rewrite: a helper function, or no source
        err = trace_error(
            f"cannot use {self._desc} in {construct} here while tracing: formatting it works in the "
            "@sgl.function's own code (and functions defined inside it), not in functions it calls (build "
            f"the text there or join it with +); {self._hint()}", self.argument_name)
        err.breakable = self.generated
        return err

    def __hash__(self) -> int:
        return hash(self._need("as a dict key or set member (hash())"))

    def __getitem__(self, key: Any) -> Any:
        if self._producer.op in _LIST_OPS:
            if isinstance(key, SymbolicValue) and key._is_index():
                node = self._ctx.create_value(Op.GET_ITEM, [self._producer, key._producer])
                return SymbolicValue(self._ctx, node, None, ValueType.ANY, f"{self._desc}[{key.describe()}]")
            if isinstance(key, (int, str)) and not isinstance(key, bool):
                node = self._ctx.create_value(Op.GET_ITEM, [self._producer], {"key": key})
                return SymbolicValue(self._ctx, node, None, ValueType.ANY, f"{self._desc}[{key!r}]")
        return self._need("with [...] indexing")[key]

    # ----- a loop index: + and - an int give another index (enumerate(lst, 1), i + 1) -----
    def __add__(self, other: Any) -> Any:
        if self._is_index() and isinstance(other, int) and not isinstance(other, bool):
            return self._offset(other)
        return super().__add__(other)

    def __radd__(self, other: Any) -> Any:
        if self._is_index() and isinstance(other, int) and not isinstance(other, bool):
            return self._offset(other)
        return super().__radd__(other)

    def __sub__(self, other: Any) -> Any:
        if self._is_index() and isinstance(other, int) and not isinstance(other, bool):
            return self._offset(-other)
        return self._need("in - arithmetic") - other

    def _is_index(self) -> bool:
        producer = self._producer
        return producer.op is Op.LOOP_INDEX or (producer.op is Op.LOOP_BEGIN and bool(producer.attrs.get("range")))

    def _offset(self, delta: int) -> "SymbolicValue":
        producer = self._producer
        begin = producer.inputs[0] if producer.op is Op.LOOP_INDEX else producer
        start = int(producer.attrs.get("start") or 0) if producer.op is Op.LOOP_INDEX else 0
        node = self._ctx.create_value(Op.LOOP_INDEX, [begin], {"start": start + delta} if start + delta else {})
        return SymbolicValue(self._ctx, node, None, ValueType.INT, f"({self._desc} {'+' if delta >= 0 else '-'} {abs(delta)})")

    def __lt__(self, other: Any) -> bool:
        return self._need("in a < comparison") < other

    def __le__(self, other: Any) -> bool:
        return self._need("in a <= comparison") <= other

    def __gt__(self, other: Any) -> bool:
        return self._need("in a > comparison") > other

    def __ge__(self, other: Any) -> bool:
        return self._need("in a >= comparison") >= other

    def __mul__(self, other: Any) -> Any:
        return self._need("in * arithmetic") * other

    def __rmul__(self, other: Any) -> Any:
        return other * self._need("in * arithmetic")

    def __getattr__(self, name: str) -> Any:
        # NOTE: private/dunder probes (copy, pickle, IPython's _repr_html_) must stay AttributeErrors.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._need(f"with .{name} (string methods need the value)"), name)
