"""Grammar automaton x vocabulary -> per-position token classes (xgrammar's adaptive mask idea).

A *position* is an automaton node with byte edges: the only nodes a matcher's stack top can sit
on. For each position ``n`` every vocabulary token is classified by walking the vocabulary's
prefix trie from ``n``, vectorized with numpy over many positions at once. The walk runs the
token through the grammar *below* ``n``: it enters called rules (pushing return nodes on an
inner stack, interned) and comes back out of them, so only one thing depends on the request's
stack: leaving ``n``'s own rule.

- **accepted**: all its bytes are taken without leaving ``n``'s rule: whatever the stack below
  holds, the token is allowed when ``n`` is a live stack top. Stored as packed bits, one row of
  ``ceil(vocab / 8)`` bytes per position;
- **context-dependent**: after ``k >= 1`` bytes it reaches a node ``m`` where ``n``'s rule may
  end (inner stack empty), its next byte is in the rule's FOLLOW set and some stack context
  could take the rest (context_check.py: a walk whose pops past the bottom go to every call
  site of the rule, run once per (exit node, suffix) at compile time). Whether it is allowed
  depends on the stack below, so the matcher checks it at run time: from the stack ``(m,
  parent)``, can the suffix ``token[k:]`` be consumed? Entries are grouped by ``(m, suffix)``
  so one run-time walk decides every token of a group;
- **rejected**: everything else (never looked at again).

A token that is accepted at ``n`` is never also context-dependent there. Tokens spelled by the
same bytes share a trie node and are classified together.

Budget: positions x trie nodes (the walk's worst case) against ``max_precompute_cells`` before
the walk; context-dependent entries against ``max_context_entries`` as they are found; the
clock after each chunk of positions.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from sglc.fsm.vocabulary import Vocabulary

from .automaton import Automaton
from .automaton_budget import EngineMeter
from .context_check import contexts_accept
from .token_walk_native import native_walker, walk_tokens

#: Positions x vocabulary walked at once (bounds the frontier arrays, ~100 MB at worst).
_WALK_CELLS = 2**21


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """The per-position classification (see the module docstring). Immutable arrays.

    - ``position_of[node]``: row of the node in ``accepted`` (-1: not a position);
    - ``accepted``: uint8 [P, ceil(V / 8)], packed bits (``np.packbits`` order);
    - context-dependent groups: position ``p`` owns groups ``group_offsets[p]:group_offsets[p+1]``;
      group ``g`` is exit node ``group_node[g]``, suffix ``suffixes[g]`` and tokens
      ``group_tokens[token_offsets[g]:token_offsets[g+1]]``.
    """

    vocab_size: int
    position_of: np.ndarray  # int32 [N]
    accepted: np.ndarray  # uint8 [P, ceil(V/8)]
    group_offsets: np.ndarray  # int64 [P + 1]
    group_node: np.ndarray  # int32 [G]
    suffixes: tuple[bytes, ...]  # [G]
    token_offsets: np.ndarray  # int64 [G + 1]
    group_tokens: np.ndarray  # int32

    @property
    def num_positions(self) -> int:
        return int(self.accepted.shape[0])

    @property
    def num_context_tokens(self) -> int:
        return int(len(self.group_tokens))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.position_of, self.accepted, self.group_offsets, self.group_node,
                                      self.token_offsets, self.group_tokens)) + sum(map(len, self.suffixes))


@dataclass(frozen=True, eq=False)
class _TriePreorder:
    """Depth-first numbering of the vocabulary trie: the tokens below node ``c`` (itself
    included) are ``tokens[first[c]:last[c]]``; ``depth[c]`` is the length of c's bytes;
    ``order`` lists the nodes in preorder and ``end[c]`` is where c's subtree ends in it."""

    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray
    depth: np.ndarray
    order: np.ndarray  # trie node at each preorder index
    end: np.ndarray  # per trie node: the preorder index after its subtree
    node_byte: np.ndarray  # the trie's, by node
    node_token: np.ndarray

    @cached_property
    def max_depth(self) -> int:
        return int(self.depth.max(initial=0))

    @cached_property
    def walk_arrays(self) -> tuple[np.ndarray, ...]:
        """What the native walk reads, per preorder index: (trie node, byte, token, depth,
        subtree end, tokens at or below), contiguous: a depth-first walk is a forward scan."""
        o = self.order
        return (o.astype(np.int32), self.node_byte[o].astype(np.uint8), self.node_token[o].astype(np.int32),
                self.depth[o].astype(np.int32), self.end[o].astype(np.int32), (self.last - self.first)[o].astype(np.int64))


