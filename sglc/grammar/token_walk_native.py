"""The token classification walk (token_masks.py) in C++: ``native/token_walk.cpp`` through
ctypes. Same classes as the numpy walk, which stays the reference and the fallback where native
code is off or cannot be built (:func:`native_walker` returns None then).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sglc.native_library import load_library

from .automaton import Automaton

SOURCE = Path(__file__).parent / "native" / "token_walk.cpp"

_i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_i32p = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")
_u8p = np.ctypeslib.ndpointer(dtype=np.uint8, flags="C_CONTIGUOUS")

#: sglc_walk_status codes -> the EngineBudget limit they name
STATUS_LIMITS = {1: "max_precompute_cells", 2: "max_context_entries", 3: "max_compile_seconds"}


def _declare(lib: ctypes.CDLL) -> None:
    lib.sglc_walk_tokens.restype = ctypes.c_void_p
    lib.sglc_walk_tokens.argtypes = [_i32p, _u8p, _i64p, _i32p, _i32p, _i32p, _i32p, _u8p,
                                     _i32p, _u8p, _i32p, _i32p, _i32p, _i64p, ctypes.c_int64, ctypes.c_int64,
                                     _i64p, ctypes.c_int64, ctypes.c_int64, _u8p, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_double]
    lib.sglc_walk_status.restype = ctypes.c_int32
    lib.sglc_walk_status.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    lib.sglc_walk_num_exits.restype = ctypes.c_int64
    lib.sglc_walk_num_exits.argtypes = [ctypes.c_void_p]
    lib.sglc_walk_exits.restype = None
    lib.sglc_walk_exits.argtypes = [ctypes.c_void_p, _i64p, _i64p, _i64p]
    lib.sglc_walk_free.restype = None
    lib.sglc_walk_free.argtypes = [ctypes.c_void_p]


def native_walker() -> ctypes.CDLL | None:
    """The built walk library (declared), or None: the numpy walk runs."""
    return load_library(SOURCE, _declare)


def walk_tokens(lib: ctypes.CDLL, auto: Automaton, trie_walk: tuple[np.ndarray, ...], trie_depth: int,
                positions: np.ndarray, vocab_size: int, max_steps: int, max_exit_tokens: int,
                seconds_left: float) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], int, int]:
    """(accepted uint8 [P, ceil(V / 8)] packed bits (np.packbits order), exits (position row, trie node, exit node), status, value): status
    0 when the walk finished, else a key of :data:`STATUS_LIMITS` and the count that passed it.
    ``trie_walk``: the vocabulary trie in preorder (token_masks ``_TriePreorder.walk_arrays``)."""
    c = np.ascontiguousarray
    accepted = np.zeros((len(positions), (vocab_size + 7) // 8), dtype=np.uint8)
    args = [c(auto.table, dtype=np.int32), c(auto.final, dtype=np.uint8), c(auto.ref_offsets, dtype=np.int64),
            c(auto.ref_callee, dtype=np.int32), c(auto.ref_return, dtype=np.int32), c(auto.rule_start, dtype=np.int32),
            c(auto.node_rule, dtype=np.int32), c(auto.follow, dtype=np.uint8), *trie_walk, len(trie_walk[0]),
            int(trie_depth), c(positions, dtype=np.int64), len(positions), vocab_size, accepted,
            int(max_steps), int(max_exit_tokens), float(seconds_left)]
    handle = lib.sglc_walk_tokens(*args)
    try:
        value = ctypes.c_int64(0)
        status = int(lib.sglc_walk_status(handle, ctypes.byref(value)))
        n = int(lib.sglc_walk_num_exits(handle))
        exits = tuple(np.empty(n, dtype=np.int64) for _ in range(3))
        lib.sglc_walk_exits(handle, *exits)
    finally:
        lib.sglc_walk_free(handle)
    return accepted, exits, status, int(value.value)
