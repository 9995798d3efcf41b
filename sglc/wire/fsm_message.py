"""A lowered FSM (sglc.fsm's dict form, as IR attributes hold it) <-> the typed ``sglc.fsm.FSM``
message of proto/fsm.proto, for graph.pb and for GenerateRequest alike.

Decoding is where untrusted sizes arrive: the stated dimensions and every list's length are held
to the compile budget (sglc.fsm.budget, via ``check_dimensions``) BEFORE a single list is copied
out of the message; the full check (a canonical minimal DFA) is ``sglc.fsm.fsm_from_dict``'s, run
where the FSM is rebuilt (graph.pb's decode, the runtime's grammar cache).
"""
from __future__ import annotations

from typing import Any, Optional

from sglc.fsm import serialize as fsm_serialize
from sglc.fsm.budget import CompileMeter, as_meter
from sglc.fsm.errors import FSMFormatError
from sglc.wire.proto import fsm_pb2

_LISTS = ("interval_starts", "interval_classes", "finals", "transitions")
_SCALARS = ("num_classes", "num_states", "initial")
_KEYS = frozenset({"format", "version", "pattern", *_LISTS, *_SCALARS})


def is_fsm_dict(value: Any) -> bool:
    """Whether `value` claims to be a lowered FSM (sglc.fsm.fsm_to_dict's form)."""
    return isinstance(value, dict) and value.get("format") == fsm_serialize.FORMAT


def fsm_to_pb(data: dict) -> fsm_pb2.FSM:
    """The message of a lowered FSM dict; FSMFormatError (a ValueError) when a field does not fit
    the message (a negative or non-integer number, a missing field)."""
    if not is_fsm_dict(data):
        raise FSMFormatError(f"not a serialized FSM (format {data.get('format')!r})" if isinstance(data, dict)
                             else f"serialized FSM must be a dict, got {type(data).__name__}")
    if set(data) != _KEYS:  # NOTE: the message holds these fields and no others
        raise FSMFormatError(f"serialized FSM has fields {sorted(set(data) ^ _KEYS)} beyond or short of its layout")
    try:
        return fsm_pb2.FSM(version=data["version"], pattern=data["pattern"],
                           **{key: data[key] for key in (*_LISTS, *_SCALARS)})
    except (KeyError, TypeError, ValueError) as err:
        raise FSMFormatError(f"serialized FSM does not fit the FSM message: {err}") from None


def fsm_from_pb(msg: fsm_pb2.FSM, meter: Optional[CompileMeter] = None) -> dict[str, Any]:
    """The dict form of an FSM message, its sizes checked against `meter`'s budget (the default
    one when none is given) before anything is copied; FSMFormatError / CompileBudgetError."""
    meter = as_meter(meter)
    if msg.version < 1 or msg.version > fsm_serialize.VERSION:
        raise FSMFormatError(f"FSM format version {msg.version} is not supported (this sglc reads 1 to "
                             f"{fsm_serialize.VERSION})")
    fsm_serialize.check_dimensions({key: len(getattr(msg, key)) for key in _LISTS}, len(msg.pattern),
                                   msg.num_states, msg.num_classes, meter)
    return {"format": fsm_serialize.FORMAT, "version": msg.version, "pattern": msg.pattern,
            "interval_starts": list(msg.interval_starts), "interval_classes": list(msg.interval_classes),
            "num_classes": msg.num_classes, "num_states": msg.num_states, "initial": msg.initial,
            "finals": list(msg.finals), "transitions": list(msg.transitions)}
