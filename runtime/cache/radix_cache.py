"""RadixCache: SGLang's RadixAttention prefix cache over token-granular KV slots.

A radix tree keyed by token ids; each edge stores its tokens (``key``, a Python list) and their
KV slots (``value``, a 1-D int64 array of the pool's ``arrays``: torch tensors for the torch
engine, numpy for the torch-free one). Cached and running tokens share one ``KVSlotPool``: the tree
owns the slots stored in it, a running request owns the slots in its table row beyond its
locked prefix.

Ownership rules the helpers below keep:
    - ``match_prefix`` returns slots the tree owns; they stay valid only while the returned
      node is locked (``inc_lock``), because ``evict`` may free unlocked nodes.
    - ``insert(ids, slots)`` takes ownership of ``slots[present:]`` and returns ``present``;
      the caller still owns ``slots[:present]`` and must free the ones that are its own
      duplicates (``cache_finished_req`` / ``cache_unfinished_req`` do this).

Eviction is LRU among leaves unless program hints say otherwise: ``retention`` (retention.py)
keeps the texts hinted requests ended with, ordered by their programs' expected next use.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Sequence

from .kv_pool import KVSlotPool
from .retention import RetentionTable
from .token_prefix import common_prefix_len

if TYPE_CHECKING:  # NOTE: the torch engine's table (torch); the torch-free engine has none
    from .req_slot_table import ReqSlotTable


class TreeNode:
    """One edge of the radix tree (the root has an empty key)."""

    __slots__ = ("children", "parent", "key", "value", "lock_ref", "last_access", "id")

    def __init__(self, node_id: int, parent: TreeNode | None = None, value: Any = None):
        self.children: dict[int, TreeNode] = {}  # first token of the child's key -> child
        self.parent = parent
        self.key: list[int] = []
        self.value: Any = value  # NOTE: the pool's empty array until the node gets its tokens
        self.lock_ref = 0  # NOTE: number of locks whose path root..last_node passes here
        self.last_access = 0
        self.id = node_id

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, len={len(self.key)}, lock={self.lock_ref})"


class MatchResult(NamedTuple):
    """``slots`` of the longest cached prefix of the query, and the node where it ends."""

    slots: Any
    last_node: TreeNode

    @property
    def prefix_len(self) -> int:
        return len(self.slots)


class CachedRequest(Protocol):
    """The cache handles of a running request that ``cache_finished_req`` and
    ``cache_unfinished_req`` read and rewrite (``scheduling.request.Req`` has them).

    - ``req_row``: its row of the ReqSlotTable (None once released);
    - ``kv_len``: leading tokens of ``fill_ids`` with KV slots in that row;
    - ``prefix_indices`` / ``last_node``: the cached prefix it holds a lock on;
    - ``hint``: its ProgramHint or None (the text it ends with is retained for its program).
    """

    req_row: int | None
    kv_len: int
    prefix_indices: Any
    last_node: TreeNode | None
    hint: Any

    @property
    def fill_ids(self) -> list[int]: ...


class RadixCache:
    """Prefix cache with leaf eviction (LRU, or by program hints: ``retention``) and path locks.

    Sizes: every cached token is either *evictable* (on a node with ``lock_ref == 0``) or
    *protected*; ``total_size() == evictable_size() + protected_size()``.

    With ``disable=True`` nothing is ever stored: ``match_prefix`` returns an empty prefix at
    the root, ``insert`` stores nothing and returns 0 (the caller keeps all its slots),
    ``cache_finished_req`` frees all the request's slots and ``cache_unfinished_req`` does
    nothing.
    """

    def __init__(self, pool: KVSlotPool, disable: bool = False, *, hinted_share: float = 0.5,
                 retention: RetentionTable | None = None):
        """``hinted_share``: the most of the pool program hints may pin (see retention.py)."""
        if not 0.0 <= hinted_share <= 1.0:
            raise ValueError(f"hinted_share must be in [0, 1], got {hinted_share}")
        self.pool = pool
        self.arrays = pool.arrays
        self.disable = disable
        self.retention = retention if retention is not None else RetentionTable(int(pool.num_slots * hinted_share))
        self.reset_tree()

    def reset_tree(self) -> None:
        """Drop the tree WITHOUT freeing its slots (use ``reset`` to flush)."""
        self._next_id = 0
        self._clock = 0
        self.root = self._new_node(None)
        self.root.lock_ref = 1  # NOTE: the root is never evictable
        self._evictable = 0
        self._protected = 0
        self.retention.clear()

    def _new_node(self, parent: TreeNode | None) -> TreeNode:
        node = TreeNode(self._next_id, parent, self.arrays.empty())
        self._next_id += 1
        return node

    # --- queries -------------------------------------------------------------------------
    def evictable_size(self) -> int:
        """Cached tokens on unlocked nodes (what ``evict`` can free)."""
        return self._evictable

    def protected_size(self) -> int:
        """Cached tokens on nodes locked by some request."""
        return self._protected

    def total_size(self) -> int:
        return self._evictable + self._protected

    def match_prefix(self, token_ids: Sequence[int]) -> MatchResult:
        """Longest cached prefix of ``token_ids``.

        Changes the tree's shape only: an edge the match ends inside is split so that
        ``last_node`` ends exactly at the match. Marks the matched path as recently used.
        The slots are safe to use only after ``inc_lock(last_node)``.
        """
        if self.disable or not len(token_ids):
            return MatchResult(self.arrays.empty(), self.root)
        node, _, values = self._walk(_as_list(token_ids), collect=True)
        slots = values[0] if len(values) == 1 else self.arrays.cat(values)
        return MatchResult(slots, node)

    def peek_prefix_len(self, token_ids: Sequence[int]) -> int:
        """Length of the longest cached prefix; changes nothing (no split, no LRU touch)."""
        if self.disable:
            return 0
        key = _as_list(token_ids)
        node, pos, n = self.root, 0, len(key)
        while pos < n:
            child = node.children.get(key[pos])
            if child is None:
                break
            m = len(child.key)
            if key[pos : pos + m] != child.key:
                return pos + common_prefix_len(child.key, key[pos : pos + m])
            node, pos = child, pos + m
        return pos

    # --- commands ------------------------------------------------------------------------
    def insert(self, token_ids: Sequence[int], slots: Any, *, hint: Any = None, rank: int = 0) -> int:
        """Cache ``token_ids`` with their ``slots``; returns how many leading tokens were
        ALREADY cached. The tree takes ownership of ``slots[returned:]``; the new tokens are
        evictable until locked. ``hint``: the ProgramHint of the call whose text this is (kept by
        ``retention`` for its program; ``rank``: the program's start order)."""
        key = _as_list(token_ids)
        if len(key) != len(slots):
            raise ValueError(f"RadixCache.insert: {len(key)} tokens but {len(slots)} slots")
        if self.disable or not key:
            return 0
        present, end = self._insert(key, slots)
        if hint is not None:
            self.retention.hint(end, hint, rank)
        return present

    def _insert(self, key: list[int], slots: Any) -> tuple[int, TreeNode]:
        """``insert``, also returning the node where ``key`` ends."""
        node, present, _ = self._walk(key, collect=False)
        if present < len(key):
            leaf = self._new_node(node)
            leaf.key = key[present:]
            leaf.value = self.arrays.copy(slots[present:])
            leaf.last_access = self._clock
            node.children[leaf.key[0]] = leaf
            self._evictable += len(leaf.key)
            node = leaf
        return present, node

    def inc_lock(self, node: TreeNode) -> None:
        """Lock the path root..node: none of it can be evicted until ``dec_lock(node)``."""
        while node.parent is not None:
            if node.lock_ref == 0:
                n = len(node.key)
                self._evictable -= n
                self._protected += n
            node.lock_ref += 1
            node = node.parent

    def dec_lock(self, node: TreeNode) -> None:
        """Undo one ``inc_lock(node)``."""
        while node.parent is not None:
            if node.lock_ref <= 0:
                raise RuntimeError(f"RadixCache.dec_lock: {node} is not locked (unbalanced unlock)")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                n = len(node.key)
                self._evictable += n
                self._protected -= n
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` slots (or all evictable ones if fewer), leaves in the
        retention order (least recently used first among unhinted ones); returns how many were
        freed. Locked nodes are never evicted; evicting 0 is always safe and does nothing."""
        if self.disable or num_tokens <= 0 or self._evictable == 0:
            return 0
        now = self.retention.clock()
        key = self.retention.evict_key
        heap = [(key(n, now), n) for n in self._evictable_leaves()]
        heapq.heapify(heap)
        freed, values = 0, []
        while freed < num_tokens and heap:
            _, node = heapq.heappop(heap)
            parent = node.parent
            del parent.children[node.key[0]]
            node.parent = None
            values.append(node.value)
            freed += len(node.key)
            self._evictable -= len(node.key)
            heir = parent if parent.parent is not None and not parent.children and parent.lock_ref == 0 else None
            self.retention.on_evicted(node, now, heir)
            if heir is not None:
                heapq.heappush(heap, (key(heir, now), heir))
        if values:
            self.pool.free(self.arrays.cat(values))
        return freed

    def reset(self) -> None:
        """Flush: free every cached slot and empty the tree. Raises if anything is locked."""
        if self._protected:
            raise RuntimeError(
                f"RadixCache.reset: {self._protected} cached tokens are locked by running requests"
            )
        values = [n.value for n in self._nodes() if n is not self.root]
        if values:
            self.pool.free(self.arrays.cat(values))
        self.reset_tree()

    # --- request lifecycle ---------------------------------------------------------------
    def cache_finished_req(self, req: CachedRequest, table: "ReqSlotTable") -> None:
        """A request leaves (finished, aborted or retracted): insert its computed tokens,
        free its duplicate slots, unlock its prefix and release its table row. Afterwards
        the request owns no slots."""
        row, kv_len = req.req_row, req.kv_len
        slots = table.read(row, 0, kv_len)
        if self.disable:
            self.pool.free(slots)
        else:
            prefix_len = len(req.prefix_indices)
            present = self.insert(req.fill_ids[:kv_len], slots, hint=getattr(req, "hint", None),
                                  rank=getattr(req, "program_rank", 0))
            assert present >= prefix_len, f"{req}: its locked prefix vanished from the tree"
            self.pool.free(slots[prefix_len:present])
            self.dec_lock(req.last_node)
        table.free_row(row)
        req.req_row = None
        req.prefix_indices = self.arrays.empty()
        req.last_node = None

    def cache_unfinished_req(self, req: CachedRequest, table: "ReqSlotTable") -> None:
        """A running request's computed tokens (``fill_ids[:kv_len]``) become cached: insert
        them, free duplicates, point the table row at the tree's canonical slots and move the
        lock to the new last node. The request keeps running."""
        if self.disable:
            return
        row, kv_len = req.req_row, req.kv_len
        token_ids = req.fill_ids[:kv_len]
        slots = table.read(row, 0, kv_len)
        prefix_len = len(req.prefix_indices)
        present = self.insert(token_ids, slots)
        assert present >= prefix_len, f"{req}: its locked prefix vanished from the tree"
        self.pool.free(slots[prefix_len:present])
        match = self.match_prefix(token_ids)
        assert match.prefix_len == kv_len, f"{req}: re-match found {match.prefix_len}/{kv_len}"
        table.write(row, prefix_len, match.slots[prefix_len:])
        self.inc_lock(match.last_node)
        self.dec_lock(req.last_node)
        req.prefix_indices = match.slots
        req.last_node = match.last_node

    # --- internals -----------------------------------------------------------------------
    def _walk(self, key: list[int], collect: bool) -> tuple[TreeNode, int, list[Any]]:
        """Follow ``key`` from the root, splitting the edge the match ends in."""
        self._clock += 1
        node, pos, n, values = self.root, 0, len(key), []
        while pos < n:
            child = node.children.get(key[pos])
            if child is None:
                break
            m = len(child.key)
            if key[pos : pos + m] == child.key:
                child.last_access = self._clock
                if collect:
                    values.append(child.value)
                node, pos = child, pos + m
                continue
            k = common_prefix_len(child.key, key[pos : pos + m])  # >= 1: first tokens agree
            node = self._split(child, k)
            node.last_access = self._clock
            if collect:
                values.append(node.value)
            pos += k
            break
        return node, pos, values

    def _split(self, child: TreeNode, k: int) -> TreeNode:
        """Cut ``child``'s edge after ``k`` tokens; returns the new upper node."""
        parent = child.parent
        upper = self._new_node(parent)
        upper.key, upper.value = child.key[:k], child.value[:k]
        upper.lock_ref = child.lock_ref  # NOTE: every lock through child passes through upper
        upper.last_access = child.last_access
        child.key, child.value = child.key[k:], child.value[k:]
        child.parent = upper
        upper.children[child.key[0]] = child
        parent.children[upper.key[0]] = upper
        return upper

    def _nodes(self):
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _evictable_leaves(self) -> list[TreeNode]:
        return [
            n for n in self._nodes()
            if not n.children and n.lock_ref == 0 and n.parent is not None
        ]

    def all_slots(self) -> Any:
        """Every slot the tree owns (for tests and integrity checks)."""
        return self.arrays.cat([n.value for n in self._nodes() if n is not self.root])

    def check_integrity(self) -> None:
        """Raise AssertionError unless sizes, locks, child keys and slot ownership agree."""
        evictable = protected = 0
        for node in self._nodes():
            for first, child in node.children.items():
                assert child.parent is node, f"{child}: wrong parent"
                assert child.key and child.key[0] == first, f"{child}: key does not start with {first}"
            if node is self.root:
                assert not node.key and node.lock_ref >= 1, "root changed"
                continue
            assert len(node.key) == len(node.value) > 0, f"{node}: key/value lengths differ"
            assert node.lock_ref >= 0, f"{node}: negative lock count"
            child_locks = sum(c.lock_ref for c in node.children.values())
            assert node.lock_ref >= child_locks, f"{node}: fewer locks than its children"
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        assert evictable == self._evictable, f"evictable {self._evictable} != {evictable}"
        assert protected == self._protected, f"protected {self._protected} != {protected}"
        slots = self.all_slots()
        assert self.arrays.unique_count(slots) == len(slots), "a slot is cached twice"
        if len(slots):
            assert self.pool.is_used(slots).all().item(), "a cached slot is free in the pool"
        if self.disable:
            assert len(slots) == 0, "a disabled cache holds tokens"


def _as_list(token_ids: Sequence[int]) -> list[int]:
    if isinstance(token_ids, list):
        return token_ids
    if hasattr(token_ids, "tolist"):  # NOTE: a torch tensor or a numpy array of ids
        return token_ids.tolist()
    return list(token_ids)
