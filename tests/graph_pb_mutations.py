"""Seeded mutations of real graph.pb files, for the fuzz test.

Byte mutations (bit flips, cuts, insertions) must be caught by the checksum or the decoder.
Structured mutations decode the protobuf, damage it the way a buggy or hostile writer would
(wrong value kinds, huge numbers, empty values, unknown ops, dangling references, broken FSMs,
bad meta), then re-seal it with a valid checksum, so they reach the decoder, verify and the
executor. Every mutator takes a ``random.Random`` so a seed reproduces a run.
"""
from __future__ import annotations

import random
from typing import Callable

from google.protobuf.message import DecodeError

from graph_pb_helpers import parse, seal
from sglc.ir.ops import Op
from sglc.ir.types import ValueType
from sglc.wire.proto import graph_pb2 as pb

HUGE_INTS = [0, -1, 1, 2**31, 2**32 - 1, 2**63 - 1, -(2**63), 10**15]
HUGE_FLOATS = [float("inf"), float("-inf"), float("nan"), 1e308, -1e308, -0.0, 5e-324, 0.5]
NAMES = ["", "ghost", "a b", "%x", "x" * 300, "ответ", "\n", "topic"]


# ----- byte mutations (the checksum's job) -----
def flip_bits(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))]


def insert_bytes(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[at:]


BYTE_MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip_bits": flip_bits, "truncate": truncate, "insert_bytes": insert_bytes,
}


# ----- values -----
def nasty_value(rng: random.Random, depth: int = 0) -> pb.AttrValue:
    """An AttrValue of a random kind: wrong types, extremes, empties, nesting."""
    v = pb.AttrValue()
    kind = rng.randrange(12 if depth < 3 else 9)
    if kind == 0:
        v.null_value = pb.NULL_VALUE
    elif kind == 1:
        v.bool_value = rng.random() < 0.5
    elif kind == 2:
        v.int_value = rng.choice(HUGE_INTS)
    elif kind == 3:
        v.big_int_value = rng.choice(["1" + "0" * 30, "-" + "9" * 40, "12x", "", "1e5"])
    elif kind == 4:
        v.float_value = rng.choice(HUGE_FLOATS)
    elif kind == 5:
        v.string_value = rng.choice(["", "abc", "x" * 10_000, "(", "[", "\\", "a{99999}", "\x00", '{"type": 1}'])
    elif kind == 6:
        v.bytes_value = bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
    elif kind == 7:
        v.list_value.SetInParent()
    elif kind == 8:
        v.map_value.SetInParent()
    elif kind == 9:
        for _ in range(rng.randint(1, 3)):
            v.list_value.items.add().CopyFrom(nasty_value(rng, depth + 1))
    elif kind == 10:
        for i in range(rng.randint(1, 3)):
            v.map_value.entries.add(key=rng.choice(["type", "pattern", "k", str(i)])).value.CopyFrom(
                nasty_value(rng, depth + 1))
    else:  # nested deeper than the decoder's depth bound or protobuf's recursion limit
        inner = v
        for _ in range(rng.choice([40, 120])):
            inner = inner.list_value.items.add()
        inner.int_value = 1
    return v


#: Ops whose damage reaches the executor's setup (most nodes are text and roles).
INTERESTING_OPS = {"gen", "select", "fork", "get_fork_item", "join", "branch", "variable", "image", "argument",
                   "cache_prefix", "var_scope_begin", "var_scope_end"}


def _node(msg: pb.Graph, rng: random.Random, having: str = "") -> pb.Node:
    """A random node (with attribute `having`, if any has it), two times in three an interesting one."""
    nodes = [n for n in msg.nodes if not having or any(e.key == having for e in n.attrs.entries)] or list(msg.nodes)
    interesting = [n for n in nodes if n.op in INTERESTING_OPS]
    return rng.choice(interesting if interesting and rng.random() < 2 / 3 else nodes)


def _entry(entries, rng: random.Random):
    return rng.choice(list(entries)) if len(entries) else None


# ----- structured mutations (each edits the decoded message in place) -----
def set_attr(msg: pb.Graph, rng: random.Random) -> None:
    entry = _entry(_node(msg, rng).attrs.entries, rng)
    if entry is not None:
        entry.value.CopyFrom(nasty_value(rng))


def set_sampling_attr(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng, having="max_new_tokens")
    key = rng.choice(["max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
                      "frequency_penalty", "dtype", "choices", "ignore_eos"])
    entries = [e for e in node.attrs.entries if e.key == key]
    entry = entries[0] if entries else node.attrs.entries.add(key=key)
    entry.value.CopyFrom(nasty_value(rng))


def delete_attr(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng)
    if len(node.attrs.entries):
        del node.attrs.entries[rng.randrange(len(node.attrs.entries))]


def duplicate_attr(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng)
    entry = _entry(node.attrs.entries, rng)
    if entry is not None:
        node.attrs.entries.add().CopyFrom(entry)


