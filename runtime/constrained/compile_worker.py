"""Compiling one constraint to its token index, and the worker process that does it off-server.

:func:`compile_index` is the whole compile: the spec's FSM, its byte DFA, the token index, and
the caches decoding will read (fingerprint, forced bytes), all under one
:class:`~sglc.fsm.CompileMeter`. The runtime runs it in a worker process (compile_pool.py) so
that a compile never holds the server's GIL, can be killed at a hard deadline and cannot grow
the server's memory; :func:`encode` / :func:`decode` carry the result back as flat arrays.
A :class:`~.stop_regex.StopRegexSpec` job compiles to its search DFA instead (no token index),
which crosses the socket pickled as itself. A grammar (kind "ebnf", and a JSON schema the FSM
path refuses as recursive) compiles with ``sglc.grammar`` (:func:`compile_cfg`): its automaton
and token classes cross as a :class:`CFGPayload` and meet the parent's vocabulary in
:func:`decode`. One engine decides per constraint: regular ones keep the FSM path.

The worker (:func:`main`) speaks over one socket (``multiprocessing.connection`` framing):

    parent -> ("init", token_bytes, eos_ids, memory_bytes)   worker -> ("ready", vocab fingerprint)
    parent -> (ConstraintSpec | StopRegexSpec, CompileBudget)  worker -> (status, value)

with status "ok" (value: :func:`encode`'s payload, or a stop_regex's DFA), "error" (an FSM library ValueError, which
pickles as itself), "memory" (the address-space limit was reached; the worker then exits) or
"failed" (an unexpected error, as text). It builds the vocabulary's trie once, at start.

NOTE: imports neither torch nor the engine (the worker starts in ~0.5 s and its memory limit
covers only the compile); ``sglc_runtime.constrained`` imports its modules lazily for this.
"""
from __future__ import annotations

import resource
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from sglc import fsm
from sglc.fsm.token_index import IndexArrays

from sglc.wire.constraint_spec import ConstraintSpec

from .stop_regex import StopRegexSpec


class CFGPayload(NamedTuple):
    """A compiled context-free grammar as it crosses the process boundary (pickled without the
    vocabulary, which the parent has)."""

    grammar: Any
    automaton: Any
    classes: Any
    budget: Any


class CompiledPayload(NamedTuple):
    """A compiled constraint as it crosses the process boundary (pickled: the FSM with its
    byte DFA and caches, the index as four flat arrays)."""

    fsm: fsm.FSM
    arrays: IndexArrays


def compile_index(spec: ConstraintSpec, vocab: fsm.Vocabulary, meter: fsm.CompileMeter) -> fsm.TokenIndex:
    """The token index of ``spec`` over ``vocab``, built under ``meter``; raises the FSM
    library's ValueErrors (``CompileBudgetError`` over budget, ``EmptyLanguageError``, ...)."""
    try:
        compiled = spec.compile(meter)
        if compiled.is_empty():
            raise fsm.EmptyLanguageError(f"constraint {spec.describe()} matches no string")
        index = fsm.TokenIndex(compiled, vocab, meter)
    except RecursionError:  # NOTE: the depth checks make this unreachable; never a traceback
        limit = meter.budget.max_nesting_depth
        raise fsm.CompileBudgetError("max_nesting_depth", limit, "nesting too deep to compile") from None
    # NOTE: computed here, not on first use: later they would be paid on the engine's thread.
    compiled.fingerprint  # noqa: B018
    index.byte_dfa.forced_bytes(index.initial)
    return index


def compile_cfg(spec: ConstraintSpec, vocab: fsm.Vocabulary, meter: fsm.CompileMeter) -> Any:
    """``spec``'s grammar compiled by ``sglc.grammar`` (a CompiledGrammar) over ``vocab``, or,
    for a regular "ebnf" grammar, the FSM token index of its regex (``sglc.grammar.regular``). The
    front end and the engine keep their own structural limits (GrammarBudget, EngineBudget:
    docs/grammars.md); the wall clock is the constraint budget's, so the pool's hard deadline
    and theirs agree. Raises the grammar library's FSMErrors naming the problem."""
    from sglc.grammar import EngineBudget, GrammarBudget, compile_grammar, grammar_from_json_schema, parse_gbnf
    from sglc.grammar.regular import regex_of

    seconds = meter.budget.max_compile_seconds
    if spec.kind == "ebnf":
        grammar = parse_gbnf(spec.text, GrammarBudget(max_compile_seconds=seconds))
        regex = regex_of(grammar, meter.budget.max_pattern_chars)
        if regex is not None:  # a regular grammar: the FSM path, unless its automaton is too big
            try:
                return compile_index(ConstraintSpec("regex", regex), vocab, meter)
            except fsm.CompileBudgetError as err:
                if err.limit == "max_compile_seconds":
                    raise
    else:
        grammar = grammar_from_json_schema(spec.text, GrammarBudget(max_compile_seconds=seconds))
    return compile_grammar(grammar, vocab, EngineBudget(max_compile_seconds=seconds))