@lru_cache(maxsize=4)
def _preorder(vocab: Vocabulary) -> _TriePreorder:
    trie = vocab.trie
    n = trie.num_nodes
    parent = np.zeros(n, dtype=np.int64)
    parent[1:] = np.repeat(np.arange(n), trie.child_count)
    depth = np.zeros(n, dtype=np.int64)
    # NOTE: BFS order: a node's parent comes before it, so one forward pass fills depths.
    for lo, hi in _levels(trie):
        depth[lo:hi] = depth[parent[lo:hi]] + 1
    size = np.ones(n, dtype=np.int64)
    levels = _levels(trie)
    for lo, hi in reversed(levels):
        np.add.at(size, parent[lo:hi], size[lo:hi])
    pre = np.zeros(n, dtype=np.int64)
    csum = np.concatenate([[0], np.cumsum(size)])
    for lo, hi in levels:
        kids = np.arange(lo, hi)
        first_sibling = trie.child_start[parent[kids]]
        before = csum[kids] - csum[first_sibling]  # sizes of the earlier siblings
        pre[kids] = pre[parent[kids]] + 1 + before
    order = np.empty(n, dtype=np.int64)
    order[pre] = np.arange(n)
    tok_in_order = trie.node_token[order]
    has = tok_in_order >= 0
    count_before = np.concatenate([[0], np.cumsum(has)])
    first = count_before[pre]
    last = count_before[pre + size]
    return _TriePreorder(first, last, tok_in_order[has], depth, order, pre + size, trie.node_byte, trie.node_token)


def _levels(trie) -> list[tuple[int, int]]:
    """``[lo, hi)`` node ranges of each trie depth >= 1 (BFS order keeps depths contiguous)."""
    out = []
    lo, hi = 0, 1
    while True:
        starts = trie.child_start[lo:hi][trie.child_count[lo:hi] > 0]
        if not len(starts):
            return out
        nlo = int(starts.min())
        nhi = int((trie.child_start[lo:hi] + trie.child_count[lo:hi]).max())
        out.append((nlo, nhi))
        lo, hi = nlo, nhi


_PAIR = 2**31  # node and stack ids stay below it (EngineBudget bounds both far lower)


