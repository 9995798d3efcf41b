"""One kept rule of the grammar automaton (automaton.py): its Thompson NFA over UTF-8 byte
ranges and references to other kept rules (rules not kept are inlined, bounded repeats copied),
then a DFA by subset construction (a rule reference is one more input symbol), trimmed to what
can reach an end through productive rules, and minimized.

``nfa_size`` counts the NFA on the IR before any is built, so ``EngineBudget.max_automaton_nodes``
is checked before the work; ``determinize`` checks the DFA's nodes and the clock as it goes.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from sglc.fsm.utf8 import utf8_sequences

from .automaton_budget import EngineMeter
from .errors import GrammarError
from .ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq


class GrammarNFA:
    """Thompson NFA of the kept rules in one node numbering: byte-range edges, rule-reference
    edges (to a kept rule, by its index in ``rules``) and epsilon edges, each kind one flat list
    (what the native build reads; :attr:`adjacency` is the per-node view the Python stages read)."""

    # NOTE: its size was counted on the IR (``nfa_size``, an upper bound) and checked before.
    def __init__(self, grammar: Grammar, rules: list[str]) -> None:
        self.grammar = grammar
        self.rules = rules
        self.rule_index = {name: i for i, name in enumerate(rules)}
        self.num_nodes = 0
        self.eps_edges: list[int] = []  # src, dst, src, dst, ...
        self.byte_edges: list[int] = []  # src, lo, hi, dst, ...
        self.ref_edges: list[int] = []  # src, rule index, dst, ...

    def node(self) -> int:
        self.num_nodes += 1
        return self.num_nodes - 1

    def add_rule(self, name: str) -> tuple[int, int]:
        """Build kept rule ``name``: its (start, end) nodes."""
        start, end = self.node(), self.node()
        self.build(self.grammar.rules[name], start, end)
        return start, end

    def build(self, expr: Expr, start: int, end: int, depth: int = 0) -> None:
        """Add ``expr`` between nodes ``start`` and ``end``."""
        if depth > 10_000:
            raise GrammarError("grammar expressions nest too deeply (over 10,000 levels)")
        if isinstance(expr, Literal):
            cur = start
            data = expr.text.encode("utf-8")
            for i, b in enumerate(data):
                nxt = end if i == len(data) - 1 else self.node()
                self.byte_edges.extend((cur, b, b, nxt))
                cur = nxt
            if not data:
                self.eps_edges.extend((start, end))
        elif isinstance(expr, CharClass):
            for lo, hi in expr.chars.ranges:
                for seq in utf8_sequences(lo, hi):
                    cur = start
                    for i, (a, b) in enumerate(seq):
                        nxt = end if i == len(seq) - 1 else self.node()
                        self.byte_edges.extend((cur, a, b, nxt))
                        cur = nxt
        elif isinstance(expr, Seq):
            cur = start
            for i, item in enumerate(expr.items):
                nxt = end if i == len(expr.items) - 1 else self.node()
                self.build(item, cur, nxt, depth + 1)
                cur = nxt
            if not expr.items:
                self.eps_edges.extend((start, end))
        elif isinstance(expr, Choice):
            for option in expr.options:
                s, e = self.node(), self.node()
                self.eps_edges.extend((start, s, e, end))
                self.build(option, s, e, depth + 1)
        elif isinstance(expr, Repeat):
            cur = start
            for _ in range(expr.min):
                nxt = self.node()
                self.build(expr.item, cur, nxt, depth + 1)
                cur = nxt
            if expr.max is None:
                s, e = self.node(), self.node()
                self.eps_edges.extend((cur, s, cur, end, e, s, e, end))
                self.build(expr.item, s, e, depth + 1)
            else:
                for _ in range(expr.max - expr.min):
                    nxt = self.node()
                    self.eps_edges.extend((cur, end))
                    self.build(expr.item, cur, nxt, depth + 1)
                    cur = nxt
                self.eps_edges.extend((cur, end))
        elif isinstance(expr, RuleRef):
            index = self.rule_index.get(expr.name)
            if index is not None:
                self.ref_edges.extend((start, index, end))
            else:
                self.build(self.grammar.rules[expr.name], start, end, depth + 1)
        else:
            raise TypeError(f"not a grammar expression: {expr!r}")

    @cached_property
    def adjacency(self) -> tuple[list[list[int]], list[list[tuple[int, int, int]]], list[list[tuple[str, int]]]]:
        """Per node: epsilon targets, (lo, hi, target) byte edges, (callee name, target) references.
        Read once every rule is built."""
        eps: list[list[int]] = [[] for _ in range(self.num_nodes)]
        byte: list[list[tuple[int, int, int]]] = [[] for _ in range(self.num_nodes)]
        refs: list[list[tuple[str, int]]] = [[] for _ in range(self.num_nodes)]
        e = self.eps_edges
        for i in range(0, len(e), 2):
            eps[e[i]].append(e[i + 1])
        e = self.byte_edges
        for i in range(0, len(e), 4):
            byte[e[i]].append((e[i + 1], e[i + 2], e[i + 3]))
        e = self.ref_edges
        for i in range(0, len(e), 3):
            refs[e[i]].append((self.rules[e[i + 1]], e[i + 2]))
        return eps, byte, refs


def nfa_size(grammar: Grammar, kept: set[str], limit: int) -> dict[str, int]:
    """NFA nodes each kept rule will need (inlining and repeats expanded), computed on the IR
    without building anything; capped just above ``limit``."""
    # NOTE: keyed by identity: hashing a frozen IR node hashes its whole subtree, at every visit.
    memo: dict[int, int] = {}

    def size(expr: Expr, depth: int) -> int:
        got = memo.get(id(expr))
        if got is not None:
            return got
        if depth > 10_000:
            raise GrammarError("grammar expressions nest too deeply (over 10,000 levels)")
        if isinstance(expr, Literal):
            n = len(expr.text.encode("utf-8")) + 1
        elif isinstance(expr, CharClass):
            n = 1 + sum(len(seq) for lo, hi in expr.chars.ranges for seq in utf8_sequences(lo, hi))
        elif isinstance(expr, Seq):
            n = 1 + sum(size(i, depth + 1) for i in expr.items)
        elif isinstance(expr, Choice):
            n = 1 + sum(2 + size(o, depth + 1) for o in expr.options)
        elif isinstance(expr, Repeat):
            copies = expr.max if expr.max is not None else expr.min + 1
            n = 3 + min(copies, limit + 1) * (1 + size(expr.item, depth + 1))
        else:  # RuleRef
            n = 1 if expr.name in kept else size(grammar.rules[expr.name], depth + 1)
        n = min(n, limit + 1)
        memo[id(expr)] = n
        return n

    return {name: size(grammar.rules[name], 0) for name in kept}


# --- determinization -----------------------------------------------------------------------

class RuleDFA:
    """One rule's DFA: ``table`` [n, 256], ``final`` [n], ``refs`` per node {callee: target}."""

    def __init__(self, table: np.ndarray, final: np.ndarray, refs: list[dict[str, int]]) -> None:
        self.table, self.final, self.refs = table, final, refs

    @property
    def num_nodes(self) -> int:
        return len(self.final)