def compile_constraint(spec: ConstraintSpec, vocab: fsm.Vocabulary, meter: fsm.CompileMeter) -> Any:
    """``spec``'s token index (FSM path) or compiled grammar (sglc.grammar): one engine decides.
    An "ebnf" grammar whose language is regular (no recursive rule) takes the FSM path; a JSON
    schema takes the grammar engine only when the FSM path refuses it as recursive."""
    if spec.kind == "ebnf":
        return compile_cfg(spec, vocab, meter)
    try:
        return compile_index(spec, vocab, meter)
    except fsm.RecursiveSchemaError:
        if spec.kind != "json_schema":
            raise
        return compile_cfg(spec, vocab, meter)


def encode(compiled: Any) -> CompiledPayload | CFGPayload:
    if isinstance(compiled, fsm.TokenIndex):
        return CompiledPayload(compiled.fsm, compiled.to_arrays())
    return CFGPayload(compiled.grammar, compiled.automaton, compiled.classes, compiled.budget)


def compile_job(spec: ConstraintSpec | StopRegexSpec, vocab: fsm.Vocabulary, meter: fsm.CompileMeter) -> Any:
    """What the worker sends back for one job: a constraint's :func:`encode` payload, or a
    stop_regex's DFA."""
    if isinstance(spec, StopRegexSpec):
        return spec.compile(meter)
    return encode(compile_constraint(spec, vocab, meter))


def decode(payload: Any, vocab: fsm.Vocabulary) -> Any:
    """The index or grammar :func:`encode` sent, over the parent's own ``vocab`` (the same
    vocabulary: the worker's fingerprint was checked at start); a stop_regex's DFA as it came."""
    if isinstance(payload, CFGPayload):
        from sglc.grammar import CompiledGrammar

        return CompiledGrammar(payload.grammar, vocab, payload.automaton, payload.classes, payload.budget)
    if not isinstance(payload, CompiledPayload):
        return payload
    return fsm.TokenIndex.from_arrays(payload.fsm, vocab, payload.arrays)


def _limit_memory(num_bytes: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        num_bytes = min(num_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (num_bytes, hard))


def _reply(spec: ConstraintSpec | StopRegexSpec, budget: fsm.CompileBudget, vocab: fsm.Vocabulary) -> tuple[str, Any]:
    try:
        return "ok", compile_job(spec, vocab, budget.start())
    except (ValueError, TypeError) as err:  # the constraint's fault: FSMError and the like
        return "error", err
    except RecursionError:  # NOTE: the depth checks make this unreachable; never a traceback
        return "error", fsm.CompileBudgetError("max_nesting_depth", budget.max_nesting_depth, "nesting too deep to compile")
    except MemoryError:
        return "memory", None
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises it
        return "failed", f"{type(err).__name__}: {err}"


def main(fd: int) -> None:
    """Serve compile jobs on the socket ``fd`` until the parent closes it."""
    conn = Connection(fd)
    try:
        _, token_bytes, eos_ids, memory_bytes = conn.recv()
    except EOFError:
        return
    _limit_memory(memory_bytes)
    vocab = fsm.Vocabulary(token_bytes, eos_token_ids=eos_ids)
    del token_bytes
    vocab.trie  # noqa: B018 - built once per worker, before the first job
    conn.send(("ready", vocab.fingerprint))
    while True:
        try:
            spec, budget = conn.recv()
        except EOFError:
            return
        status, value = _reply(spec, budget, vocab)
        try:
            conn.send((status, value))
        except MemoryError:
            status = "memory"
            conn.send((status, None))
        del value
        if status == "memory":
            return  # NOTE: the heap may be fragmented past use; the parent starts a fresh worker
