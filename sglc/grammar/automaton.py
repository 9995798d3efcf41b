"""Grammar IR -> byte-level pushdown automaton: one small DFA per recursive rule.

Rules that are not recursive are inlined where they are referenced, so only the root and the
rules on a reference cycle (JSON's ``value`` / ``object`` / ``array``) keep automata; every
other rule reference disappears into bytes. Each kept rule becomes a Thompson NFA over UTF-8
byte ranges (``sglc.fsm.utf8``) and references to kept rules, then a DFA (subset construction;
a rule reference is one more input symbol), trimmed and minimized.

Nodes of all rules share one numbering. For node ``n``:

- ``table[n, byte]``: the node the byte leads to inside the same rule, or -1;
- ``final[n]``: the rule may end here (the matcher pops back to the caller);
- ``refs(n)``: ``(callee rule, return node)`` pairs: the matcher pushes the callee's start and
  continues at the return node once the callee ends;
- ``follow[rule, byte]``: bytes that may come right after the rule ends (its FOLLOW set). The
  token precompute uses it to drop tokens that leave a rule with a byte no caller can take.

Direct left recursion (``expr ::= expr "+" term | term``, lark's usual style) is rewritten to
repetition first (``expr ::= term ("+" term)*``: the same language). Other left recursion
(through another rule, or a nullable prefix) is refused: the matcher's stacks would grow
without consuming input. :class:`LeftRecursionError` names the cycle (both in left_recursion.py). Ambiguous grammars are fine:
the matcher keeps a set of stacks. A grammar whose root matches nothing raises
:class:`~sglc.fsm.errors.EmptyLanguageError`; references to rules that match nothing are
dropped (they cannot be taken).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sglc.fsm.errors import EmptyLanguageError
from sglc.fsm.utf8 import utf8_sequences

from .automaton_budget import EngineMeter
from .errors import GrammarError
from .ir import CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Seq
from .left_recursion import check_left_recursion, rewrite_direct_left_recursion


@dataclass(frozen=True, eq=False)
class Automaton:
    """Byte-level automata of the kept rules (see the module docstring). Immutable arrays."""

    rule_names: tuple[str, ...]
    root: int  # rule index of the start rule
    rule_start: np.ndarray  # int32 [R]
    node_rule: np.ndarray  # int32 [N]
    table: np.ndarray  # int32 [N, 256]
    final: np.ndarray  # bool [N]
    ref_offsets: np.ndarray  # int64 [N + 1]: refs of n are entries ref_offsets[n]:ref_offsets[n+1]
    ref_callee: np.ndarray  # int32: callee rule index
    ref_return: np.ndarray  # int32: return node
    nullable: np.ndarray  # bool [R]: the rule matches the empty string
    follow: np.ndarray  # bool [R, 256]

    @property
    def num_nodes(self) -> int:
        return int(self.table.shape[0])

    def refs(self, node: int) -> list[tuple[int, int]]:
        a, b = self.ref_offsets[node], self.ref_offsets[node + 1]
        return list(zip(self.ref_callee[a:b].tolist(), self.ref_return[a:b].tolist()))

    @cached_property
    def has_bytes(self) -> np.ndarray:
        """bool [N]: the node has at least one byte edge (only such nodes are stack tops)."""
        return (self.table >= 0).any(axis=1)

    @cached_property
    def ref_count(self) -> np.ndarray:
        """int64 [N]: rule references out of each node."""
        return np.diff(self.ref_offsets)


# --- inlining ------------------------------------------------------------------------------

def _recursive_rules(grammar: Grammar) -> set[str]:
    """Rules on a reference cycle (Tarjan's SCCs, iteratively)."""
    graph = {name: sorted({n.name for n in _walk(expr) if isinstance(n, RuleRef)}) for name, expr in grammar.rules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: set[str] = set()
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            succ = graph[v]
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph[v]:
                    out.update(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def _walk(expr: Expr):
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Seq):
            stack.extend(node.items)
        elif isinstance(node, Choice):
            stack.extend(node.options)
        elif isinstance(node, Repeat):
            stack.append(node.item)


class _NFA:
    """Thompson NFA of one rule: byte-range edges, rule-reference edges, epsilon edges."""

    # NOTE: its size was counted on the IR (``_nfa_size``, an upper bound) and checked before.
    def __init__(self, grammar: Grammar, kept: set[str]) -> None:
        self.grammar = grammar
        self.kept = kept
        self.eps: list[list[int]] = []
        self.bytes: list[list[tuple[int, int, int]]] = []
        self.refs: list[list[tuple[str, int]]] = []

    def node(self) -> int:
        self.eps.append([])
        self.bytes.append([])
        self.refs.append([])
        return len(self.eps) - 1

    def build(self, expr: Expr, start: int, end: int, depth: int = 0) -> None:
        """Add ``expr`` between nodes ``start`` and ``end``."""
        if depth > 10_000:
            raise GrammarError("grammar expressions nest too deeply (over 10,000 levels)")
        if isinstance(expr, Literal):
            cur = start
            data = expr.text.encode("utf-8")
            for i, b in enumerate(data):
                nxt = end if i == len(data) - 1 else self.node()
                self.bytes[cur].append((b, b, nxt))
                cur = nxt
            if not data:
                self.eps[start].append(end)
        elif isinstance(expr, CharClass):
            for lo, hi in expr.chars.ranges:
                for seq in utf8_sequences(lo, hi):
                    cur = start
                    for i, (a, b) in enumerate(seq):
                        nxt = end if i == len(seq) - 1 else self.node()
                        self.bytes[cur].append((a, b, nxt))
                        cur = nxt
        elif isinstance(expr, Seq):
            cur = start
            for i, item in enumerate(expr.items):
                nxt = end if i == len(expr.items) - 1 else self.node()
                self.build(item, cur, nxt, depth + 1)
                cur = nxt
            if not expr.items:
                self.eps[start].append(end)
        elif isinstance(expr, Choice):
            for option in expr.options:
                s, e = self.node(), self.node()
                self.eps[start].append(s)
                self.eps[e].append(end)
                self.build(option, s, e, depth + 1)
        elif isinstance(expr, Repeat):
            cur = start
            for _ in range(expr.min):
                nxt = self.node()
                self.build(expr.item, cur, nxt, depth + 1)
                cur = nxt
            if expr.max is None:
                s, e = self.node(), self.node()
                self.eps[cur].extend((s, end))
                self.eps[e].extend((s, end))
                self.build(expr.item, s, e, depth + 1)
            else:
                for _ in range(expr.max - expr.min):
                    nxt = self.node()
                    self.eps[cur].append(end)
                    self.build(expr.item, cur, nxt, depth + 1)
                    cur = nxt
                self.eps[cur].append(end)
        elif isinstance(expr, RuleRef):
            if expr.name in self.kept:
                self.refs[start].append((expr.name, end))
            else:
                self.build(self.grammar.rules[expr.name], start, end, depth + 1)
        else:
            raise TypeError(f"not a grammar expression: {expr!r}")


def _nfa_size(grammar: Grammar, kept: set[str], limit: int) -> dict[str, int]:
    """NFA nodes each kept rule will need (inlining and repeats expanded), computed on the IR
    without building anything; capped just above ``limit``."""
    memo: dict[Expr, int] = {}

    def size(expr: Expr, depth: int) -> int:
        got = memo.get(expr)
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
        memo[expr] = n
        return n

    return {name: size(grammar.rules[name], 0) for name in kept}


# --- determinization -----------------------------------------------------------------------

class _RuleDFA:
    """One rule's DFA: ``table`` [n, 256], ``final`` [n], ``refs`` per node {callee: target}."""

    def __init__(self, table: np.ndarray, final: np.ndarray, refs: list[dict[str, int]]) -> None:
        self.table, self.final, self.refs = table, final, refs

    @property
    def num_nodes(self) -> int:
        return len(self.final)


def _determinize(nfa: _NFA, start: int, end: int, meter: EngineMeter, used: int) -> _RuleDFA:
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
                    for m in nfa.eps[stack.pop()]:
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
        edges = [e for n in cur for e in nfa.bytes[n]]
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
            for name, t in nfa.refs[n]:
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
    return _RuleDFA(np.stack(rows), np.array(finals, dtype=bool), refs)


def _trim(dfa: _RuleDFA, productive: set[str]) -> _RuleDFA | None:
    """Drop references to unproductive rules, then nodes that cannot reach the end or are not
    reachable; None when the rule matches nothing."""
    n = dfa.num_nodes
    refs = [{k: v for k, v in r.items() if k in productive} for r in dfa.refs]
    succ = [set(dfa.table[i][dfa.table[i] >= 0].tolist()) | set(refs[i].values()) for i in range(n)]
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
    return _RuleDFA(table, dfa.final[keep].copy(), new_refs)


def _minimize(dfa: _RuleDFA) -> _RuleDFA:
    """Moore partition refinement (node 0 stays the start)."""
    names = sorted({k for r in dfa.refs for k in r})
    n = dfa.num_nodes
    ref_cols = np.full((n, len(names)), -1, dtype=np.int64)
    for i, r in enumerate(dfa.refs):
        for j, name in enumerate(names):
            ref_cols[i, j] = r.get(name, -1)
    # NOTE: bytes whose columns are equal in every row behave alike: refine on one of each.
    _, distinct = np.unique(dfa.table, axis=1, return_index=True)
    moves = np.concatenate([dfa.table[:, np.sort(distinct)], ref_cols], axis=1).astype(np.int64)
    block = dfa.final.astype(np.int64)
    num = int(block.max()) + 1 if n else 0
    while True:
        ext = np.append(block, -1)  # target -1 -> block -1
        sig = np.ascontiguousarray(np.concatenate([block[:, None], ext[moves]], axis=1))
        ids: dict[bytes, int] = {}
        new_block = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in sig], dtype=np.int64)
        count = len(ids)
        block = new_block
        if count == num:
            break
        num = count
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
    return _RuleDFA(table, dfa.final[reps].copy(), refs)


