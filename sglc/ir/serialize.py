"""Graph <-> graph.pb (proto/graph.proto): the only module that converts between the two.

`decode(encode(g)) == g` exactly: attribute values keep their Python kind (None, bool, int of any
size, float, str, bytes, list, dict) and dicts keep their order. `decode` refuses, with a
one-line :class:`GraphFormatError`, anything that is not a well-formed graph of a format version
this sglc understands: a checksum mismatch, malformed or truncated bytes, a newer format version,
an unknown op or type, an input or guard naming no earlier node, and (unless ``check=False``) a
graph that fails :func:`sglc.ir.verify.verify` or holds an FSM that :func:`sglc.fsm.fsm_from_dict`
refuses.

Format versions: 1 has no checksum (still read); 2 ends with ``checksum``, the SHA-256 of every
byte before it (proto/graph.proto), so a flipped bit anywhere is caught before decoding; 3 stores
a lowered FSM as a typed message; 4 spells a gen's sampling attributes by their one inside name
(``max_new_tokens``, ``min_new_tokens``), where 1-3 used the DSL's (``max_tokens``, ``min_tokens``):
older files are renamed as they are read; 5 adds ops (``output``, and the formatted-text and loop
ops of docs/ir.md) that a version 4 reader would refuse one by one as unknown, so such a reader is
told to upgrade instead. Every version 4 file is a valid version 5 file. 6 stores a gen's lowered
context-free ``grammar`` (a ``sglc.grammar.Grammar``) as a typed message (proto/grammar.proto),
checked against the grammar budget before it is built and verified; every version 5 file is a
valid version 6 file.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Union

from sglc.errors import GraphFormatError, VerifyError
from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.ops import Op
from sglc.ir.types import ValueType, check_attr_value, is_grammar_value
from sglc.ir.verify import verify
from sglc.fsm.errors import FSMFormatError
from sglc.wire.fsm_message import fsm_from_pb, fsm_to_pb, is_fsm_dict
from sglc.wire.grammar_message import grammar_from_pb, grammar_to_pb
from sglc.wire.proto import graph_pb2 as pb

#: The format version this sglc writes; it reads this and every older version. Version 3 writes a
#: lowered FSM as a typed sglc.fsm.FSM (AttrValue.fsm_value); versions 1 and 2 held it as a map,
#: which still decodes to the same dict. Version 4 renamed two gen attributes (_RENAMED_IN_4).
#: Version 5 added ops (output, format, get_item, length, loop_begin/loop_index/loop_end).
#: Version 6 added a lowered grammar (AttrValue.grammar_value), which a version 5 reader would
#: read as "no value".
FORMAT_VERSION = 6
#: The first version whose files end with a checksum.
CHECKSUM_SINCE = 2
#: Gen attributes versions 1-3 spelled as the DSL does -> their name since version 4.
_RENAMED_IN_4 = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}
#: How the checksum field is encoded at the end of a file: tag of field 16 (length-delimited),
#: length 32, then the SHA-256 digest of everything before it.
_CHECKSUM_PREFIX = b"\x82\x01\x20"
_DIGEST_SIZE = 32
_TRAILER_SIZE = len(_CHECKSUM_PREFIX) + _DIGEST_SIZE
#: Lists/dicts nested deeper than this are refused (protobuf's parser stops at 100 messages).
MAX_ATTR_DEPTH = 32

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

__all__ = ["FORMAT_VERSION", "GraphFormatError", "decode", "encode", "load", "save"]


# ----- encoding -----
def encode(graph: Graph) -> bytes:
    """Serialize `graph` to graph.pb bytes (deterministic for equal graphs)."""
    msg = pb.Graph(format_version=FORMAT_VERSION, name=graph.name, num_streams=graph.num_streams)
    try:
        _write_map(msg.meta, graph.meta, "graph meta", 0)
        for node in graph.nodes:
            _write_node(msg.nodes.add(), node)
    except (TypeError, ValueError) as err:
        raise GraphFormatError(f"cannot encode graph {graph.name!r}: {err}") from None
    # NOTE: written after the nodes; decode compares it with the nodes it read.
    msg.num_nodes = len(graph.nodes)
    body = msg.SerializeToString(deterministic=True)
    trailer = pb.Graph(checksum=hashlib.sha256(body).digest()).SerializeToString()
    assert trailer[:len(_CHECKSUM_PREFIX)] == _CHECKSUM_PREFIX and len(trailer) == _TRAILER_SIZE, "checksum layout"
    return body + trailer


def _write_node(out: pb.Node, node: Node) -> None:
    where = f"%{node.name}"
    out.name = node.name
    out.op = node.op.value
    out.inputs.extend(inp.name for inp in node.inputs)
    _write_map(out.attrs, node.attrs, f"{where} attrs", 0)
    out.type = node.type.value
    out.stream = node.stream
    if node.guard is not None:
        out.guard.branch = node.guard.branch.name
        out.guard.case = node.guard.case
    for key, value in node.meta.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"{where} meta must map str to str, got {key!r}: {value!r}")
        out.meta.add(key=key, value=value)


def _write_map(out: pb.AttrMap, values: dict, where: str, depth: int) -> None:
    for key, value in values.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: key {key!r} is not a str")
        _write_value(out.entries.add(key=key).value, value, f"{where}[{key!r}]", depth)


def _write_value(out: pb.AttrValue, value: Any, where: str, depth: int) -> None:
    if depth > MAX_ATTR_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_ATTR_DEPTH} levels")
    if value is None:
        out.null_value = pb.NULL_VALUE
    elif isinstance(value, bool):  # NOTE: before int (bool is an int subclass)
        out.bool_value = value
    elif isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            out.int_value = value
        else:
            out.big_int_value = str(value)
    elif isinstance(value, float):
        check_attr_value(value, where)  # refuses NaN, which would break equality
        out.float_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, (list, tuple)):
        out.list_value.SetInParent()
        for i, item in enumerate(value):
            _write_value(out.list_value.items.add(), item, f"{where}[{i}]", depth + 1)
    elif is_fsm_dict(value) and _write_fsm(out, value):
        pass
    elif is_grammar_value(value):
        out.grammar_value.CopyFrom(grammar_to_pb(value))  # NOTE: ValueError (too deep) -> GraphFormatError
    elif isinstance(value, dict):
        out.map_value.SetInParent()
        _write_map(out.map_value, value, where, depth + 1)
    else:
        raise TypeError(f"{where}: {type(value).__name__} is not a valid attribute value")


def _write_fsm(out: pb.AttrValue, value: dict) -> bool:
    """A lowered FSM as the typed message; False (written as a map instead) when it does not fit
    the message exactly, so that decode(encode(g)) == g holds for any dict."""
    try:
        msg = fsm_to_pb(value)
    except FSMFormatError:
        return False
    out.fsm_value.CopyFrom(msg)
    return True


# ----- decoding -----
def decode(data: Union[bytes, bytearray, memoryview], *, check: bool = True) -> Graph:
    """Rebuild the Graph from graph.pb bytes; raises GraphFormatError on anything invalid.

    With ``check=True`` (the default) the result must also pass verify().
    """
    data = bytes(data)
    msg = pb.Graph()
    body, recorded = _split_checksum(data)
    try:
        msg.ParseFromString(data)
    except Exception as err:  # DecodeError, or upb's RuntimeError/ValueError on garbage
        if recorded is not None:
            _check_digest(body, recorded)  # a flipped bit says "corrupt", not "malformed"
        raise GraphFormatError(f"not a valid graph.pb (malformed or truncated data: {_one_line(err)})") from None
    # NOTE: the trailer counts only if it is the checksum field itself (not bytes inside a string).
    has_checksum = recorded is not None and msg.checksum == recorded
    if has_checksum:
        _check_digest(body, recorded)
    elif msg.checksum:
        raise GraphFormatError("graph.pb is corrupt: its checksum is not at the end of the file")
    version = msg.format_version
    if version == 0:
        raise GraphFormatError("not a valid graph.pb (no format version; is this an sglc graph?)")
    if version > FORMAT_VERSION:
        raise GraphFormatError(
            f"graph.pb format version {version} is newer than this sglc supports ({FORMAT_VERSION}); upgrade sglc"
        )
    if version >= CHECKSUM_SINCE and not has_checksum:
        raise GraphFormatError(f"graph.pb is corrupt: a version {version} file ends with a checksum, this one has "
                               "none (truncated?)")
    if msg.num_nodes != len(msg.nodes):
        raise GraphFormatError(
            f"graph.pb is truncated or corrupt: it declares {msg.num_nodes} nodes but holds {len(msg.nodes)}"
        )
    if msg.num_streams < 1:
        raise GraphFormatError("graph.pb is corrupt: num_streams must be at least 1")
    graph = Graph(msg.name)
    graph.num_streams = msg.num_streams
    graph.meta = _read_map(msg.meta, "graph meta")
    by_name: dict[str, Node] = {}
    for index, node_msg in enumerate(msg.nodes):
        node = _read_node(graph, node_msg, index, by_name, version)
        by_name[node.name] = node
    if check:
        try:
            verify(graph)
        except VerifyError as err:
            raise GraphFormatError(f"graph.pb holds an invalid graph: {err}") from None
        _check_fsms(graph)
    return graph


def _split_checksum(data: bytes) -> tuple[bytes, Union[bytes, None]]:
    """(the bytes the checksum covers, the recorded digest) when `data` ends like a checksum
    field; (data, None) otherwise (a version 1 file, or a damaged end)."""
    if len(data) > _TRAILER_SIZE and data[-_TRAILER_SIZE:-_DIGEST_SIZE] == _CHECKSUM_PREFIX:
        return data[:-_TRAILER_SIZE], data[-_DIGEST_SIZE:]
    return data, None


def _check_digest(body: bytes, recorded: bytes) -> None:
    actual = hashlib.sha256(body).digest()
    if actual != recorded:
        raise GraphFormatError(f"graph.pb is corrupt: checksum mismatch (the {len(body)} bytes before the checksum "
                               f"hash to sha256 {actual.hex()[:16]}..., the file records {recorded.hex()[:16]}...)")


def _check_fsms(graph: Graph) -> None:
    """Every lowered fsm rebuilds (sglc.fsm.fsm_from_dict validates it, bounds first), so a bad
    one is refused when the file is read, not when a request runs."""
    lowered = [node for node in graph.nodes if node.op is Op.GEN and node.attrs.get("fsm") is not None]
    if not lowered:
        return
    from sglc.fsm import FSMError, fsm_from_dict

    for node in lowered:
        try:
            fsm_from_dict(node.attrs["fsm"])
        except (FSMError, TypeError, ValueError, OverflowError, MemoryError) as err:
            where = f" at {_shown(node.source)}" if node.source else ""
            raise GraphFormatError(f"graph.pb: %{node.name} (gen){where}: invalid fsm: {_one_line(err)}") from None


def _shown(text: str, quote: bool = False, limit: int = 80) -> str:
    """A name from the file as it can appear in a one-line error: cut, and quoted if unprintable."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return repr(cut) if quote or not cut.isprintable() else cut


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:300]


