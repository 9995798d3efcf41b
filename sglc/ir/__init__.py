"""The typed IR of LM programs: ops, nodes, graphs, verification, printing, serialization.

Modules, bottom-up (each imports only modules before it; docs/ir.md): ops, types, node, graph,
printing, dot, grammar_root, gen_constraint, op_rules, verify, serialize. This __init__ is the
top: it sets the hook behind str(graph), since graph.py sits below printing.py and cannot import it.
"""
from sglc.ir.graph import Graph
from sglc.ir.node import Guard, Node
from sglc.ir.ops import Op
from sglc.ir.printing import format_graph
from sglc.ir.types import ValueType

Graph.formatter = format_graph  # str(graph) is the SSA listing

__all__ = ["Graph", "Guard", "Node", "Op", "ValueType"]
