"""The frontend: the SGLang-compatible DSL, program states, and the tracer that builds the IR.

May import sglc.ir and sglc.errors; neither sglc.ir, sglc.fsm nor sglc.passes imports it. The
only way up is lazy: SglFunction.run / run_batch / compile / cache import the executor inside the
method (docs/frontend.md lists the modules bottom-up and these edges).
"""
from sglc.frontend.errors import NotExecutableError, TraceError
from sglc.frontend.function import SglFunction, function
from sglc.frontend.state import ProgramState, ProgramStateGroup
from sglc.frontend.symbolic import SymbolicValue

__all__ = ["NotExecutableError", "ProgramState", "ProgramStateGroup", "SglFunction", "SymbolicValue",
           "TraceError", "function"]