def _read_node(graph: Graph, msg: pb.Node, index: int, by_name: dict[str, Node], version: int) -> Node:
    where = f"node {index} (%{_shown(msg.name)})"
    if msg.name in by_name:
        raise GraphFormatError(f"graph.pb is corrupt: duplicate node name %{_shown(msg.name)}")
    try:
        op = Op(msg.op)
    except ValueError:
        raise GraphFormatError(f"graph.pb: {where} has unknown op {_shown(msg.op, quote=True)}; upgrade sglc?") from None
    try:
        value_type = ValueType(msg.type)
    except ValueError:
        raise GraphFormatError(f"graph.pb: {where} has unknown type {_shown(msg.type, quote=True)}") from None
    inputs = []
    for name in msg.inputs:
        if name not in by_name:
            raise GraphFormatError(f"graph.pb: {where} uses %{_shown(name)}, which is not defined before it")
        inputs.append(by_name[name])
    guard = None
    if msg.HasField("guard"):
        branch = by_name.get(msg.guard.branch)
        if branch is None:
            raise GraphFormatError(f"graph.pb: {where} is guarded by %{_shown(msg.guard.branch)}, which is not defined before it")
        guard = Guard(branch, msg.guard.case)
    meta: dict[str, str] = {}
    for entry in msg.meta:
        if entry.key in meta:
            raise GraphFormatError(f"graph.pb: {where} has meta key {entry.key!r} twice")
        meta[entry.key] = entry.value
    attrs = _read_map(msg.attrs, f"{where} attrs")
    if version < 4 and op is Op.GEN:
        attrs = _renamed_attrs(attrs, where)
    try:
        node = graph.create_node(op, inputs, attrs, value_type, msg.stream, guard, meta, name=msg.name)
    except (TypeError, ValueError) as err:
        raise GraphFormatError(f"graph.pb: {where}: {err}") from None
    if node.name != msg.name:
        raise GraphFormatError(f"graph.pb: {where} has an invalid node name {msg.name!r}")
    return node


