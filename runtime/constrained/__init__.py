"""Constrained decoding in the runtime: compiled grammars, per-request states, jump-forward.

Built on :mod:`sglc.fsm` (which never imports the runtime):

- :class:`ConstraintSpec` (re-exported from :mod:`sglc.wire.constraint_spec`, the contract both
  halves share): a request's constraint, validated, with a cache key.
- :class:`ConstraintState` (state.py): one request's cursor: mask, advance, finished, the
  forced bytes for jump-forward (over any grammar with the :class:`~.state.GrammarTables`).
- :class:`CompiledGrammar` (grammar.py): an FSM and its token index over one vocabulary, with
  cached torch masks per state; ``new_cursor()`` starts a ConstraintState.
- :class:`CompiledCFG` (cfg_grammar.py) and :class:`CFGConstraintState` (cfg_state.py): the same
  for a context-free grammar (``sglc.grammar``: GBNF/EBNF, recursive JSON schemas).
- :class:`GrammarCache` (grammar_cache.py): one compile and one token index per distinct
  constraint and tokenizer, under a compile budget, shared in flight, bounded by bytes.
- :class:`ConstraintCompilerConfig` (compiler_config.py): the budget, workers, in-flight and
  cache limits; :class:`CompilePool` (compile_pool.py) runs compiles in worker processes
  (compile_worker.py); errors.py: busy / worker failure.
- :func:`plan_jump` (jump_forward.py): the retokenized tail that appends the forced text.

Bottom-up: errors, compiler_config -> compile_worker -> compile_pool -> state, cfg_state ->
grammar, cfg_grammar -> grammar_cache -> jump_forward. The engine, model runner and sampler use these; nothing here
imports them (or any other runtime package).

NOTE: names are imported on first use (PEP 562), so a compile worker process can import
``compile_worker`` and ``sglc.wire.constraint_spec`` without torch (grammar.py and state.py import it).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CompiledGrammar": "grammar", "GrammarCache": "grammar_cache", "vocabulary_for": "grammar_cache",
    "DEFAULT_WINDOW": "jump_forward", "JumpPlan": "jump_forward", "plan_jump": "jump_forward",
    "ConstraintSpec": "sglc.wire.constraint_spec", "ConstraintState": "state", "ConstraintCompilerConfig": "compiler_config",
    "CompilePool": "compile_pool", "ConstraintCompilerBusy": "errors", "ConstraintCompilerFailed": "errors",
    "CompiledCFG": "cfg_grammar", "CFGConstraintState": "cfg_state", "JUMPABLE_STATES": "jump_forward",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .cfg_grammar import CompiledCFG
    from .cfg_state import CFGConstraintState
    from .compile_pool import CompilePool
    from .compiler_config import ConstraintCompilerConfig
    from .errors import ConstraintCompilerBusy, ConstraintCompilerFailed
    from .grammar import CompiledGrammar
    from .grammar_cache import GrammarCache, vocabulary_for
    from .jump_forward import DEFAULT_WINDOW, JUMPABLE_STATES, JumpPlan, plan_jump
    from sglc.wire.constraint_spec import ConstraintSpec
    from .state import ConstraintState


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module if "." in module else f".{module}", __name__), name)
    globals()[name] = value
    return value
