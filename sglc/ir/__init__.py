"""The typed IR of LM programs: ops, nodes, graphs, verification, printing, serialization."""
from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.ops import Op
from sglc.ir.types import ValueType

__all__ = ["Graph", "Guard", "Node", "Op", "ValueType"]