def set_op(msg: pb.Graph, rng: random.Random) -> None:
    _node(msg, rng).op = rng.choice(["", "teleport", "GEN", *[op.value for op in Op]])


def set_type(msg: pb.Graph, rng: random.Random) -> None:
    _node(msg, rng).type = rng.choice(["", "tensor", *[t.value for t in ValueType]])


def set_inputs(msg: pb.Graph, rng: random.Random) -> None:
    index = rng.randrange(len(msg.nodes))
    node = msg.nodes[index]
    choice = rng.randrange(5)
    names = [n.name for n in msg.nodes]
    del node.inputs[:]
    if choice == 0:
        node.inputs.append("ghost")
    elif choice == 1:
        node.inputs.append(node.name)  # itself
    elif choice == 2 and index + 1 < len(names):
        node.inputs.append(names[rng.randrange(index + 1, len(names))])  # a later node
    elif choice == 3 and index > 0:
        node.inputs.extend(rng.choice(names[:index]) for _ in range(rng.randint(1, 3)))  # earlier, maybe twice


def set_guard(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng)
    node.guard.branch = rng.choice([n.name for n in msg.nodes] + ["ghost", ""])
    node.guard.case = rng.choice([0, 1, 2, 2**32 - 1])


def set_stream(msg: pb.Graph, rng: random.Random) -> None:
    _node(msg, rng).stream = rng.choice([0, 1, 2, 7, 2**32 - 1])


def set_graph_counts(msg: pb.Graph, rng: random.Random) -> None:
    field = rng.choice(["num_streams", "num_nodes", "format_version"])
    setattr(msg, field, rng.choice([0, 1, 2, 3, 1000, 2**32 - 1]))


def set_graph_meta(msg: pb.Graph, rng: random.Random) -> None:
    key = rng.choice(["num_api_spec_tokens", "arg_names", "source_file", "prompt_rewrites", "junk"])
    entries = [e for e in msg.meta.entries if e.key == key]
    entry = entries[0] if entries else msg.meta.entries.add(key=key)
    entry.value.CopyFrom(nasty_value(rng))


def set_name(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng)
    node.name = rng.choice(NAMES + [n.name for n in msg.nodes])


def set_node_meta(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng)
    node.meta.add(key=rng.choice(["source", "source", "x"]), value=rng.choice(["", "a\nb", "x" * 5000, "p.py:1"]))


