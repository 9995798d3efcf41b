"""EngineConstraints: the engine's constrained-decoding duties, in one place.

- compile a request's constraint (regex / json_schema / fsm) and its stop_regex patterns at
  submit, once per distinct constraint or pattern, under the engine's compile budget (the
  engine's :class:`GrammarCache`, which the server shares; compiles run in worker processes,
  never on the engine's thread);
- jump-forward: append the text a request's constraint forces without sampling it, at submit
  and after every step that sampled for the request (see :func:`plan_jump`).

It reads the per-request state the engine keeps (``req.sampling_state.cursor`` and
``req.output``, a RequestOutput) and asks the scheduler to finish or re-queue a
request; it never runs the model.
"""
from __future__ import annotations

import threading

from sglc import fsm

from ..constrained import JUMPABLE_STATES, ConstraintCompilerConfig, GrammarCache, plan_jump
from ..constrained.stop_regex import refusal
from ..sampling.sampling_params import SamplingParams
from ..scheduling.request import Req
from ..scheduling.scheduler import Scheduler


class EngineConstraints:
    """Constraint compilation and jump-forward for one engine.

    ``jump_forward=False`` turns jump-forward off engine-wide (constraint masking still applies);
    ``counts`` holds the jumps made, the tokens they added and the jumps that re-queued a request.
    """

    def __init__(self, tokenizer, device: str, scheduler: Scheduler, lock: threading.RLock,
                 jump_forward: bool = True, compiler: ConstraintCompilerConfig | None = None) -> None:
        self._tokenizer, self._device, self._scheduler, self._lock = tokenizer, device, scheduler, lock
        self._compiler = compiler if compiler is not None else ConstraintCompilerConfig()
        self.jump_forward = jump_forward
        self._grammars: GrammarCache | None = None
        self.counts = {"jumps": 0, "tokens": 0, "requeued": 0}

    @property
    def grammars(self) -> GrammarCache:
        """The compiled constraints (one compile and token index per constraint)."""
        with self._lock:
            if self._grammars is None:
                self._grammars = GrammarCache(self._tokenizer, device=self._device, config=self._compiler)
            return self._grammars

    def compile(self, params: SamplingParams) -> SamplingParams:
        """Params with ``constraint`` compiled from regex / json_schema / fsm / ebnf (cached per constraint)
        and ``stop_regex_dfas`` from stop_regex (cached per pattern). A constraint or pattern that
        cannot be compiled (or is over the compile budget) raises ValueError naming it; too many
        compiles in flight raise ConstraintCompilerBusy."""
        if params.stop_regex and params.stop_regex_dfas is None:
            params = params.replace(stop_regex_dfas=tuple(self._stop_regex(p) for p in params.stop_regex))
        spec = params.constraint_spec() if params.constraint is None else None
        if spec is None:
            return params
        try:
            grammar = self.grammars.get(spec)
        except fsm.CompileBudgetError as err:
            raise ValueError(f"SamplingParams.{spec.kind}: {err}; {budget_hint(err)}") from err
        except ValueError as err:  # the FSM library's errors name the problem and position
            raise ValueError(f"SamplingParams.{spec.kind}: {err}") from err
        return params.replace(constraint=grammar)

    def _stop_regex(self, pattern: str):  # -> sglc.fsm.dfa.DFA
        try:
            return self.grammars.get_stop_regex(pattern)
        except fsm.CompileBudgetError as err:
            raise ValueError(f"SamplingParams.{refusal(pattern, err)}; {budget_hint(err)}") from err
        except ValueError as err:
            raise ValueError(f"SamplingParams.{refusal(pattern, err)}") from err

    def close(self) -> None:
        """Stop the compile workers (at engine shutdown)."""
        with self._lock:
            grammars = self._grammars
        if grammars is not None:
            grammars.close()

    def jump(self, req: Req, queued: bool = False) -> bool:
        """Append the text the request's constraint forces, retokenized at the boundary, without
        sampling it. Returns True when that ended the request (now finished in the scheduler).

        Only output tokens without KV (the last sampled one) are replaced in place; when the
        retokenization changes earlier ones the scheduler re-queues the request, whose re-prefill
        reuses the radix cache up to the first changed token. ``queued``: not yet scheduled.
        """
        cursor = req.sampling_state.cursor
        if not (self.jump_forward and req.sampling_params.jump_forward and isinstance(cursor, JUMPABLE_STATES)) \
                or cursor.is_finished():
            return False
        plan = plan_jump(cursor, req.output_ids, self._tokenizer, max_new_tokens=req.max_new_tokens - 1)
        if plan is None:
            return False
        completes = not queued and plan.state.is_finished()
        reason = req.output.on_jump(plan.start, plan.token_ids, completes)
        req.sampling_state.cursor = plan.state
        self.counts["jumps"] += 1
        self.counts["tokens"] += plan.start + len(plan.token_ids) - len(req.output_ids)
        if reason is not None:  # NOTE: before output_ids change: the cache keys computed KV on them
            self._scheduler.finish(req, reason)
            return True
        if queued or len(req.origin_input_ids) + plan.start >= req.kv_len:
            req.output_ids[plan.start:] = plan.token_ids
        else:
            self._scheduler.rewrite_output(req, plan.apply_to(req.output_ids))
            self.counts["requeued"] += 1
        return False


def budget_hint(err: fsm.CompileBudgetError) -> str:
    """Where a server operator changes the limit ``err`` names."""
    if err.owner == "CompileBudget":
        return (f"the server sets it with `sglc serve --constraint-budget {err.limit}=N` "
                f"(EngineConfig.constraint_compiler.budget)")
    return f"the server sets it in EngineConfig.constraint_compiler.{err.limit}"
