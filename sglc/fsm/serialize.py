"""A compiled FSM <-> a plain dict of ints, strings and lists (for IR attributes and graph.pb).

Layout (format version 1)::

    {"format": "sglc.fsm", "version": 1, "pattern": str,
     "interval_starts": [int], "interval_classes": [int], "num_classes": int,
     "num_states": int, "initial": int, "finals": [int],
     "transitions": [src, class, dst, src, class, dst, ...]}   # moves only, no -1 entries

``fsm_from_dict(fsm_to_dict(f)) == f`` exactly; a dict that is not a canonical minimal DFA
is rejected. Integral floats are accepted for ints (a
protobuf ``Struct`` stores numbers as doubles). Malformed input or a newer version raises
:class:`FSMFormatError`. The compressed view and the byte DFA are derived, so not stored.

A serialized FSM is untrusted input (it arrives in requests and graph.pb files): its stated
dimensions are checked against the compile budget (``max_dfa_states``, ``max_dfa_cells``,
``max_pattern_chars``) and against its own list lengths BEFORE the transition table
(``num_states x num_classes``) is allocated, so 150 bytes claiming ``num_classes = 10**7``
cost nothing; the canonical-form check then runs under the same budget's clock.
"""
from __future__ import annotations

import json
from typing import Any

from .budget import CompileMeter, as_meter
from .compressed import FSM
from .dfa import DFA, minimize
from .errors import FSMFormatError

FORMAT = "sglc.fsm"
VERSION = 1


def fsm_to_dict(fsm: FSM) -> dict[str, Any]:
    """The plain-data form of ``fsm``."""
    d = fsm.dfa
    flat: list[int] = []
    for s, row in enumerate(d.transitions):
        for c, t in enumerate(row):
            if t >= 0:
                flat.extend((s, c, t))
    return {
        "format": FORMAT,
        "version": VERSION,
        "pattern": fsm.pattern,
        "interval_starts": list(d.interval_starts),
        "interval_classes": list(d.interval_classes),
        "num_classes": d.num_classes,
        "num_states": d.num_states,
        "initial": d.initial,
        "finals": sorted(d.finals),
        "transitions": flat,
    }


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise FSMFormatError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise FSMFormatError(f"{what} must be a list of integers, got {type(value).__name__}")
    return [_int(v, what) for v in value]


def fsm_from_dict(data: Any, meter: CompileMeter | None = None) -> FSM:
    """Rebuild the FSM written by :func:`fsm_to_dict`, validating everything; its size is held
    to ``meter``'s budget (the default one when none is given) before anything is allocated."""
    meter = as_meter(meter)
    if not isinstance(data, dict):
        raise FSMFormatError(f"serialized FSM must be a dict, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise FSMFormatError(f"not a serialized FSM (format {data.get('format')!r}, expected {FORMAT!r})")
    version = _int(data.get("version"), "version")
    if version > VERSION:
        raise FSMFormatError(f"FSM format version {version} is newer than supported version {VERSION}")
    if version < 1:
        raise FSMFormatError(f"bad FSM format version {version}")
    missing = [k for k in ("pattern", "interval_starts", "interval_classes", "num_classes",
                           "num_states", "initial", "finals", "transitions") if k not in data]
    if missing:
        raise FSMFormatError(f"serialized FSM lacks field {missing[0]!r}")
    pattern = data["pattern"]
    if not isinstance(pattern, str):
        raise FSMFormatError("pattern must be a string")
    num_classes = _int(data["num_classes"], "num_classes")
    num_states = _int(data["num_states"], "num_states")
    _check_dimensions(data, pattern, num_states, num_classes, meter)
    starts = _ints(data["interval_starts"], "interval_starts")
    classes = _ints(data["interval_classes"], "interval_classes")
    initial = _int(data["initial"], "initial")
    finals = _ints(data["finals"], "finals")
    flat = _ints(data["transitions"], "transitions")
    if not starts or starts[0] != 0 or any(a >= b for a, b in zip(starts, starts[1:])):
        raise FSMFormatError("interval_starts must start at 0 and increase strictly")
    if len(classes) != len(starts) or any(not 0 <= c < num_classes for c in classes):
        raise FSMFormatError("interval_classes must name a class for every interval")
    if num_states < 1 or not 0 <= initial < num_states:
        raise FSMFormatError(f"bad num_states {num_states} / initial {initial}")
    if any(not 0 <= f < num_states for f in finals):
        raise FSMFormatError("a final state is out of range")
    if len(flat) % 3:
        raise FSMFormatError("transitions must be (src, class, dst) triples")
    rows = [[-1] * num_classes for _ in range(num_states)]
    for i in range(0, len(flat), 3):
        s, c, t = flat[i : i + 3]
        if not (0 <= s < num_states and 0 <= c < num_classes and 0 <= t < num_states):
            raise FSMFormatError(f"transition {(s, c, t)} out of range")
        rows[s][c] = t
    table = tuple(map(tuple, rows))
    dfa = DFA(tuple(starts), tuple(classes), num_classes, table, initial, frozenset(finals))
    # NOTE: FSM relies on a canonical minimal DFA (no dead states, so no forced cycles);
    # everything fsm_to_dict writes is canonical, so anything else was tampered with.
    if minimize(dfa, meter) != dfa:
        raise FSMFormatError("serialized FSM is not a canonical minimal DFA")
    return FSM(dfa, pattern)


def _check_dimensions(data: dict, pattern: str, num_states: int, num_classes: int, meter: CompileMeter) -> None:
    """The stated sizes against the budget and against each other, before any allocation."""
    lengths = {}
    for key in _LISTS:
        value = data[key]
        if not isinstance(value, (list, tuple)):
            raise FSMFormatError(f"{key} must be a list of integers, got {type(value).__name__}")
        lengths[key] = len(value)
    check_dimensions(lengths, len(pattern), num_states, num_classes, meter)


#: The list fields of a serialized FSM.
_LISTS = ("interval_starts", "interval_classes", "finals", "transitions")


def check_dimensions(lengths: dict[str, int], pattern_chars: int, num_states: int, num_classes: int,
                     meter: CompileMeter) -> None:
    """A serialized FSM's stated sizes (and each list's length) against ``meter``'s budget and
    against each other; FSMFormatError / CompileBudgetError. Cheap: run it before copying or
    allocating anything (sglc.wire.fsm_message runs it on a decoded message)."""
    if num_states < 1 or num_classes < 1:
        raise FSMFormatError(f"bad num_states {num_states} / num_classes {num_classes}")
    meter.check("max_pattern_chars", pattern_chars, "serialized FSM pattern characters")
    meter.check("max_dfa_states", num_states, "serialized FSM states")
    meter.check("max_dfa_cells", num_states * num_classes, "serialized FSM cells (num_states x num_classes)")
    for key, most in (("interval_starts", meter.budget.max_dfa_cells), ("interval_classes", meter.budget.max_dfa_cells),
                      ("finals", num_states), ("transitions", 3 * num_states * num_classes)):
        if lengths[key] > most:
            raise FSMFormatError(f"{key} has {lengths[key]:,} entries; at most {most:,} fit "
                                 f"{num_states:,} states x {num_classes:,} classes")


def fsm_to_json(fsm: FSM) -> str:
    """``fsm_to_dict`` as a compact JSON string."""
    return json.dumps(fsm_to_dict(fsm), separators=(",", ":"), ensure_ascii=False)


def fsm_from_json(text: str) -> FSM:
    """Inverse of :func:`fsm_to_json`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise FSMFormatError(f"serialized FSM is not valid JSON: {err}") from None
    return fsm_from_dict(data)
