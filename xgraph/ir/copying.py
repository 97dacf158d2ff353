"""Graph copies: everything but the subgraph tree, built through the builder (`Graph.copy`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, TypeVar

import numpy as np
import onnx

from xgraph.ir.builder import GraphBuilder

if TYPE_CHECKING:
    from xgraph.ir.op import Op
    from xgraph.ir.protocols import GraphTables
    from xgraph.ir.tensor import Tensor

#: a graph (a GraphCore, whose `copy` calls this module: it is seen through `xgraph.ir.protocols.GraphTables`)
G = TypeVar("G", bound="GraphTables")


def copy_graph(graph: G, drop_annotations: frozenset[str] = frozenset()) -> G:
    """A deep copy of `graph` of the same class, without the subgraph tree (see `Graph.copy`). O(V+E).

    Attribute values (dicts, lists, arrays, nested GraphProtos) are copied, so editing the copy
    never reaches the original; weights are shared, being read-only.
    """
    new = type(graph)(graph.name)
    new.opset_imports = dict(graph.opset_imports)
    new.ir_version = graph.ir_version
    new.model_info = plain_copy(graph.model_info)
    for f in graph.functions:
        proto = onnx.FunctionProto()
        proto.CopyFrom(f)
        new.functions.append(proto)
    for k, v in graph.get_attrs().items():
        new.set_attr(k, plain_copy(v))
    build = GraphBuilder(new)
    inputs = set(graph.get_input_tensors())
    for t in graph.get_tensors():
        if t in inputs:
            _copy_tensor_info(t, build.add_input(t.name, t.shape, t.dtype))
        elif t.is_const:
            _copy_tensor_info(t, build.add_const(t.name, t.data))
        elif t.producer is None:  # a dangling tensor: neither input, weight nor op output
            _copy_tensor_info(t, build.add_value(t.name, t.shape, t.dtype))
    tensors = {t.name: t for t in new.get_tensors()}
    for op in _creation_order(graph):
        ins = [None if t is None else tensors[t.name] for t in op.get_input_tensors()]
        copy = build.add_op(op.name, op.type, op.domain, ins, [t.name for t in op.get_output_tensors()])
        copy.doc_string = op.doc_string
        for key, value in op.get_attrs().items():
            kind = op.get_attr_kind(key)
            if kind is None and key in drop_annotations:
                continue
            copy.set_attr(key, plain_copy(value), onnx_type=kind)
        for t, tc in zip(op.get_output_tensors(), copy.get_output_tensors()):
            _copy_tensor_info(t, tc)
            tensors[tc.name] = tc
    build.set_inputs(tensors[t.name] for t in graph.get_input_tensors())
    build.set_outputs(tensors[t.name] for t in graph.get_output_tensors())
    build.finish()
    return new


def _creation_order(graph: "GraphTables") -> "list[Op]":
    """The ops in insertion order when that is topological (the usual case), else in toposort order."""
    seen: set = set()
    ops = graph.get_ops()
    for op in ops:
        if any(p not in seen for p in op.get_input_ops()):
            return graph.toposort()
        seen.add(op)
    return ops


def _copy_tensor_info(src: "Tensor", dst: "Tensor") -> None:
    # protobuf TypeProtos are never mutated after import, so the copy shares it
    GraphBuilder.set_tensor_type(dst, src.shape, src.dtype, src.type_proto)
    for k, v in src.get_attrs().items():
        dst.set_attr(k, plain_copy(v))


def plain_copy(value: Any) -> Any:
    """Dicts, lists, arrays and GraphProtos copied (recursively); immutable values shared."""
    if isinstance(value, dict):
        return {k: plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_copy(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, onnx.GraphProto):
        g = onnx.GraphProto()
        g.CopyFrom(value)
        return g
    return value