def _renamed_attrs(attrs: dict[str, Any], where: str) -> dict[str, Any]:
    """A version 1-3 gen's attributes under their version 4 names (order kept)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key in _RENAMED_IN_4.values():
            raise GraphFormatError(f"graph.pb: {where} has attribute {key!r}, which format version 4 introduced, in an "
                                   "older file")
        out[_RENAMED_IN_4.get(key, key)] = value
    return out


def _read_map(msg: pb.AttrMap, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in msg.entries:
        if entry.key in out:
            raise GraphFormatError(f"graph.pb: {where} has key {entry.key!r} twice")
        out[entry.key] = _read_value(entry.value, f"{where}[{entry.key!r}]")
    return out


def _read_value(msg: pb.AttrValue, where: str) -> Any:
    kind = msg.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind in ("bool_value", "int_value", "string_value", "bytes_value"):
        return getattr(msg, kind)
    if kind == "float_value":
        if msg.float_value != msg.float_value:
            raise GraphFormatError(f"graph.pb: {where} is NaN")
        return msg.float_value
    if kind == "big_int_value":
        try:
            return int(msg.big_int_value)
        except ValueError:
            raise GraphFormatError(f"graph.pb: {where} is not an integer: {msg.big_int_value[:40]!r}") from None
    if kind == "list_value":
        return [_read_value(item, f"{where}[{i}]") for i, item in enumerate(msg.list_value.items)]
    if kind == "map_value":
        return _read_map(msg.map_value, where)
    if kind == "fsm_value":
        try:  # NOTE: sizes against the compile budget before any list is copied; _check_fsms rebuilds it
            return fsm_from_pb(msg.fsm_value)
        except ValueError as err:  # FSMFormatError, CompileBudgetError
            raise GraphFormatError(f"graph.pb: {where}: invalid fsm: {_one_line(err)}") from None
    if kind == "grammar_value":
        try:  # NOTE: sizes against the grammar budget before any expression is built; then verify()
            return grammar_from_pb(msg.grammar_value)
        except ValueError as err:  # GrammarFormatError, GrammarBudgetError
            raise GraphFormatError(f"graph.pb: {where}: invalid grammar: {_one_line(err)}") from None
    raise GraphFormatError(f"graph.pb: {where} has no value (written by a newer sglc?)")


# ----- files -----
def save(graph: Graph, path: Union[str, os.PathLike]) -> None:
    """Write graph.pb to `path` (replaced atomically, so a crash never leaves half a file)."""
    target = Path(path)
    data = encode(graph)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def load(path: Union[str, os.PathLike], *, check: bool = True) -> Graph:
    """Read a graph.pb file. OSError if unreadable; GraphFormatError (naming the file) if invalid."""
    data = Path(path).read_bytes()
    try:
        return decode(data, check=check)
    except GraphFormatError as err:
        raise GraphFormatError(f"{path}: {err}") from None
