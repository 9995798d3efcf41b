"""prefix_hoisting: make the text shared by a fork's children a prefix computed before the fork.

Default mode never changes the text of any stream (every prompt the model sees, every captured
variable, every stream's final text stays the same).

**The default rewrite.** When every child of a FORK (n >= 2) starts, right after its
GET_FORK_ITEM, with the same text nodes H (CONSTANT_TEXT with equal text, ROLE_BEGIN/ROLE_END of
the same role, APPEND/IMAGE/VIDEO of the same value defined before the fork; all under the fork's
own guard), H moves before the fork. It cannot move into the fork's own stream: that stream
keeps running after the fork (and a join may append the children's text to it), so its text
would change. Instead the fork moves one level down, into a new stream that holds H::

    p:  ... FORK(n) ──▶ child i: H, rest_i          JOIN(fork, last_i) ...
    p:  ... FORK(n=1, hoisted=True) ──▶ s: H, FORK(n) ──▶ child i: rest_i
                                           JOIN(fork, last_i)   (moves into s)
        JOIN(hoisted fork, that join) ...   (in p, where the old join was)

Child i's text is still p's text at the fork + H + rest_i; p's text is untouched; the fork hint
(see fork_hints) before the inner FORK now caches p's text + H once for all children. The new
stream's own text after its fork is never read: its join gathers no variables and appends no
text. VARIABLE nodes that read the old join's gathered lists keep reading it (now in s); an
executor that reports stream 0's variables must pass those of a ``hoisted`` fork's join through.
If H leaves a chat role open (the children begin ``[user] Evaluate...`` and close the role
later), s gets a ROLE_END of that role right after its fork, so s is balanced; the children
were forked before it, so their text is unchanged.

Where the children's first differing CONSTANT_TEXTs share a string prefix, the longest part of
it that ends at a word end moves: the cut is the last position k with a non-whitespace char
before it and, in every child, whitespace (or the end of its text) at k. The shared part ends at
a word and the rest of each child starts with whitespace. Byte-level BPE and SentencePiece
tokenizers (GPT-2, Llama, SmolLM2) attach a leading space to the next word, so a word end is a
pre-tokenization boundary: the shared part tokenizes alone (for the cache hint) exactly as it
does inside the full prompt. No such position, no split.

Not hoisted: forks with a ``concate_and_append`` join (the join appends each child's text after
the fork, so H appears once per child in the parent — sharing it would change that text), forks
joined under a guard other than the fork's, one-way forks (nothing to share), and anything past
the first node that is not an identical text node: a GEN/SELECT, a VARIABLE read (which may wait
for a value produced after the fork), a var scope, a nested fork, a node under another guard.

**Aggressive mode** (``prefix_hoisting(graph, aggressive=True)``, ``sglc compile --aggressive``)
does the same and one rewrite that CHANGES prompt text, to lengthen the prefix every input of a
batch shares: in stream 0, before the first model call, let R be the first node that reads an
argument (APPEND, IMAGE or VIDEO of an ARGUMENT). Every CONSTANT_TEXT after R in the same role
segment (up to the next ROLE_BEGIN/ROLE_END, CACHE_PREFIX or any node other than text, append
and media) moves to just before R, keeping the texts' order and the reads' order. The prompt
``[user]Question: <q> Answer in one word.[/user]`` becomes
``[user]Question:  Answer in one word.<q>[/user]``. Each change is recorded as one line in
``graph.meta["prompt_rewrites"]``.
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional

from sglc.ir.graph import Graph
from sglc.ir.node import Node
from sglc.ir.ops import Op
from sglc.passes.pass_result import PassResult

#: Child-stream nodes that may move before a fork when every child has an identical one.
HOISTABLE_OPS = frozenset({Op.CONSTANT_TEXT, Op.ROLE_BEGIN, Op.ROLE_END, Op.APPEND, Op.IMAGE, Op.VIDEO})

#: graph.meta key listing the prompt-changing rewrites of aggressive mode (list of str).
REWRITES_KEY = "prompt_rewrites"


def prefix_hoisting(graph: Graph, aggressive: bool = False) -> PassResult:
    """Hoist text shared by all children of each fork (prompt-preserving); with `aggressive`,
    also move stream 0's constant text ahead of its first argument read (changes prompts)."""
    work = graph.copy()
    changed = False
    for fork in [n for n in work.nodes if n.op is Op.FORK]:
        changed |= _hoist_fork(work, fork)
    if aggressive:
        changed |= _move_constants_before_first_read(work)
    return PassResult(work, True) if changed else PassResult(graph, False)


