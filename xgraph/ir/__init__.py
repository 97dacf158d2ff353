"""The graph IR: Graph, Op, Tensor, Subgraph, GraphTemplate, ONNX import/export and the .xmodel file."""
from xgraph.ir.graph import Graph
from xgraph.ir.op import Op
from xgraph.ir.subgraph import Subgraph
from xgraph.ir.template import GraphTemplate, TemplateOp
from xgraph.ir.tensor import Tensor

__all__ = ["Graph", "GraphTemplate", "Op", "Subgraph", "Tensor", "TemplateOp"]
