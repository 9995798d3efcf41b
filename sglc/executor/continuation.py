"""A gen's continuation (issue 28, precompute): the text its program appends after the gen's output
before the next call reads the stream, as far as the executor knows it when it sends the gen.

The next call on a stream starts with the gen's prompt, its output, and whatever the nodes between
them append. Those nodes usually append text known before the gen returns: constants, chat-role
markers, arguments, f-strings of arguments (``s += "Q: " + q`` after ``s += gen(...)``). The
executor sends that text with the gen (``ProgramHint.continuation``), so the runtime can prefill
prompt + output + continuation as soon as the gen ends, while the result travels back and the
executor builds the next prompt (runtime/engine/precompute.py).

Statically (:func:`continuation_nodes`, once per graph): the nodes after the gen on its stream, up
to the first one that is not a text op or a pure value, may not run whenever the gen ran (another
guard), or reads the stream's structure (forks, joins, loops, branches, media, calls). At run time
(:func:`known_continuation`) their text is rendered; an APPEND of a value that is not fixed for
the whole run (a gen's result, a loop item) ends the known text there. A wrong guess costs only a
prefill: the runtime's cache matches by token ids, so what it holds never changes an output.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from sglc.ir import format_pieces
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.wire.program_hint import MAX_CONTINUATION_CHARS

#: Nodes that append nothing and change nothing the next call sees: the walk goes past them.
_PASS_OPS = frozenset({Op.FORMAT, Op.GET_ITEM, Op.LENGTH, Op.VARIABLE, Op.STREAM_TEXT, Op.VAR_SCOPE_BEGIN,
                       Op.VAR_SCOPE_END, Op.LOOP_INDEX})
#: Nodes whose text the walk renders.
_TEXT_OPS = frozenset({Op.CONSTANT_TEXT, Op.APPEND, Op.ROLE_BEGIN, Op.ROLE_END})


def continuation_nodes(nodes: Sequence[Node], gen: int) -> tuple[int, ...]:
    """The text nodes (indices) after ``nodes[gen]`` on its stream whose text may be known before
    it returns, in order; empty when the next thing on the stream is not text."""
    stream, guards = nodes[gen].stream, _guards(nodes[gen])
    found: list[int] = []
    for j in range(gen + 1, len(nodes)):
        node = nodes[j]
        if node.op is Op.ARGUMENT or node.stream != stream:
            continue
        if _guards(node) != guards or node.op not in _TEXT_OPS | _PASS_OPS:
            break
        if node.op in _TEXT_OPS:
            found.append(j)
    return tuple(found)


def known_continuation(nodes: Sequence[Node], indices: Sequence[int], argument: Callable[[Node], Any],
                       role_text: Callable[[str, str], str]) -> str:
    """The text of ``indices`` (from :func:`continuation_nodes`) up to the first one whose text is
    not known yet, at most ``MAX_CONTINUATION_CHARS``. ``argument(node)``: an ARGUMENT's value in
    this run; ``role_text(kind, role)``: the chat template's prefix (``"begin"``) or suffix
    (``"end"``) of a role."""
    pieces: list[str] = []
    for j in indices:
        node = nodes[j]
        if node.op is Op.CONSTANT_TEXT:
            text: Optional[str] = node.attrs["text"]  # type: ignore[assignment]
        elif node.op is Op.ROLE_BEGIN:
            text = role_text("begin", node.attrs["role"])  # type: ignore[arg-type]
        elif node.op is Op.ROLE_END:
            text = role_text("end", node.attrs["role"])  # type: ignore[arg-type]
        else:  # APPEND
            text = _fixed_text(node.inputs[0], argument)
        if text is None:
            break
        pieces.append(text)
    return "".join(pieces)[:MAX_CONTINUATION_CHARS]


def _fixed_text(node: Node, argument: Callable[[Node], Any]) -> Optional[str]:
    """The string an APPEND of ``node`` adds when ``node``'s value is fixed for the whole run (an
    argument, or an f-string of arguments); None when it is not, or is no text."""
    value = _fixed_value(node, argument)
    if value is None or isinstance(value, (list, dict)):
        return None  # NOTE: appending these fails the run: no guess
    return value if isinstance(value, str) else str(value)


def _fixed_value(node: Node, argument: Callable[[Node], Any]) -> Any:
    if node.op is Op.ARGUMENT:
        return argument(node)
    if node.op is Op.FORMAT:
        values = [_fixed_value(inp, argument) for inp in node.inputs]
        if any(v is None for v in values):
            return None
        try:
            return format_pieces.render(node.attrs["pieces"], values)  # type: ignore[arg-type]
        except Exception:  # NOTE: the run itself reports a bad format when it reaches it; no guess here
            return None
    return None


def _guards(node: Node) -> tuple[tuple[int, int], ...]:
    return tuple((id(g.branch), g.case) for g in node.guard_chain())