def determinize(nfa: GrammarNFA, start: int, end: int, meter: EngineMeter, used: int) -> RuleDFA:
    """The DFA of the rule between NFA nodes ``start`` and ``end`` (subset construction; a rule
    reference is one more input symbol); ``used``: DFA nodes of the rules before it."""
    nfa_eps, nfa_bytes, nfa_refs = nfa.adjacency
    closure_memo: dict[int, frozenset[int]] = {}

    set_memo: dict[frozenset[int], frozenset[int]] = {}

    def closure(nodes) -> frozenset[int]:
        key = frozenset(nodes)
        got = set_memo.get(key)
        if got is None:
            got = set_memo[key] = closure_of(key)
        return got

    def closure_of(nodes) -> frozenset[int]:
        out: set[int] = set()
        for n in nodes:
            got = closure_memo.get(n)
            if got is None:
                seen = {n}
                stack = [n]
                while stack:
                    for m in nfa_eps[stack.pop()]:
                        if m not in seen:
                            seen.add(m)
                            stack.append(m)
                got = closure_memo[n] = frozenset(seen)
            out |= got
        return frozenset(out)

    first = closure([start])
    ids = {first: 0}
    order = [first]
    rows: list[np.ndarray] = []
    finals: list[bool] = []
    refs: list[dict[str, int]] = []
    i = 0
    while i < len(order):
        if i % 256 == 0:
            meter.check_time("determinizing the grammar's rules")
        cur = order[i]
        i += 1
        row = np.full(256, -1, dtype=np.int32)
        edges = [e for n in cur for e in nfa_bytes[n]]
        if edges:
            # Sweep the byte axis: at each cut, edges starting there join, edges ending leave.
            starts: dict[int, list[int]] = {}
            ends: dict[int, list[int]] = {}
            for lo, hi, t in edges:
                starts.setdefault(lo, []).append(t)
                ends.setdefault(hi + 1, []).append(t)
            cuts = sorted(starts.keys() | ends.keys())
            active: dict[int, int] = {}
            for a, b in zip(cuts, cuts[1:]):
                for t in ends.get(a, ()):
                    active[t] -= 1
                    if not active[t]:
                        del active[t]
                for t in starts.get(a, ()):
                    active[t] = active.get(t, 0) + 1
                if not active:
                    continue
                key = closure(active)
                got = ids.get(key)
                if got is None:
                    got = ids[key] = len(order)
                    order.append(key)
                    meter.check("max_automaton_nodes", used + len(order), "grammar automaton nodes")
                row[a:b] = got
        by_rule: dict[str, list[int]] = {}
        for n in cur:
            for name, t in nfa_refs[n]:
                by_rule.setdefault(name, []).append(t)
        ref_row: dict[str, int] = {}
        for name, targets in sorted(by_rule.items()):
            key = closure(targets)
            got = ids.get(key)
            if got is None:
                got = ids[key] = len(order)
                order.append(key)
                meter.check("max_automaton_nodes", used + len(order), "grammar automaton nodes")
            ref_row[name] = got
        rows.append(row)
        finals.append(end in cur)
        refs.append(ref_row)
    return RuleDFA(np.stack(rows), np.array(finals, dtype=bool), refs)


