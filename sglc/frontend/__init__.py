"""The frontend: the SGLang-compatible DSL, program states, and the tracer that builds the IR.

May import sglc.ir and sglc.errors; nothing in sglc.ir imports it.
"""
from sglc.frontend.errors import NotExecutableError, TraceError
from sglc.frontend.function import SglFunction, function
from sglc.frontend.state import ProgramState, ProgramStateGroup
from sglc.frontend.symbolic import SymbolicValue

__all__ = ["NotExecutableError", "ProgramState", "ProgramStateGroup", "SglFunction", "SymbolicValue",
           "TraceError", "function"]
