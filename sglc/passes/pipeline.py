"""The default pass pipeline: the passes `sglc compile` (and `prog.compile()`) runs, in order."""
from __future__ import annotations

from sglc.passes.fork_hints import fork_hints
from sglc.passes.lower_constraints import lower_constraints
from sglc.passes.manager import PassManager
from sglc.passes.merge_constants import merge_constants
from sglc.passes.pass_result import Pass
from sglc.passes.prefix_hoisting import aggressive_prefix_hoisting, prefix_hoisting


def default_pipeline(verify_each: bool = True, aggressive: bool = False) -> PassManager:
    """The passes `sglc compile` runs, in order.

    Only `aggressive=True` (``sglc compile --aggressive``) may change prompt text; every default
    pass keeps each prompt the model sees identical.
    """
    passes: list[Pass] = [
        merge_constants,
        aggressive_prefix_hoisting if aggressive else prefix_hoisting,
        fork_hints,
        merge_constants,
        lower_constraints,  # regex / JSON schema / dtype -> compressed FSM attribute, once
    ]
    return PassManager(passes, verify_each=verify_each)