def trim(dfa: RuleDFA, productive: set[str]) -> RuleDFA | None:
    """Drop references to unproductive rules, then nodes that cannot reach the end or are not
    reachable; None when the rule matches nothing."""
    n = dfa.num_nodes
    refs = [{k: v for k, v in r.items() if k in productive} for r in dfa.refs]
    # NOTE: the distinct byte edges in one pass over the table (a set per row cost ~2 us a node)
    rows, cols = np.nonzero(dfa.table >= 0)
    pairs = np.unique(rows.astype(np.int64) * n + dfa.table[rows, cols])
    succ: list[set[int]] = [set(r.values()) for r in refs]
    for i, j in zip((pairs // n).tolist(), (pairs % n).tolist()):
        succ[i].add(j)
    preds: list[list[int]] = [[] for _ in range(n)]
    for i, ss in enumerate(succ):
        for j in ss:
            preds[j].append(i)
    alive = set(np.flatnonzero(dfa.final).tolist())
    stack = list(alive)
    while stack:
        for p in preds[stack.pop()]:
            if p not in alive:
                alive.add(p)
                stack.append(p)
    if 0 not in alive:
        return None
    reach = {0}
    stack = [0]
    while stack:
        for j in succ[stack.pop()]:
            if j in alive and j not in reach:
                reach.add(j)
                stack.append(j)
    keep = sorted(reach)
    remap = np.full(n + 1, -1, dtype=np.int32)  # index -1 -> -1
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    table = remap[dfa.table[keep]]
    new_refs = [{k: int(remap[v]) for k, v in refs[i].items() if remap[v] >= 0} for i in keep]
    return RuleDFA(table, dfa.final[keep].copy(), new_refs)


def minimize(dfa: RuleDFA) -> RuleDFA:
    """Moore partition refinement (node 0 stays the start)."""
    names = sorted({k for r in dfa.refs for k in r})
    n = dfa.num_nodes
    ref_cols = np.full((n, len(names)), -1, dtype=np.int64)
    for i, r in enumerate(dfa.refs):
        for j, name in enumerate(names):
            ref_cols[i, j] = r.get(name, -1)
    # NOTE: bytes whose columns are equal in every row behave alike: refine on one of each.
    columns = np.ascontiguousarray(dfa.table.T)
    _, distinct = np.unique(columns.view(np.dtype((np.void, columns.strides[0]))).ravel(), return_index=True)
    moves = np.concatenate([dfa.table[:, np.sort(distinct)], ref_cols], axis=1).astype(np.int64)
    block = dfa.final.astype(np.int64)
    block, num = _moore_refine(moves, block)
    # Renumber so the start's block is 0, in first-seen order.
    order: dict[int, int] = {}
    for b in block.tolist():
        order.setdefault(b, len(order))
    block = np.array([order[b] for b in block.tolist()], dtype=np.int64)
    reps = np.zeros(num, dtype=np.int64)
    reps[block[::-1]] = np.arange(n - 1, -1, -1)  # the first node of each block
    ext = np.append(block, -1).astype(np.int32)
    table = ext[dfa.table[reps]]
    refs = [{k: int(block[v]) for k, v in dfa.refs[r].items()} for r in reps.tolist()]
    return RuleDFA(table, dfa.final[reps].copy(), refs)


def _moore_refine(moves: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, int]:
    """(blocks, their count): the refinement loop of :func:`minimize`."""
    # NOTE: the blocks there are, not max + 1: with every node final the one block is id 1, and
    # a first round that split it in two looked stable (a bounded repeat "x"{1,3} minimized to x*).
    num = len(np.unique(block))
    while True:
        ext = np.append(block, -1)  # target -1 -> block -1
        sig = np.ascontiguousarray(np.concatenate([block[:, None], ext[moves]], axis=1))
        ids: dict[bytes, int] = {}
        new_block = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in sig], dtype=np.int64)
        count = len(ids)
        block = new_block
        if count == num:
            return block, num
        num = count
