from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Grammar(_message.Message):
    __slots__ = ("root", "exprs", "rules")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    EXPRS_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    root: str
    exprs: _containers.RepeatedCompositeFieldContainer[Expr]
    rules: _containers.RepeatedCompositeFieldContainer[Rule]
    def __init__(self, root: _Optional[str] = ..., exprs: _Optional[_Iterable[_Union[Expr, _Mapping]]] = ..., rules: _Optional[_Iterable[_Union[Rule, _Mapping]]] = ...) -> None: ...

class Rule(_message.Message):
    __slots__ = ("name", "expr")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPR_FIELD_NUMBER: _ClassVar[int]
    name: str
    expr: int
    def __init__(self, name: _Optional[str] = ..., expr: _Optional[int] = ...) -> None: ...

class Expr(_message.Message):
    __slots__ = ("literal", "char_class", "seq", "choice", "repeat", "rule_ref")
    LITERAL_FIELD_NUMBER: _ClassVar[int]
    CHAR_CLASS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    RULE_REF_FIELD_NUMBER: _ClassVar[int]
    literal: str
    char_class: CharClass
    seq: Children
    choice: Children
    repeat: Repeat
    rule_ref: str
    def __init__(self, literal: _Optional[str] = ..., char_class: _Optional[_Union[CharClass, _Mapping]] = ..., seq: _Optional[_Union[Children, _Mapping]] = ..., choice: _Optional[_Union[Children, _Mapping]] = ..., repeat: _Optional[_Union[Repeat, _Mapping]] = ..., rule_ref: _Optional[str] = ...) -> None: ...

class Children(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, items: _Optional[_Iterable[int]] = ...) -> None: ...

class CharClass(_message.Message):
    __slots__ = ("ranges",)
    RANGES_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[CharRange]
    def __init__(self, ranges: _Optional[_Iterable[_Union[CharRange, _Mapping]]] = ...) -> None: ...

class CharRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class Repeat(_message.Message):
    __slots__ = ("item", "min", "max")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    item: int
    min: int
    max: int
    def __init__(self, item: _Optional[int] = ..., min: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...
