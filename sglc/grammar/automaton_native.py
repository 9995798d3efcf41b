"""The automaton build after the NFA (determinize, productive rules, trim, minimize, assembly,
nullability, FOLLOW bytes) in C++: ``native/automaton_build.cpp`` through ctypes. The same arrays
as the Python stages (rule_automaton.py, automaton.py), which stay the reference and the fallback
where native code is off or cannot be built (:func:`native_builder` returns None then).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sglc.native_library import load_library

from .rule_automaton import GrammarNFA

SOURCE = Path(__file__).parent / "native" / "automaton_build.cpp"
_i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_i32p = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")
_u8p = np.ctypeslib.ndpointer(dtype=np.uint8, flags="C_CONTIGUOUS")

#: sglc_automaton_status codes
TOO_MANY_NODES, OUT_OF_TIME, ROOT_MATCHES_NOTHING = 1, 2, 3


def _declare(lib: ctypes.CDLL) -> None:
    lib.sglc_automaton_build.restype = ctypes.c_void_p
    lib.sglc_automaton_build.argtypes = [ctypes.c_int64, _i32p, ctypes.c_int64, _i32p, ctypes.c_int64, _i32p,
                                         ctypes.c_int64, ctypes.c_int32, _i32p, ctypes.c_int64, ctypes.c_double]
    lib.sglc_automaton_status.restype = ctypes.c_int64
    lib.sglc_automaton_status.argtypes = [ctypes.c_void_p, _i64p, ctypes.POINTER(ctypes.c_int64)]
    lib.sglc_automaton_export.restype = None
    lib.sglc_automaton_export.argtypes = [ctypes.c_void_p, _i32p, _i32p, _i32p, _i32p, _u8p, _i64p, _i32p, _i32p,
                                          _u8p, _u8p]
    lib.sglc_automaton_free.restype = None
    lib.sglc_automaton_free.argtypes = [ctypes.c_void_p]


def native_builder() -> ctypes.CDLL | None:
    """The built library (declared), or None: the Python stages run."""
    return load_library(SOURCE, _declare)


@dataclass(frozen=True)
class BuiltRules:
    """What the native build returns: the productive kept rules (indices into the NFA's rules,
    in order) and the assembled arrays, as automaton.Automaton holds them."""

    rules: np.ndarray  # int32 [R]
    rule_start: np.ndarray
    node_rule: np.ndarray
    table: np.ndarray
    final: np.ndarray
    ref_offsets: np.ndarray
    ref_callee: np.ndarray
    ref_return: np.ndarray
    nullable: np.ndarray
    follow: np.ndarray


def build_rules(lib: ctypes.CDLL, nfa: GrammarNFA, ends: list[tuple[int, int]], max_nodes: int,
                seconds_left: float) -> tuple[BuiltRules | None, int, int]:
    """(the built rules or None, status, value): status 0 when done, else a code above and, for
    TOO_MANY_NODES, the node count that passed ``max_nodes``."""
    # NOTE: nothing in the (src, ...) edge lists is negative, and -1 makes an empty list an array
    eps, byte, refs = (np.array(e or [-1], dtype=np.int32) for e in (nfa.eps_edges, nfa.byte_edges, nfa.ref_edges))
    rank = {name: i for i, name in enumerate(sorted(nfa.rules))}
    rules = np.array([(s, e, rank[name]) for (s, e), name in zip(ends, nfa.rules)], dtype=np.int32)
    handle = lib.sglc_automaton_build(nfa.num_nodes, eps, len(nfa.eps_edges) // 2, byte, len(nfa.byte_edges) // 4,
                                      refs, len(nfa.ref_edges) // 3, len(ends), rules, int(max_nodes),
                                      float(seconds_left))
    try:
        sizes = np.zeros(3, dtype=np.int64)
        value = ctypes.c_int64(0)
        status = int(lib.sglc_automaton_status(handle, sizes, ctypes.byref(value)))
        if status:
            return None, status, int(value.value)
        r, n, m = (int(x) for x in sizes)
        out = BuiltRules(np.empty(r, np.int32), np.empty(r, np.int32), np.empty(n, np.int32),
                         np.empty((n, 256), np.int32), np.empty(n, np.uint8), np.empty(n + 1, np.int64),
                         np.empty(m, np.int32), np.empty(m, np.int32), np.empty(r, np.uint8),
                         np.empty((r, 256), np.uint8))
        lib.sglc_automaton_export(handle, out.rules, out.rule_start, out.node_rule, out.table, out.final,
                                  out.ref_offsets, out.ref_callee, out.ref_return, out.nullable, out.follow)
    finally:
        lib.sglc_automaton_free(handle)
    return out, 0, 0
