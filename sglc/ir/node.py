"""The one node class of the sglc IR."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

from sglc.ir.ops import Op
from sglc.ir.types import AttrValue, ValueType


class Guard(NamedTuple):
    """A node with a guard runs only when `branch` took case number `case`."""

    branch: "Node"
    case: int


class Node:
    """One operation of an LM program. What each op means:

    - ``argument``: attrs ``name`` (and ``default`` if the Python parameter had one). No inputs.
      Output: the value bound to that argument for a run (type ANY unless annotated).
    - ``constant_text``: attrs ``text``. Appends the literal to the node's stream.
    - ``append``: one input (a text-like value). Appends its string form to the stream.
    - ``role_begin`` / ``role_end``: attrs ``role`` (system/user/assistant). The backend turns them
      into the chat template's text for that role.
    - ``image`` / ``video``: one input or attr ``path`` (a file path or URL); ``video`` also has
      ``num_frames``. Appends the media to the stream.
    - ``gen``: attrs ``name`` (the variable) and sampling parameters (``max_new_tokens``, ``stop``,
      ``temperature``, ...), optional constraint attrs (``regex``, ``json_schema``, ``dtype``,
      ``choices``, and after lowering ``fsm``). Generates after the stream's text, appends the
      result, and outputs it (STR; a typed gen's dtype only constrains the text).
    - ``select``: attrs ``name``, ``choices`` (list of str), ``temperature``, ``choices_method``;
      or, without ``choices``, one input holding them at run time (a LIST/ANY argument).
      Scores each choice after the stream's text, appends the chosen one, outputs it.
    - ``format``: inputs: values; attrs ``pieces``: a list of constant strings and references
      ``{"input": i}`` with optional ``conversion`` (``s``/``r``/``a``), ``spec`` (a format spec),
      ``printf`` (a ``%``-spec such as ``%5.2f``) or ``join`` (a separator: input i is a list). Outputs
      the concatenation (STR): each reference is Python's ``format(convert(v), spec)``,
      ``printf % (convert(v),)`` or ``join.join(v)``, so an f-string, ``str.format`` or ``%`` over
      run-time values gives the text eager Python gives.
    - ``get_item``: one input and attr ``key`` (an int or str), or two inputs (the value, the key).
      Outputs ``value[key]`` (an item of a list argument, a field of a dict item).
    - ``length``: one input. Outputs ``len(value)`` (INT).
    - ``loop_begin``: one input (the list; with attr ``range`` True, an int n: iterate ``range(n)``);
      optional attr ``empty_error`` (the program fails for an empty list: the message). The nodes
      of its stream after it, up to its ``loop_end``, are the body: they run once per item, in
      order. Outputs the current item (ANY).
    - ``loop_index``: one input (its loop_begin), attr ``start`` (int, optional). Outputs the
      current iteration's index + start (enumerate's counter).
    - ``loop_end``: one input (its loop_begin), attr ``variables``: names the body defines. Ends
      the body; outputs those variables' values when the loop ends (the last iteration's, or
      their values before the loop when it ran zero times), read with VARIABLE nodes.
    - ``variable``: one input (the producer: a gen/select/var_scope_end, a join for gathered
      lists, or a loop_end for a variable its body set), attrs ``name``. Outputs the producer's
      value; waits for it (cross-stream edge).
    - ``stream_text``: no inputs. Outputs the stream's text at this point.
    - ``var_scope_begin`` / ``var_scope_end``: attrs ``name``. Text appended between them is
      captured; ``var_scope_end`` outputs it as the variable ``name``.
    - ``fork``: attrs ``n``. Output: a FORK handle. Each child stream starts with a copy of this
      stream's text. With attr ``program`` (n=1): a called program's stream, which starts empty
      and needs no join (its variables are read with VARIABLE nodes).
    - ``get_fork_item``: one input (the fork), attrs ``index``. The first node of the child
      stream (its ``stream`` is the child's id); output: the STREAM handle.
    - ``join``: inputs: the fork, then the last node of each child stream; attrs ``mode``
      (``gather_variable`` | ``concate_and_append``) and ``variables`` (names gathered as lists).
    - ``branch``: one input (a select node), attrs ``cases`` (the select's choices). Nodes traced
      under case i carry ``guard = Guard(branch, i)``.
    - ``cache_prefix``: no inputs. A hint: the runtime should prefill and keep the stream's text
      so far (inserted before forks and batches).
    - ``output``: in stream 0, last on its path; attrs ``value``: what the program's function
      returned (``state.ret_value``), as a template (sglc.ir.output_value): ``{"const": v}``,
      ``{"input": i}`` (the value of input i), ``{"list"|"tuple": [templates]}``,
      ``{"dict": [[key, template], ...]}`` or ``{"state": True}`` (the program's own state).

    Every node belongs to one stream (``stream``, 0 is the program's own). Nodes of one stream run
    in graph order; ``meta["source"]`` is the user's ``file:line`` that created the node.
    """

    __slots__ = ("graph", "name", "op", "inputs", "attrs", "type", "stream", "guard", "meta", "users")

    def __init__(
        self,
        graph: Any,
        name: str,
        op: Op,
        inputs: tuple["Node", ...],
        attrs: dict[str, AttrValue],
        type: ValueType,
        stream: int,
        guard: Optional[Guard],
        meta: dict[str, str],
    ) -> None:
        #: The Graph that owns this node (None once erased). NOTE: typed Any, not Graph: a Graph
        #: makes nodes, so graph.py imports node.py and never the reverse; a node only compares
        #: its graph by identity.
        self.graph = graph
        self.name = name
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.type = type
        self.stream = stream
        self.guard = guard
        self.meta = meta
        # NOTE: maintained by Graph (create/replace/erase); insertion-ordered for determinism.
        self.users: dict[Node, None] = {}

    @property
    def source(self) -> str:
        """The user's file:line that created this node, or '' if unknown."""
        return self.meta.get("source", "")

    def guard_chain(self) -> list[Guard]:
        """The guards this node runs under, outermost first: ..., its branch's guard, its guard.

        The node runs only on paths where every guard of the chain holds; [] for an unguarded node.
        """
        chain: list[Guard] = []
        guard = self.guard
        while guard is not None:
            chain.append(guard)
            guard = guard.branch.guard
        chain.reverse()
        return chain

    def __repr__(self) -> str:
        return f"%{self.name}"
