"""The pass manager: runs passes in order, verifies after each, names the pass that failed.

It knows no pass by name (sglc/passes/pipeline.py lists the default ones); a pass is any
function ``Graph -> PassResult`` (sglc/passes/pass_result.py).
"""
from __future__ import annotations

from typing import Sequence

from sglc.errors import PassError, VerifyError
from sglc.ir.graph import Graph
from sglc.ir.verify import verify
from sglc.passes.pass_result import Pass, PassResult, pass_name


class PassManager:
    """Runs `passes` in order. With verify_each, the input and every pass's output are verified."""

    def __init__(self, passes: Sequence[Pass], verify_each: bool = True) -> None:
        self.passes = list(passes)
        self.verify_each = verify_each
        #: Names of the passes that modified the graph during the last run().
        self.changed_by: list[str] = []

    @property
    def names(self) -> list[str]:
        return [pass_name(p) for p in self.passes]

    def run(self, graph: Graph) -> PassResult:
        """Apply every pass; raises PassError naming the pass that crashed or broke the graph."""
        self.changed_by = []
        if self.verify_each:
            verify(graph)  # a VerifyError here is the caller's graph, not a pass's fault
        for fn in self.passes:
            name = pass_name(fn)
            try:
                result = fn(graph)
            except Exception as err:
                raise PassError(f"pass {name} failed: {type(err).__name__}: {err}") from err
            if not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[0], Graph):
                raise PassError(f"pass {name} returned {type(result).__name__}, not a PassResult")
            if self.verify_each:
                try:
                    verify(result[0])
                except VerifyError as err:
                    raise PassError(f"pass {name} left an invalid graph: {err}") from err
            graph = result[0]
            if result[1]:
                self.changed_by.append(name)
        return PassResult(graph, bool(self.changed_by))