# --- assembly and analysis -----------------------------------------------------------------

def build_automaton(grammar: Grammar, meter: EngineMeter | None = None) -> Automaton:
    """Compile ``grammar`` (verified here) into byte-level rule automata."""
    meter = meter if meter is not None else EngineMeter()
    grammar = rewrite_direct_left_recursion(grammar.verify())
    recursive = _recursive_rules(grammar)
    # Kept rules: the root and the recursive rules the root reaches (through inlined ones).
    kept = {grammar.root}
    seen = {grammar.root}
    stack = [grammar.root]
    while stack:
        for node in _walk(grammar.rules[stack.pop()]):
            if isinstance(node, RuleRef) and node.name not in seen:
                seen.add(node.name)
                stack.append(node.name)
                if node.name in recursive:
                    kept.add(node.name)
    limit = meter.budget.max_automaton_nodes
    sizes = _nfa_size(grammar, kept, limit)
    meter.check("max_automaton_nodes", sum(sizes.values()), "grammar NFA nodes (rules inlined, repeats expanded)")

    names = [grammar.root] + sorted(kept - {grammar.root})
    dfas: dict[str, _RuleDFA] = {}
    used = 0
    for name in names:
        nfa = _NFA(grammar, kept)
        start, end = nfa.node(), nfa.node()
        nfa.build(grammar.rules[name], start, end)
        meter.check_time("building the grammar's NFA")
        dfas[name] = _determinize(nfa, start, end, meter, used)
        used += dfas[name].num_nodes
    # Productive rules (match some string), to a fixpoint; then trim and minimize.
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name in names:
            if name not in productive and _trim(dfas[name], productive) is not None:
                productive.add(name)
                changed = True
    if grammar.root not in productive:
        raise EmptyLanguageError(f"the grammar's root rule {grammar.root!r} matches no string")
    names = [n for n in names if n in productive]
    dfas = {n: _minimize(_trim(dfas[n], productive)) for n in names}  # type: ignore[arg-type]
    meter.check_time("minimizing the grammar's rules")
    return _assemble(names, dfas)


