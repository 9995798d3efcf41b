"""Grammar IR -> byte-level pushdown automaton: one small DFA per recursive rule.

Rules that are not recursive are inlined where they are referenced, so only the root and the
rules on a reference cycle (JSON's ``value`` / ``object`` / ``array``) keep automata; every
other rule reference disappears into bytes. Each kept rule becomes a Thompson NFA over UTF-8
byte ranges (``sglc.fsm.utf8``) and references to kept rules, then a DFA (subset construction;
a rule reference is one more input symbol), trimmed and minimized (rule_automaton.py); this
module decides which rules are kept, assembles their DFAs and analyses the whole. Everything after
the NFA also runs in C++ (automaton_native.py), to the same arrays: that is the path taken
wherever native code builds.

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
without consuming input. :class:`LeftRecursionError` names the cycle (both in
left_recursion.py). Ambiguous grammars are fine: the matcher keeps a set of stacks. A grammar whose root matches nothing raises
:class:`~sglc.fsm.errors.EmptyLanguageError`; references to rules that match nothing are
dropped (they cannot be taken).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sglc.fsm.errors import EmptyLanguageError

from .automaton_budget import EngineMeter
from .ir import Grammar, RuleRef, walk
from .left_recursion import check_left_recursion, rewrite_direct_left_recursion
from .automaton_native import OUT_OF_TIME, ROOT_MATCHES_NOTHING, TOO_MANY_NODES, build_rules, native_builder
from .rule_automaton import GrammarNFA, RuleDFA, determinize, minimize, nfa_size, trim


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

def _recursive_rules(graph: dict[str, list[str]]) -> set[str]:
    """Rules on a reference cycle of ``graph`` (rule -> the rules it references, sorted; Tarjan's
    SCCs, iteratively)."""
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


# --- assembly and analysis -----------------------------------------------------------------

def build_automaton(grammar: Grammar, meter: EngineMeter | None = None, native: bool = True) -> Automaton:
    """Compile ``grammar`` (verified here) into byte-level rule automata. After the NFA the build
    runs in C++ (automaton_native.py) unless ``native`` is False or native code is off or cannot
    be built; the Python stages give the same arrays."""
    meter = meter if meter is not None else EngineMeter()
    grammar = rewrite_direct_left_recursion(grammar.verify())
    graph = {name: sorted({n.name for n in walk(expr) if isinstance(n, RuleRef)}) for name, expr in grammar.rules.items()}
    recursive = _recursive_rules(graph)
    # Kept rules: the root and the recursive rules the root reaches (through inlined ones).
    kept = {grammar.root}
    seen = {grammar.root}
    stack = [grammar.root]
    while stack:
        for name in graph[stack.pop()]:
            if name not in seen:
                seen.add(name)
                stack.append(name)
                if name in recursive:
                    kept.add(name)
    limit = meter.budget.max_automaton_nodes
    sizes = nfa_size(grammar, kept, limit)
    meter.check("max_automaton_nodes", sum(sizes.values()), "grammar NFA nodes (rules inlined, repeats expanded)")

    names = [grammar.root] + sorted(kept - {grammar.root})
    nfa = GrammarNFA(grammar, names)
    ends = [nfa.add_rule(name) for name in names]
    meter.check_time("building the grammar's NFA")
    lib = native_builder() if native else None
    if lib is not None:
        built, status, value = build_rules(lib, nfa, ends, limit, meter.deadline - time.monotonic())
        if status == TOO_MANY_NODES:
            meter.check("max_automaton_nodes", value, "grammar automaton nodes")
        elif status == OUT_OF_TIME:
            meter.check_time("determinizing and minimizing the grammar's rules")
        elif status == ROOT_MATCHES_NOTHING:
            raise EmptyLanguageError(f"the grammar's root rule {grammar.root!r} matches no string")
        if built is None:  # NOTE: a check above raises; this would mean the build and the meter disagree
            raise RuntimeError(f"the native automaton build stopped (status {status}) under no limit")
        return _automaton([names[i] for i in built.rules.tolist()], built.rule_start, built.node_rule, built.table,
                          built.final.view(bool), built.ref_offsets, built.ref_callee, built.ref_return,
                          built.nullable.view(bool), built.follow.view(bool))
    dfas: dict[str, RuleDFA] = {}
    used = 0
    for name, (start, end) in zip(names, ends):
        dfas[name] = determinize(nfa, start, end, meter, used)
        used += dfas[name].num_nodes
    # Productive rules (match some string), to a fixpoint; then trim and minimize.
    productive: set[str] = set()
    trimmed: dict[tuple[str, frozenset[str]], RuleDFA | None] = {}

    def trimmed_with(name: str) -> RuleDFA | None:
        # NOTE: a rule's trim depends only on which of the rules it references are productive:
        # the fixpoint's last trim of a rule is usually its final one.
        key = (name, frozenset(productive & referenced[name]))
        if key not in trimmed:
            trimmed[key] = trim(dfas[name], productive)
        return trimmed[key]

    referenced = {n: {k for r in dfas[n].refs for k in r} for n in names}
    changed = True
    while changed:
        changed = False
        for name in names:
            if name not in productive and trimmed_with(name) is not None:
                productive.add(name)
                changed = True
    if grammar.root not in productive:
        raise EmptyLanguageError(f"the grammar's root rule {grammar.root!r} matches no string")
    names = [n for n in names if n in productive]
    dfas = {n: minimize(trimmed_with(n)) for n in names}  # type: ignore[arg-type]
    meter.check_time("minimizing the grammar's rules")
    return _assemble(names, dfas)


def _assemble(names: list[str], dfas: dict[str, RuleDFA]) -> Automaton:
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
    follow = _follow_bytes(rule_start, nodes_rule, table, final, ref_lists, nullable)
    return _automaton(names, rule_start, nodes_rule, table, final, ref_offsets, ref_callee, ref_return, nullable,
                      follow)


def _automaton(names: list[str], rule_start, node_rule, table, final, ref_offsets, ref_callee, ref_return, nullable,
               follow) -> Automaton:
    check_left_recursion(names, rule_start, ref_offsets, ref_callee, ref_return, nullable)
    return Automaton(tuple(names), 0, rule_start, node_rule, table, final, ref_offsets, ref_callee, ref_return,
                     nullable, follow)


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
