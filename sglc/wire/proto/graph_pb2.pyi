from . import fsm_pb2 as _fsm_pb2
from . import grammar_pb2 as _grammar_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Null(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NULL_VALUE: _ClassVar[Null]
NULL_VALUE: Null

class AttrValue(_message.Message):
    __slots__ = ("null_value", "bool_value", "int_value", "big_int_value", "float_value", "string_value", "bytes_value", "list_value", "map_value", "fsm_value", "grammar_value")
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BIG_INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAP_VALUE_FIELD_NUMBER: _ClassVar[int]
    FSM_VALUE_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_VALUE_FIELD_NUMBER: _ClassVar[int]
    null_value: Null
    bool_value: bool
    int_value: int
    big_int_value: str
    float_value: float
    string_value: str
    bytes_value: bytes
    list_value: AttrList
    map_value: AttrMap
    fsm_value: _fsm_pb2.FSM
    grammar_value: _grammar_pb2.Grammar
    def __init__(self, null_value: _Optional[_Union[Null, str]] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., big_int_value: _Optional[str] = ..., float_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bytes_value: _Optional[bytes] = ..., list_value: _Optional[_Union[AttrList, _Mapping]] = ..., map_value: _Optional[_Union[AttrMap, _Mapping]] = ..., fsm_value: _Optional[_Union[_fsm_pb2.FSM, _Mapping]] = ..., grammar_value: _Optional[_Union[_grammar_pb2.Grammar, _Mapping]] = ...) -> None: ...

class AttrList(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[AttrValue]
    def __init__(self, items: _Optional[_Iterable[_Union[AttrValue, _Mapping]]] = ...) -> None: ...

class AttrMap(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AttrEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[AttrEntry, _Mapping]]] = ...) -> None: ...

class AttrEntry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: AttrValue
    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrValue, _Mapping]] = ...) -> None: ...

class StringEntry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Guard(_message.Message):
    __slots__ = ("branch", "case")
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    CASE_FIELD_NUMBER: _ClassVar[int]
    branch: str
    case: int
    def __init__(self, branch: _Optional[str] = ..., case: _Optional[int] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "op", "inputs", "attrs", "type", "stream", "guard", "meta")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    ATTRS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    GUARD_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    name: str
    op: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    attrs: AttrMap
    type: str
    stream: int
    guard: Guard
    meta: _containers.RepeatedCompositeFieldContainer[StringEntry]
    def __init__(self, name: _Optional[str] = ..., op: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., attrs: _Optional[_Union[AttrMap, _Mapping]] = ..., type: _Optional[str] = ..., stream: _Optional[int] = ..., guard: _Optional[_Union[Guard, _Mapping]] = ..., meta: _Optional[_Iterable[_Union[StringEntry, _Mapping]]] = ...) -> None: ...

class Graph(_message.Message):
    __slots__ = ("format_version", "name", "meta", "num_streams", "nodes", "num_nodes", "checksum")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    NUM_STREAMS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    name: str
    meta: AttrMap
    num_streams: int
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    num_nodes: int
    checksum: bytes
    def __init__(self, format_version: _Optional[int] = ..., name: _Optional[str] = ..., meta: _Optional[_Union[AttrMap, _Mapping]] = ..., num_streams: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., num_nodes: _Optional[int] = ..., checksum: _Optional[bytes] = ...) -> None: ...
