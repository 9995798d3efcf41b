from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class FSM(_message.Message):
    __slots__ = ("version", "pattern", "interval_starts", "interval_classes", "num_classes", "num_states", "initial", "finals", "transitions")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_STARTS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_CLASSES_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    NUM_STATES_FIELD_NUMBER: _ClassVar[int]
    INITIAL_FIELD_NUMBER: _ClassVar[int]
    FINALS_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    version: int
    pattern: str
    interval_starts: _containers.RepeatedScalarFieldContainer[int]
    interval_classes: _containers.RepeatedScalarFieldContainer[int]
    num_classes: int
    num_states: int
    initial: int
    finals: _containers.RepeatedScalarFieldContainer[int]
    transitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, version: _Optional[int] = ..., pattern: _Optional[str] = ..., interval_starts: _Optional[_Iterable[int]] = ..., interval_classes: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., num_states: _Optional[int] = ..., initial: _Optional[int] = ..., finals: _Optional[_Iterable[int]] = ..., transitions: _Optional[_Iterable[int]] = ...) -> None: ...
