"""The character DFA re-expressed over UTF-8 bytes.

States ``0..num_char_states-1`` are the character DFA's states with the same ids (same
initial, same finals); the states after them are *interior* states, reached in the middle of
a multi-byte character. Every move on a code-point class becomes a small tree of byte moves
(one per ``utf8_sequences`` piece); interior states are shared whenever their remaining byte
sequences and targets are the same, so the byte DFA stays close to minimal.

A vocabulary token is a byte string, and byte-level BPE tokens may end mid-character: walking
a token through this DFA simply lands in an interior state, which is correct.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .budget import CompileMeter, as_meter
from .dfa import DFA
from .utf8 import ByteSeq, utf8_sequences

_Items = frozenset[tuple[ByteSeq, int]]


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """An immutable DFA over bytes; ``table[state, byte]`` is the next state or -1."""

    table: np.ndarray
    initial: int
    finals: frozenset[int]
    num_char_states: int

    @property
    def num_states(self) -> int:
        return int(self.table.shape[0])

    def is_final(self, state: int) -> bool:
        return state in self.finals

    def step(self, state: int, byte: int) -> int:
        return int(self.table[state, byte])

    def walk(self, data: bytes, state: int | None = None) -> int:
        """The state after ``data`` (from ``state``, default initial); -1 when rejected."""
        s = self.initial if state is None else state
        table = self.table
        for b in data:
            s = int(table[s, b])
            if s < 0:
                return -1
        return s

    def accepts(self, data: bytes) -> bool:
        s = self.walk(data)
        return s >= 0 and s in self.finals

    def allowed_bytes(self, state: int) -> list[int]:
        """The byte values with a move out of ``state``."""
        return np.flatnonzero(self.table[state] >= 0).tolist()

    @cached_property
    def _forced(self) -> tuple[bytes, ...]:
        table = self.table
        single = (table >= 0).sum(axis=1) == 1
        memo: dict[int, bytes] = {}
        for start in range(self.num_states):
            chain: list[tuple[int, int]] = []
            s = start
            # NOTE: no forced cycle exists: a cycle of single-move non-final states could
            # never reach a final state, and the character DFA has no dead states.
            while s not in memo and single[s] and s not in self.finals:
                b = int(np.flatnonzero(table[s] >= 0)[0])
                chain.append((s, b))
                s = int(table[s, b])
            tail = memo.setdefault(s, b"")
            for t, b in reversed(chain):
                tail = bytes([b]) + tail
                memo[t] = tail
        return tuple(memo[s] for s in range(self.num_states))

    def forced_bytes(self, state: int) -> bytes:
        """The longest byte string forced from ``state`` (stops at a final state or a branch)."""
        return self._forced[state]


def build_byte_dfa(dfa: DFA, meter: CompileMeter | None = None) -> ByteDFA:
    """Expand every code-point move of ``dfa`` into UTF-8 byte moves. Budget (``meter``): the
    byte DFA's states are counted as interior states are added, the clock once per state."""
    meter = as_meter(meter)
    meter.check("max_byte_states", dfa.num_states, "byte DFA states")
    class_seqs: list[list[ByteSeq]] = []
    for c in range(dfa.num_classes):
        seqs: list[ByteSeq] = []
        for lo, hi in dfa.class_ranges(c):
            seqs.extend(utf8_sequences(lo, hi))
        class_seqs.append(seqs)
    rows: list[list[int]] = [[-1] * 256 for _ in range(dfa.num_states)]
    interior: dict[_Items, int] = {}

    def fill(row: list[int], items: list[tuple[ByteSeq, int]]) -> None:
        cuts = sorted({p for seq, _ in items for p in (seq[0][0], seq[0][1] + 1)})
        for a, b_end in zip(cuts, cuts[1:]):
            b = b_end - 1
            covering = [(seq, t) for seq, t in items if seq[0][0] <= a and b <= seq[0][1]]
            if not covering:
                continue
            if len(covering[0][0]) == 1:
                # NOTE: UTF-8 is prefix-free and classes are disjoint, so a complete
                # character here is the only candidate for these bytes.
                assert len(covering) == 1, covering
                target = covering[0][1]
            else:
                assert all(len(seq) > 1 for seq, _ in covering), covering
                key = frozenset((seq[1:], t) for seq, t in covering)
                target = interior.get(key, -1)
                if target < 0:
                    target = interior[key] = len(rows)
                    rows.append([-1] * 256)
                    meter.check("max_byte_states", len(rows), "byte DFA states")
                    fill(rows[target], list(key))
            for byte in range(a, b + 1):
                row[byte] = target

    for s in range(dfa.num_states):
        meter.check_time("building the byte DFA")
        items = [(seq, t) for c, t in dfa.out_edges(s) for seq in class_seqs[c]]
        if items:
            fill(rows[s], items)
    table = np.array(rows, dtype=np.int32)
    table.setflags(write=False)
    return ByteDFA(table, dfa.initial, dfa.finals, dfa.num_states)