def aggressive_prefix_hoisting(graph: Graph) -> PassResult:
    """`prefix_hoisting(graph, aggressive=True)` under its own name, for the pass manager."""
    return prefix_hoisting(graph, aggressive=True)


# ----- the default, prompt-preserving rewrite -----
class _Step(NamedTuple):
    """One position of the shared prefix: the k-th node of every child; `cut` < 0 moves them whole."""

    nodes: list[Node]
    cut: int


def _hoist_fork(g: Graph, fork: Node) -> bool:
    """Apply the rewrite to one fork; returns whether anything moved."""
    n = fork.attrs["n"]
    items = {u.attrs["index"]: u for u in fork.users if u.op is Op.GET_FORK_ITEM}
    joins = [u for u in fork.users if u.op is Op.JOIN and u.inputs[0] is fork]
    if n < 2 or len(items) != n:
        return False
    if any(j.attrs["mode"] != "gather_variable" or j.guard != fork.guard for j in joins):
        return False
    heads = [items[i] for i in range(n)]
    steps = _shared_steps(g, fork, heads)
    if not steps:
        return False

    parent, guard, meta = fork.stream, fork.guard, _source(fork)
    inner = g.new_stream()
    with g.inserting_before(fork):
        outer = g.create_node(Op.FORK, attrs={"n": 1, "hoisted": True}, stream=parent, guard=guard,
                              meta=meta, name=f"{fork.name}_prefix")
        g.create_node(Op.GET_FORK_ITEM, [outer], attrs={"index": 0}, stream=inner, guard=guard,
                      meta=meta, name=f"{fork.name}_prefix_item")
    open_role: Optional[Node] = None
    for step in steps:
        moved = _move_step(g, fork, step, heads, inner)
        if moved.op is Op.ROLE_BEGIN:
            open_role = moved
        elif moved.op is Op.ROLE_END:
            open_role = None
    # NOTE: nodes change stream only here, on our own copy; order stays topological because the
    # fork and its joins keep their positions and everything moved lands before the fork.
    fork.stream = inner
    _regather(g, fork, outer)
    if open_role is not None:
        with g.inserting_after(fork):
            g.create_node(Op.ROLE_END, attrs={"role": open_role.attrs["role"]}, stream=inner, guard=guard,
                          meta=meta, name=f"{fork.name}_prefix_role_end")
    for join in joins:
        join.stream = inner
        with g.inserting_after(join):
            outer_join = g.create_node(Op.JOIN, [outer, join], attrs={"mode": "gather_variable", "variables": []},
                                       stream=parent, guard=join.guard, meta=dict(join.meta),
                                       name=f"{join.name}_prefix")
        _regather(g, join, outer_join)
    return True


def _regather(g: Graph, moved: Node, replacement: Node) -> None:
    """Joins that gathered `moved` as the parent stream's last node gather `replacement` instead."""
    for user in list(moved.users):
        if user.op is Op.JOIN and user is not replacement and moved in user.inputs[1:]:
            g.set_inputs(user, [user.inputs[0], *(replacement if i is moved else i for i in user.inputs[1:])])


def _shared_steps(g: Graph, fork: Node, heads: list[Node]) -> list[_Step]:
    """The positions, from the start of the children, whose nodes all children share."""
    position = {node: i for i, node in enumerate(g.nodes)}
    children = [g.stream_nodes(head.stream)[1:] for head in heads]
    steps: list[_Step] = []
    for k in range(min(len(c) for c in children)):
        nodes = [c[k] for c in children]
        if not all(_movable(node, fork, position) for node in nodes):
            break
        first = nodes[0]
        if all(_same(first, other) for other in nodes[1:]):
            steps.append(_Step(nodes, -1))
            continue
        if all(node.op is Op.CONSTANT_TEXT and _same(first, node, ignore_text=True) for node in nodes):
            cut = shared_cut([node.attrs["text"] for node in nodes])
            if cut > 0:
                steps.append(_Step(nodes, cut))
        break
    return steps


def _movable(node: Node, fork: Node, position: dict[Node, int]) -> bool:
    return (
        node.op in HOISTABLE_OPS
        and node.guard == fork.guard
        and all(position[i] < position[fork] for i in node.inputs)
    )


