"""Graph: the public graph class, `GraphCore` plus reading and writing ONNX and .xmodel files.

This module sits above the codec (`xgraph/ir/onnx/`): the codec builds graphs of the class
it is given and never imports this module, so the IR has no import cycle. `load` (re-exported
as `xgraph.load`) lives here for the same reason.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx

from xgraph.ir.graph_core import GraphCore
from xgraph.ir.onnx import exporter, importer, xmodel
from xgraph.ir.subgraph import Subgraph


class Graph(GraphCore):
    """A framework-neutral computation graph, imported from or exported to ONNX.

    Ops are kept in insertion order. Since `create_op` needs its inputs to exist, insertion
    order is topological unless `Op.set_input` rewires an op to a later tensor; `toposort`
    is deterministic either way (Kahn's algorithm, ties broken by insertion order).
    """

    @classmethod
    def from_onnx(cls, model: "str | Path | bytes | onnx.ModelProto", *, infer_shapes: bool = True) -> "Graph":
        """Import an ONNX model (path, bytes or ModelProto); shapes come from onnx shape inference."""
        return importer.graph_from_onnx(model, infer_shapes=infer_shapes, graph_class=cls)

    def to_onnx(self) -> onnx.ModelProto:
        """Export as an ONNX ModelProto that onnx.checker accepts and onnxruntime runs; the graph is not changed."""
        return exporter.graph_to_onnx(self)

    def serialize(self, path: "str | Path", *, external_data_threshold: int | None = None) -> None:
        """Write a lossless .xmodel (graph, weights, subgraph tree, all attrs) to `path`.

        Weights adding up to more than `external_data_threshold` bytes (default: the compile
        option, else 256 MiB; always past 2 GiB) go to a side file beside it named by the save
        (``NAME.xmodel.<16 hex>.data``); the pair changes with one rename (docs/xmodel.md)."""
        xmodel.serialize(self, path, external_data_threshold)

    @classmethod
    def deserialize(cls, path: "str | Path | bytes") -> "Graph":
        """Read an .xmodel written by `serialize`."""
        return xmodel.deserialize(path, graph_class=cls)

    def infer_shapes(self) -> None:
        """Fill in unknown shapes and dtypes of op outputs with onnx shape inference."""
        for name, (shape, dtype) in exporter.inferred_types(self).items():
            t = self.get_tensor(name)
            t.shape, t.dtype = shape, dtype

    def _export_subgraph(self, subgraph: Subgraph, external_weights: bool = False) -> onnx.ModelProto:
        return exporter.subgraph_to_onnx(subgraph, external_weights=external_weights)


def load(src: "str | os.PathLike | bytes | onnx.ModelProto") -> Graph:
    """Load an .onnx or .xmodel (by content: .xmodel files carry xgraph metadata)."""
    return xmodel.load(src, graph_class=Graph)


__all__ = ["Graph", "load"]
