"""Moore partition refinement in C++ (``native/dfa_minimize.cpp`` through ctypes) for
rule_automaton.py's ``minimize``; None where native code is off or cannot be built (the numpy
loop there runs, and gives the same partition)."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sglc.native_library import load_library

SOURCE = Path(__file__).parent / "native" / "dfa_minimize.cpp"
_i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")


def _declare(lib: ctypes.CDLL) -> None:
    lib.sglc_moore_refine.restype = ctypes.c_int64
    lib.sglc_moore_refine.argtypes = [_i64p, ctypes.c_int64, ctypes.c_int64, _i64p]


def native_refiner() -> ctypes.CDLL | None:
    return load_library(SOURCE, _declare)


def moore_refine(lib: ctypes.CDLL, moves: np.ndarray, block: np.ndarray) -> np.ndarray:
    """The coarsest partition refining ``block`` [n] that ``moves`` [n, k] (targets, -1 none)
    respects: block ids per node in first-seen order."""
    moves = np.ascontiguousarray(moves, dtype=np.int64)
    out = np.ascontiguousarray(block, dtype=np.int64).copy()
    lib.sglc_moore_refine(moves, moves.shape[0], moves.shape[1] if moves.ndim == 2 else 0, out)
    return out