def reorder_nodes(msg: pb.Graph, rng: random.Random) -> None:
    nodes = list(msg.nodes)
    action = rng.randrange(3)
    i, j = rng.randrange(len(nodes)), rng.randrange(len(nodes))
    if action == 0:
        nodes[i], nodes[j] = nodes[j], nodes[i]
    elif action == 1:
        del nodes[i]
    else:
        nodes.insert(j, nodes[i])
    copies = [pb.Node() for _ in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    del msg.nodes[:]
    msg.nodes.extend(copies)
    msg.num_nodes = len(copies)  # NOTE: kept consistent, so the order itself is what is tested


def break_fsm(msg: pb.Graph, rng: random.Random) -> None:
    node = _node(msg, rng, having="fsm")
    fsm = [e for e in node.attrs.entries if e.key == "fsm"]
    if fsm and fsm[0].value.HasField("fsm_value"):  # NOTE: format 3: the typed FSM message
        typed = fsm[0].value.fsm_value
        field = rng.choice(["num_states", "num_classes", "initial", "finals", "transitions", "interval_starts"])
        if field in ("num_states", "num_classes", "initial"):
            setattr(typed, field, rng.choice([0, 1, 2**31, 2**32 - 1]))
        else:
            values = getattr(typed, field)
            values.append(rng.choice([0, 2**32 - 1, 10**6]))
        return None
    if not fsm or not fsm[0].value.HasField("map_value"):
        return set_attr(msg, rng)
    fields = fsm[0].value.map_value.entries
    entry = rng.choice(list(fields))
    if entry.value.HasField("list_value") and rng.random() < 0.5:
        items = entry.value.list_value.items
        if len(items) and rng.random() < 0.5:
            items[rng.randrange(len(items))].int_value = rng.choice(HUGE_INTS)
        elif len(items):
            del items[rng.randrange(len(items)):]
    else:
        entry.value.CopyFrom(nasty_value(rng))


def edit_constraint(msg: pb.Graph, rng: random.Random) -> None:
    """Change a lowered gen's readable constraint (its fsm stays): what inspect shows would lie."""
    node = _node(msg, rng, having="fsm")
    for entry in node.attrs.entries:
        if entry.key in ("regex", "json_schema", "dtype", "choices"):
            entry.value.CopyFrom(rng.choice([pb.AttrValue(string_value="[a-z]+"), pb.AttrValue(string_value="("),
                                             nasty_value(rng)]))
            return


def _val(value) -> pb.AttrValue:
    if isinstance(value, bool):
        return pb.AttrValue(bool_value=value)
    if isinstance(value, int):
        return pb.AttrValue(int_value=value)
    if isinstance(value, float):
        return pb.AttrValue(float_value=value)
    if isinstance(value, list):
        out = pb.AttrValue()
        out.list_value.SetInParent()
        for item in value:
            out.list_value.items.add().CopyFrom(_val(item))
        return out
    return pb.AttrValue(string_value=value)


#: Values at the edges of what verify accepts, so the mutant reaches the executor and the runtime.
EDGE_VALUES = {
    "gen": {
        "max_new_tokens": [1, 2, 2**20], "temperature": [0.0, 100.0, 5e-324, 0], "top_p": [5e-324, 1.0, 1],
        "top_k": [1, 2**31 - 1, -1], "min_p": [0.0, 1.0], "frequency_penalty": [-2.0, 2.0],
        "presence_penalty": [2, -2.0], "stop": ["", "\x00", "x" * 5000, ["", "a"], []],
        "stop_token_ids": [[0], [2**31 - 1], []], "ignore_eos": [True], "dtype": ["int", "float", "bool", "str"],
        "regex": ["(", "a{99999}", "", ".*", "[^\\x00-\\uffff]"], "json_schema": ["{not json", '{"type": "object"}', "true"],
        "choices": [[""], ["a", "a"], ["x" * 2000]], "name": ["", "x" * 300, "answer"],
    },
    "select": {"choices": [[""], ["a", "a"], ["x"] * 1, ["é" * 500]], "temperature": [100.0, 0.0],
               "choices_method": ["nope", "greedy", "unconditional_likelihood_normalized"], "name": ["", "z"]},
    "image": {"path": ["/nonexistent.png", "", "x" * 5000, "samples/assets/essay.png"]},
    "argument": {"default": [None, 1, "x" * 10_000, [1, 2]], "name": ["", "other"]},
    "cache_prefix": {"scope": ["batch", "fork", "nope", ""]},
    "join": {"mode": ["concate_and_append", "gather_variable"], "variables": [[], ["ghost"], ["a", "a"]]},
    "fork": {"n": [1, 2**16]},
    "constant_text": {"text": ["", "x" * 100_000, "<|im_end|>", "\x00\ud7ff"]},
}


def valid_edge(msg: pb.Graph, rng: random.Random) -> None:
    """Set an attribute to a value at the edge of its range (or an unusual one of the right kind);
    a lowered gen loses its fsm when its constraint changes, so the edit is not refused for that."""
    candidates = [n for n in msg.nodes if n.op in EDGE_VALUES]
    if not candidates:
        return
    node = rng.choice(candidates)
    key = rng.choice(sorted(EDGE_VALUES[node.op]))
    value = _val(rng.choice(EDGE_VALUES[node.op][key]))
    if key in ("regex", "json_schema", "dtype", "choices") and node.op == "gen":
        kept = [e for e in node.attrs.entries if e.key not in ("regex", "json_schema", "dtype", "choices", "fsm")]
        del node.attrs.entries[:]
        node.attrs.entries.extend(kept)
    entries = [e for e in node.attrs.entries if e.key == key]
    (entries[0] if entries else node.attrs.entries.add(key=key)).value.CopyFrom(value)


STRUCTURED_MUTATIONS: dict[str, Callable[[pb.Graph, random.Random], None]] = {
    "valid_edge": valid_edge,
    "set_attr": set_attr, "set_sampling_attr": set_sampling_attr, "delete_attr": delete_attr,
    "duplicate_attr": duplicate_attr, "set_op": set_op, "set_type": set_type, "set_inputs": set_inputs,
    "set_guard": set_guard, "set_stream": set_stream, "set_graph_counts": set_graph_counts,
    "set_graph_meta": set_graph_meta, "set_name": set_name, "set_node_meta": set_node_meta,
    "reorder_nodes": reorder_nodes, "break_fsm": break_fsm, "edit_constraint": edit_constraint,
}


def structured(data: bytes, rng: random.Random, only: str = "") -> tuple[str, bytes]:
    """1-3 structured mutations (all `only`, if given) of a decoded file, re-sealed with a valid checksum."""
    msg = parse(data)
    names = [only or rng.choice(sorted(STRUCTURED_MUTATIONS)) for _ in range(rng.randint(1, 3))]
    for name in names:
        try:
            STRUCTURED_MUTATIONS[name](msg, rng)
        except DecodeError:  # NOTE: copying a node nested past protobuf's depth limit; keep what we have
            break
    return "+".join(names), seal(msg)


def mutate(data: bytes, rng: random.Random, edge_share: float = 0.0) -> tuple[str, bytes]:
    """One mutant of `data`: `edge_share` of them only valid_edge edits (they reach the executor),
    a quarter of the rest byte-level, the others structured. Returns (what, bytes)."""
    if rng.random() < edge_share:
        return structured(data, rng, only="valid_edge")
    if rng.random() < 0.25:
        name = rng.choice(sorted(BYTE_MUTATIONS))
        return name, BYTE_MUTATIONS[name](data, rng)
    return structured(data, rng)