class _InnerStacks:
    """Return-node stacks the walk pushes while a token runs through called rules (interned:
    id -> (return node, parent id), -1 is the empty stack)."""

    def __init__(self) -> None:
        self.node: list[int] = []
        self.parent: list[int] = []
        self._ids: dict[int, int] = {}  # pair key -> id
        self._arrays = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(node, parent) per id as arrays, rebuilt only after new stacks were interned."""
        if self._arrays[0].shape[0] != len(self.node):
            self._arrays = (np.array(self.node, dtype=np.int64), np.array(self.parent, dtype=np.int64))
        return self._arrays

    def intern(self, ret: np.ndarray, parent: np.ndarray) -> np.ndarray:
        if not len(ret):
            return np.zeros(0, dtype=np.int64)
        # NOTE: one int64 key per pair (node ids and stack ids < 2**31): a 1-D unique, far
        # cheaper than np.unique over rows
        keys, inverse = np.unique(ret * _PAIR + (parent + 1), return_inverse=True)
        ids = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys.tolist()):
            got = self._ids.get(key)
            if got is None:
                got = self._ids[key] = len(self.node)
                self.node.append(key // _PAIR)
                self.parent.append(key % _PAIR - 1)
            ids[i] = got
        return ids[inverse.reshape(-1)]


def _close(cols: list[np.ndarray], auto: Automaton, stacks: _InnerStacks, num_trie: int) -> list[np.ndarray]:
    """Follow rule calls (push the callee's start, remember the return node) and ends of called
    rules (pop) for frontier entries ``[origin, trie node, node, inner stack]``; entries that
    end the origin's own rule (empty inner stack) are left for the exit check."""
    o, t, d, s = cols
    need = (auto.ref_count[d] > 0) | (auto.final[d] & (s >= 0))
    if not need.any():
        return cols
    work = [c[need] for c in cols]
    seen = _pair_keys(work, num_trie)
    generated: list[list[np.ndarray]] = []
    while len(work[0]):
        wo, wt, wd, ws = work
        rc = auto.ref_count[wd]
        total = int(rc.sum())
        rep = np.repeat(np.arange(len(wo)), rc)
        ri = np.repeat(auto.ref_offsets[wd], rc) + (np.arange(total) - np.repeat(np.cumsum(rc) - rc, rc))
        pushed = [wo[rep], wt[rep], auto.rule_start[auto.ref_callee[ri]].astype(np.int64),
                  stacks.intern(auto.ref_return[ri].astype(np.int64), ws[rep])]
        sel = auto.final[wd] & (ws >= 0)
        popped_from = ws[sel]
        node_arr, parent_arr = stacks.arrays()
        popped = [wo[sel], wt[sel], node_arr[popped_from], parent_arr[popped_from]]
        cand = [np.concatenate([a, b]) for a, b in zip(pushed, popped)]
        keys = _pair_keys(cand, num_trie)
        fresh = _new_keys(seen, keys)
        work = [c[fresh] for c in cand]
        seen = (np.concatenate([seen[0], keys[0][fresh]]), np.concatenate([seen[1], keys[1][fresh]]))
        if len(work[0]):
            generated.append(work)
    if not generated:
        return cols
    gen = [np.concatenate([g[k] for g in generated]) for k in range(4)]
    # Drop generated entries the frontier already holds (two derivations of one configuration);
    # only entries at the same trie nodes can be equal, so the check stays near-linear.
    same = np.isin(t, np.unique(gen[1]))
    if same.any():
        fresh = _new_keys(_pair_keys([c[same] for c in cols], num_trie), _pair_keys(gen, num_trie))
        gen = [c[fresh] for c in gen]
    return [np.concatenate([c, g]) for c, g in zip(cols, gen)]


def _pair_keys(cols: list[np.ndarray], num_trie: int) -> tuple[np.ndarray, np.ndarray]:
    """Two int64 keys identifying frontier entries ``[origin, trie node, node, stack]``."""
    o, t, d, s = cols
    # NOTE: origin x trie nodes is at most max_precompute_cells; node and stack ids < 2**31.
    return o * num_trie + t, (d << 32) + (s + 1)


def _new_keys(seen: tuple[np.ndarray, np.ndarray], keys: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """bool per entry of ``keys``: not in ``seen`` and the first of its value in ``keys``."""
    n_seen = len(seen[0])
    k1 = np.concatenate([seen[0], keys[0]])
    k2 = np.concatenate([seen[1], keys[1]])
    order = np.lexsort((np.arange(len(k1)), k2, k1))  # equal keys: seen ones first
    a, b = k1[order], k2[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    out = np.zeros(len(keys[0]), dtype=bool)
    pick = order[first & (order >= n_seen)] - n_seen
    out[pick] = True
    return out


def classify_tokens(auto: Automaton, vocab: Vocabulary, meter: EngineMeter, native: bool = True) -> TokenClasses:
    """Classify every token at every position of ``auto`` (see the module docstring).

    The walk runs the token through the grammar below the position: it enters called rules
    (pushing return nodes on an inner stack) and comes back out of them, so only leaving the
    position's own rule (a pop below it) makes a token context-dependent. It runs in C++
    (token_walk_native.py) unless ``native`` is False or native code is off or cannot be built;
    the numpy walk here gives the same classes."""
    trie = vocab.trie
    positions = np.flatnonzero(auto.has_bytes).astype(np.int64)
    position_of = np.full(auto.num_nodes, -1, dtype=np.int32)
    position_of[positions] = np.arange(len(positions), dtype=np.int32)
    cells = len(positions) * trie.num_nodes
    meter.check("max_precompute_cells", cells,
                f"token precompute cells ({len(positions):,} positions x {trie.num_nodes:,} trie nodes)")
    pre = _preorder(vocab)
    lib = native_walker() if native else None
    if lib is not None:
        accepted, exits = _walk_native(lib, auto, vocab, positions, pre, meter)
    else:
        accepted, exits = _walk_numpy(auto, vocab, positions, pre, meter)
    _add_duplicates(vocab, accepted)
    groups = _group_exits(vocab, pre, accepted, exits, len(positions), meter, auto, native)
    return TokenClasses(vocab.size, position_of, accepted, *groups)


def _walk_native(lib, auto: Automaton, vocab: Vocabulary, positions: np.ndarray, pre: _TriePreorder,
                 meter: EngineMeter) -> tuple[np.ndarray, list]:
    budget = meter.budget
    accepted, exits, status, value = walk_tokens(
        lib, auto, pre.walk_arrays, pre.max_depth, positions, vocab.size,
        budget.max_precompute_cells, budget.max_context_entries, meter.deadline - time.monotonic())
    if status == 1:
        meter.check("max_precompute_cells", value, "token precompute steps")
    elif status == 2:
        meter.check("max_context_entries", value, "context-dependent token entries")
    elif status == 3:
        meter.check_time("classifying tokens at grammar positions")
    if status:  # NOTE: a check above raises; this would mean the walk and the meter disagree
        raise RuntimeError(f"the native token walk stopped (status {status}) under no limit")
    return accepted, [exits]


def _walk_numpy(auto: Automaton, vocab: Vocabulary, positions: np.ndarray, pre: _TriePreorder,
                meter: EngineMeter) -> tuple[np.ndarray, list]:
    """The walk over many positions at once, one trie level at a time (see classify_tokens):
    (accepted as packed bits, exits), as the native walk returns them."""
    trie = vocab.trie
    V = vocab.size
    accepted = np.zeros((len(positions), V), dtype=bool)
    flat = auto.table.reshape(-1).astype(np.int64)
    follow_flat = auto.follow.reshape(-1)
    node_rule = auto.node_rule.astype(np.int64)
    final = auto.final
    stacks = _InnerStacks()
    exits: list[tuple[np.ndarray, ...]] = []
    num_exit_tokens = 0
    walked = 0
    chunk = max(1, _WALK_CELLS // max(V, 1))
    for i in range(0, len(positions), chunk):
        origins = positions[i:i + chunk]
        cols = [np.arange(i, i + len(origins), dtype=np.int64),  # position row
                np.zeros(len(origins), dtype=np.int64),  # trie node
                origins.copy(),  # automaton node
                np.full(len(origins), -1, dtype=np.int64)]  # inner stack
        level = 0
        while len(cols[0]):
            if level >= 1:
                cols = _close(cols, auto, stacks, trie.num_nodes)
            f_origin, f_node, f_state, f_stack = cols
            counts = trie.child_count[f_node]
            total = int(counts.sum())
            if total == 0:
                break
            walked += total
            # NOTE: the frontier can outgrow positions x trie nodes when rules are entered;
            # the same limit bounds what is actually walked.
            meter.check("max_precompute_cells", walked, "token precompute steps")
            first = np.cumsum(counts) - counts
            child = np.repeat(trie.child_start[f_node] - first, counts) + np.arange(total)
            state = np.repeat(f_state, counts)
            stack = np.repeat(f_stack, counts)
            origin = np.repeat(f_origin, counts)
            byte = trie.node_byte[child]
            if level >= 1:
                # The position's own rule may end here and `byte` may follow it: the subtree of
                # `child` depends on the stack below (context-dependent).
                ex = np.flatnonzero(final[state] & (stack < 0) & follow_flat[node_rule[state] * 256 + byte])
                if len(ex):
                    c = child[ex]
                    num_exit_tokens += int((pre.last[c] - pre.first[c]).sum())
                    meter.check("max_context_entries", num_exit_tokens, "context-dependent token entries")
                    exits.append((origin[ex], c, state[ex]))
            nxt = flat[state * 256 + byte]
            keep = np.flatnonzero(nxt >= 0)
            cols = [origin[keep], child[keep], nxt[keep], stack[keep]]
            tok = trie.node_token[cols[1]]
            has = tok >= 0
            accepted[cols[0][has], tok[has]] = True
            level += 1
            meter.check_time("classifying tokens at grammar positions")
    return np.packbits(accepted, axis=1), exits


def _add_duplicates(vocab: Vocabulary, packed: np.ndarray) -> None:
    """Tokens whose bytes repeat an earlier token's share its classification (in the packed bits:
    a duplicate's bit is 0 until here)."""
    dup = vocab.trie.duplicate_tokens.astype(np.int64)
    if len(dup) and len(packed):
        a, b = dup[:, 0], dup[:, 1]
        bits = (packed[:, a >> 3] >> (7 - (a & 7)).astype(np.uint8)) & 1  # [P, D]
        rows = np.arange(len(packed))[:, None].repeat(len(dup), axis=1)
        np.bitwise_or.at(packed, (rows, np.broadcast_to(b >> 3, bits.shape)),
                         (bits << (7 - (b & 7)).astype(np.uint8)).astype(np.uint8))


def _group_exits(vocab: Vocabulary, pre: _TriePreorder, accepted: np.ndarray, exits, num_positions: int,
                 meter: EngineMeter, auto: Automaton, native: bool = True):
    """Context-dependent entries grouped by (position, exit node, suffix), tokens sorted."""
    by_dup: dict[int, list[int]] = {}
    for a, b in vocab.trie.duplicate_tokens.tolist():
        by_dup.setdefault(a, []).append(b)
    groups: dict[tuple[int, int, bytes], set[int]] = {}
    for origins, children, states in exits:
        for o, c, m in zip(origins.tolist(), children.tolist(), states.tolist()):
            k = int(pre.depth[c]) - 1  # bytes taken inside the rule before leaving it
            row = accepted[o]  # packed bits
            for t in pre.tokens[pre.first[c]:pre.last[c]].tolist():
                for tt in [t] + by_dup.get(t, []):
                    if not (int(row[tt >> 3]) >> (7 - (tt & 7))) & 1:
                        groups.setdefault((o, m, vocab.token_bytes(tt)[k:]), set()).add(tt)
    meter.check_time("grouping context-dependent tokens")
    keys = sorted(k for k, ok in zip(groups, contexts_accept(auto, [(m, suffix) for _, m, suffix in groups],
                                                              native)) if ok)
    meter.check_time("pruning context-dependent tokens")
    group_offsets = np.zeros(num_positions + 1, dtype=np.int64)
    np.add.at(group_offsets, np.array([k[0] + 1 for k in keys], dtype=np.int64), 1)
    group_offsets = np.cumsum(group_offsets)
    group_node = np.array([k[1] for k in keys], dtype=np.int32)
    suffixes = tuple(k[2] for k in keys)
    lists = [sorted(groups[k]) for k in keys]
    token_offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    token_offsets[1:] = np.cumsum([len(x) for x in lists])
    group_tokens = np.array([t for x in lists for t in x], dtype=np.int32)
    return group_offsets, group_node, suffixes, token_offsets, group_tokens