def _assemble(names: list[str], dfas: dict[str, _RuleDFA]) -> Automaton:
    rule_of = {n: i for i, n in enumerate(names)}
    offsets = np.cumsum([0] + [dfas[n].num_nodes for n in names])
    tables, finals, node_rule = [], [], []
    ref_lists: list[list[tuple[int, int]]] = []
    for i, name in enumerate(names):
        d = dfas[name]
        base = int(offsets[i])
        tables.append(np.where(d.table >= 0, d.table + base, -1).astype(np.int32))
        finals.append(d.final)
        node_rule.append(np.full(d.num_nodes, i, dtype=np.int32))
        for r in d.refs:
            ref_lists.append(sorted((rule_of[k], v + base) for k, v in r.items()))
    table = np.concatenate(tables)
    final = np.concatenate(finals)
    n = len(final)
    ref_offsets = np.zeros(n + 1, dtype=np.int64)
    ref_offsets[1:] = np.cumsum([len(r) for r in ref_lists])
    ref_callee = np.array([c for r in ref_lists for c, _ in r], dtype=np.int32)
    ref_return = np.array([t for r in ref_lists for _, t in r], dtype=np.int32)
    rule_start = offsets[:-1].astype(np.int32)
    nodes_rule = np.concatenate(node_rule)

    nullable = _nullable(rule_start, table, final, ref_lists)
    check_left_recursion(names, rule_start, table, ref_lists, nullable)
    follow = _follow_bytes(rule_start, nodes_rule, table, final, ref_lists, nullable)
    return Automaton(tuple(names), 0, rule_start, nodes_rule, table, final, ref_offsets, ref_callee,
                     ref_return, nullable, follow)


