"""Constrained decoding in the runtime: compiled grammars, per-request states, jump-forward.

Built on :mod:`sglc.fsm` (which never imports the runtime):

- :class:`ConstraintSpec` (spec.py): a request's constraint (compiler FSM dict, regex, JSON
  schema or choices), validated, with a cache key.
- :class:`GrammarCache` / :class:`CompiledGrammar` (grammar.py): one compile and one token
  index per distinct constraint and tokenizer; cached torch masks per state.
- :class:`ConstraintState` (state.py): one request's cursor: mask, advance, finished, the
  forced bytes for jump-forward.
- :func:`plan_jump` (jump_forward.py): the retokenized tail that appends the forced text.

The engine, model runner and sampler use these; nothing here imports them.
"""
from .grammar import CompiledGrammar, GrammarCache, vocabulary_for
from .jump_forward import DEFAULT_WINDOW, JumpPlan, plan_jump
from .spec import ConstraintSpec
from .state import ConstraintState

__all__ = [
    "CompiledGrammar", "ConstraintSpec", "ConstraintState", "DEFAULT_WINDOW", "GrammarCache",
    "JumpPlan", "plan_jump", "vocabulary_for",
]
