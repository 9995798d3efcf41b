"""Compiler passes over the IR (one file per pass) and the pass manager.

A pass is a pure function ``Graph -> PassResult(graph, modified)``; `default_pipeline()` lists
what `sglc compile` runs.
"""
from sglc.passes.manager import PassManager, PassResult, copy_graph, default_pipeline
from sglc.passes.fork_hints import fork_hints
from sglc.passes.merge_constants import merge_constants
from sglc.passes.prefix_hoisting import aggressive_prefix_hoisting, prefix_hoisting

__all__ = [
    "PassManager", "PassResult", "copy_graph", "default_pipeline", "merge_constants",
    "fork_hints", "prefix_hoisting", "aggressive_prefix_hoisting",
]