def _can_end(final: np.ndarray, ref_lists, nullable: np.ndarray) -> np.ndarray:
    """bool [N]: the rule can end from the node without consuming input."""
    out = final.copy()
    changed = True
    while changed:
        changed = False
        for n, refs in enumerate(ref_lists):
            if not out[n] and any(nullable[c] and out[t] for c, t in refs):
                out[n] = changed = True
    return out


def _nullable(rule_start, table, final, ref_lists) -> np.ndarray:
    nullable = np.zeros(len(rule_start), dtype=bool)
    while True:
        can_end = _can_end(final, ref_lists, nullable)
        new = can_end[rule_start]
        if (new == nullable).all():
            return nullable
        nullable = new


def _follow_bytes(rule_start, node_rule, table, final, ref_lists, nullable) -> np.ndarray:
    """bool [R, 256]: bytes that may come right after each rule ends (FOLLOW sets)."""
    n_rules = len(rule_start)
    can_end = _can_end(final, ref_lists, nullable)
    # first[n]: bytes that can come first from n (own edges, callees, nullable callees' returns).
    first = table >= 0
    changed = True
    while changed:
        changed = False
        for n, refs in enumerate(ref_lists):
            for c, t in refs:
                add = first[rule_start[c]] | (first[t] if nullable[c] else False)
                if (add & ~first[n]).any():
                    first[n] |= add
                    changed = True
    follow = np.zeros((n_rules, 256), dtype=bool)
    changed = True
    while changed:
        changed = False
        for n, refs in enumerate(ref_lists):
            for c, t in refs:
                add = first[t] | (follow[node_rule[n]] if can_end[t] else False)
                if (add & ~follow[c]).any():
                    follow[c] |= add
                    changed = True
    return follow
