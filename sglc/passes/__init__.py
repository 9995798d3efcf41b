"""Compiler passes over the IR (one file per pass), the pass manager and the default pipeline.

A pass is a pure function ``Graph -> PassResult(graph, modified)``; `default_pipeline()` lists
what `sglc compile` runs. Modules, bottom-up (each imports only modules before it; see
docs/passes.md): pass_result -> the passes, manager -> pipeline.
"""
from sglc.passes.fork_hints import fork_hints
from sglc.passes.lower_constraints import lower_constraints
from sglc.passes.manager import PassManager
from sglc.passes.merge_constants import merge_constants
from sglc.passes.pass_result import Pass, PassResult
from sglc.passes.pipeline import default_pipeline
from sglc.passes.prefix_hoisting import aggressive_prefix_hoisting, prefix_hoisting

__all__ = [
    "Pass", "PassManager", "PassResult", "default_pipeline", "merge_constants", "fork_hints",
    "lower_constraints", "prefix_hoisting", "aggressive_prefix_hoisting",
]
