"""The graph IR: Graph, Op, Tensor, Subgraph, GraphTemplate, ONNX import/export and the .xmodel file.

Layers inside: the core (`graph_core`, `op`, `tensor`, `subgraph`, `builder`, `copying`,
`snapshot`, ...) < the codec (`xgraph.ir.onnx`) < `graph` (the public `Graph`, `load`).
"""
from xgraph.ir.gears import Gear
from xgraph.ir.graph import Graph, load
from xgraph.ir.op import Op
from xgraph.ir.state import GraphState
from xgraph.ir.subgraph import Subgraph
from xgraph.ir.template import GraphTemplate, TemplateOp
from xgraph.ir.tensor import Tensor

__all__ = ["Gear", "Graph", "GraphState", "GraphTemplate", "Op", "Subgraph", "Tensor", "TemplateOp", "load"]
