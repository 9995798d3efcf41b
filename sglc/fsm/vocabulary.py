"""A tokenizer's vocabulary as raw bytes, with the prefix trie used to build token indexes.

Token ``i``'s entry is the exact bytes it contributes to the text (byte-level BPE tokens may be
partial UTF-8), or ``None`` for tokens that never appear in constrained text (special/control
tokens, empty tokens). ``eos_token_ids`` are the tokens that end a generation; the token index
allows them exactly in final states.

The trie is stored as flat numpy arrays in breadth-first order (node 0 is the root, the
children of a node are contiguous and sorted by byte) so token walking is vectorized.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Sequence

import numpy as np


@dataclass(frozen=True, eq=False)
class Trie:
    """Flat prefix trie. For node ``n``: its children are nodes ``child_start[n]`` ..
    ``child_start[n] + child_count[n] - 1``; ``node_byte[n]`` is the byte on the edge into
    ``n``; ``node_token[n]`` is the (lowest) token id spelling exactly node ``n``'s bytes, or
    -1. ``duplicate_tokens`` lists ``(token id at the node, other token id)`` pairs for tokens
    whose bytes repeat an earlier token's."""

    child_start: np.ndarray
    child_count: np.ndarray
    node_byte: np.ndarray
    node_token: np.ndarray
    duplicate_tokens: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.child_count.shape[0])


class Vocabulary:
    """Token id -> bytes, plus the end-of-sequence ids. Immutable; build once per tokenizer."""

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_token_ids: Iterable[int] = (),
        excluded_ids: Iterable[int] = (),
    ) -> None:
        eos = tuple(sorted(set(eos_token_ids)))
        # NOTE: EOS tokens end the text; they never spell any of it.
        excluded = set(excluded_ids) | set(eos)
        tokens: list[bytes | None] = []
        for i, tb in enumerate(token_bytes):
            if tb is not None and not isinstance(tb, (bytes, bytearray)):
                raise TypeError(f"token {i} must be bytes or None, not {type(tb).__name__}")
            # NOTE: empty tokens would be allowed everywhere without making progress.
            tokens.append(None if (i in excluded or not tb) else bytes(tb))
        self._tokens = tuple(tokens)
        for e in eos:
            if not 0 <= e < len(tokens):
                raise ValueError(f"eos token id {e} outside the vocabulary (size {len(tokens)})")
        self._eos = eos

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> "Vocabulary":
        """From an object with ``all_token_bytes``, ``special_token_ids`` and
        ``stop_token_ids`` (``sglc_runtime.model.tokenizer.Tokenizer`` has them)."""
        return cls(
            tokenizer.all_token_bytes,
            eos_token_ids=tokenizer.stop_token_ids,
            excluded_ids=tokenizer.special_token_ids,
        )

    @classmethod
    def from_byte_level_strings(
        cls, tokens: Sequence[str], eos_token_ids: Iterable[int] = (), excluded_ids: Iterable[int] = ()
    ) -> "Vocabulary":
        """From GPT-2 style byte-level token strings (``'Ġthe'``), as stored in GGUF files."""
        table = {ch: b for b, ch in byte_level_alphabet().items()}
        out: list[bytes | None] = []
        excluded = set(excluded_ids)
        for i, tok in enumerate(tokens):
            if i in excluded or any(ch not in table for ch in tok):
                out.append(None)
            else:
                out.append(bytes(table[ch] for ch in tok))
        return cls(out, eos_token_ids=eos_token_ids, excluded_ids=excluded)

    @property
    def size(self) -> int:
        """Number of token ids (including excluded ones)."""
        return len(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def token_bytes(self, token_id: int) -> bytes | None:
        return self._tokens[token_id]

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    @cached_property
    def fingerprint(self) -> str:
        """A hex digest of every token's bytes and the eos ids."""
        h = hashlib.sha256()
        h.update(f"{len(self._tokens)}|{self._eos}|".encode())
        for tb in self._tokens:
            if tb is None:
                h.update(b"\xff\xff")
            else:
                h.update(len(tb).to_bytes(4, "little"))
                h.update(tb)
        return h.hexdigest()

    @cached_property
    def trie(self) -> Trie:
        """The prefix trie of all non-excluded tokens (built on first use, then kept)."""
        prefixes: set[bytes] = {b""}
        for tb in self._tokens:
            if tb is not None:
                for i in range(1, len(tb) + 1):
                    prefixes.add(tb[:i])
        # NOTE: sorting by (length, bytes) is breadth-first order with every node's children
        # contiguous and sorted by byte (parents at one depth are sorted the same way).
        order = sorted(prefixes, key=lambda p: (len(p), p))
        node_of = {p: i for i, p in enumerate(order)}
        n = len(order)
        child_start = np.zeros(n, dtype=np.int64)
        child_count = np.zeros(n, dtype=np.int64)
        node_byte = np.zeros(n, dtype=np.int64)
        for i in range(n - 1, 0, -1):  # backwards: the last write is the first child
            p = order[i]
            parent = node_of[p[:-1]]
            child_start[parent] = i
            child_count[parent] += 1
            node_byte[i] = p[-1]
        node_token = np.full(n, -1, dtype=np.int64)
        duplicates: list[tuple[int, int]] = []
        for i, tb in enumerate(self._tokens):
            if tb is None:
                continue
            node = node_of[tb]
            if node_token[node] < 0:
                node_token[node] = i
            else:
                duplicates.append((int(node_token[node]), i))
        dup = np.array(duplicates, dtype=np.int64).reshape(-1, 2)
        return Trie(child_start, child_count, node_byte, node_token, dup)


def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table
