"""The compile-time context check (context_check.py ``SomeContext``: can some stack below take
a suffix after a token leaves its rule?) in C++: ``native/context_check.cpp`` through ctypes.
None where native code is off or cannot be built (the Python walk runs, with the same answers).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sglc.native_library import load_library

from .automaton import Automaton

SOURCE = Path(__file__).parent / "native" / "context_check.cpp"
_i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_i32p = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")
_u8p = np.ctypeslib.ndpointer(dtype=np.uint8, flags="C_CONTIGUOUS")


def _declare(lib: ctypes.CDLL) -> None:
    lib.sglc_context_accepts.restype = None
    lib.sglc_context_accepts.argtypes = [_i32p, _u8p, _u8p, _i32p, _i64p, _i32p, _i32p, _i64p, _i32p,
                                         _i32p, _i64p, _u8p, ctypes.c_int64, _u8p]


def native_context_check() -> ctypes.CDLL | None:
    return load_library(SOURCE, _declare)


def contexts_accept(lib: ctypes.CDLL, auto: Automaton, queries: list[tuple[int, bytes]]) -> list[bool]:
    """Per ``(exit node, suffix)`` query: whether some context takes the whole suffix."""
    order = sorted(range(len(queries)), key=lambda i: queries[i])
    nodes = np.array([queries[i][0] for i in order], dtype=np.int32)
    suffixes = [queries[i][1] for i in order]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in suffixes])
    data = np.frombuffer(b"".join(suffixes) or b"\0", dtype=np.uint8).copy()
    callee = auto.ref_callee.astype(np.int64)
    by_rule = np.argsort(callee, kind="stable")
    caller_offsets = np.zeros(len(auto.rule_start) + 1, dtype=np.int64)
    caller_offsets[1:] = np.cumsum(np.bincount(callee, minlength=len(auto.rule_start)))
    c = np.ascontiguousarray
    out = np.zeros(len(order), dtype=np.uint8)
    lib.sglc_context_accepts(
        c(auto.table, dtype=np.int32), c(auto.final, dtype=np.uint8), c(auto.has_bytes, dtype=np.uint8),
        c(auto.node_rule, dtype=np.int32), c(auto.ref_offsets, dtype=np.int64),
        c(auto.rule_start[auto.ref_callee], dtype=np.int32), c(auto.ref_return, dtype=np.int32),
        caller_offsets, c(auto.ref_return[by_rule], dtype=np.int32), nodes, offsets, data, len(order), out)
    result = [False] * len(queries)
    for j, i in enumerate(order):
        result[i] = bool(out[j])
    return result