def _same(a: Node, b: Node, ignore_text: bool = False) -> bool:
    """Same op, same value inputs (by identity) and same attributes (but for `text` if asked)."""
    if a.op is not b.op or len(a.inputs) != len(b.inputs) or any(x is not y for x, y in zip(a.inputs, b.inputs)):
        return False
    skip = {"text"} if ignore_text else set()
    return _exact({k: v for k, v in a.attrs.items() if k not in skip}) == _exact(
        {k: v for k, v in b.attrs.items() if k not in skip})


def _exact(value: object) -> object:
    """A type-exact view of an attribute value (1, 1.0 and True differ)."""
    if isinstance(value, dict):
        return ("dict", sorted((k, _exact(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", [_exact(v) for v in value])
    return (type(value).__name__, value)


def shared_cut(texts: list[str]) -> int:
    """Length of the longest common prefix of `texts` that ends at a word end (0 if none).

    A word end is a position k with a non-whitespace char before it and, in every text,
    whitespace at k or the end of the text.
    """
    common = os.path.commonprefix(texts)
    for k in range(len(common), 0, -1):
        if not common[k - 1].isspace() and all(len(t) == k or t[k].isspace() for t in texts):
            return k
    return 0


def _move_step(g: Graph, fork: Node, step: _Step, heads: list[Node], inner: int) -> Node:
    """Put this step's shared node into stream `inner` before `fork`; drop or trim the children's."""
    first = step.nodes[0]
    if step.cut < 0:
        moved = first
    else:
        shared = {**first.attrs, "text": first.attrs["text"][: step.cut]}
        with g.inserting_before(fork):
            moved = g.create_node(Op.CONSTANT_TEXT, attrs=shared, stream=inner, guard=first.guard,
                                  meta=dict(first.meta), name=f"{first.name}_shared")
    for node, head in zip(step.nodes, heads):
        if step.cut >= 0:
            node.attrs["text"] = node.attrs["text"][step.cut:]
            if node.attrs["text"]:
                continue
        # NOTE: a text node has users only when a join gathers it as its child's last node; the
        # moved nodes are a prefix of the child, so the child's new last node is its GET_FORK_ITEM.
        g.replace_all_uses_with(node, head)
        if node is moved:
            node.stream = inner
            g.move_before(node, fork)
        else:
            g.erase_node(node)
    return moved


# ----- the aggressive, prompt-changing rewrite -----
#: Ops of stream 0's leading region that the aggressive rewrite may look past.
_LEADING_OPS = frozenset({Op.CONSTANT_TEXT, Op.ROLE_BEGIN, Op.ROLE_END, Op.APPEND, Op.IMAGE, Op.VIDEO})
_SEGMENT_OPS = frozenset({Op.CONSTANT_TEXT, Op.APPEND, Op.IMAGE, Op.VIDEO})


def _reads_argument(node: Node) -> bool:
    return any(i.op is Op.ARGUMENT for i in node.inputs)


def _move_constants_before_first_read(g: Graph) -> bool:
    """Aggressive: constants after stream 0's first argument read (same role segment) move before it."""
    leading: list[Node] = []
    for node in g.nodes:
        if node.stream != 0 or node.op is Op.ARGUMENT:
            continue
        if node.op not in _LEADING_OPS or node.guard is not None:
            break
        leading.append(node)
    first_read = next((i for i, node in enumerate(leading) if _reads_argument(node)), None)
    if first_read is None:
        return False
    anchor = leading[first_read]
    moving: list[Node] = []
    for node in leading[first_read + 1:]:
        if node.op not in _SEGMENT_OPS:
            break
        if node.op is Op.CONSTANT_TEXT:
            moving.append(node)
    if not moving:
        return False
    for node in moving:
        g.move_before(node, anchor)
    rewrites = list(g.meta.get(REWRITES_KEY) or [])
    moved = ", ".join(f"%{n.name} {_short(n.attrs['text'])}" for n in moving)
    where = f" ({anchor.source})" if anchor.source else ""
    rewrites.append(f"prefix_hoisting --aggressive: moved {moved} before %{anchor.name}{where}, "
                    f"the first argument read in stream 0; the prompt text changes")
    g.meta[REWRITES_KEY] = rewrites
    return True


def _short(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3]) + "..."


def _source(node: Node) -> dict[str, str]:
    return {"source": node.source} if node.source else {}
