"""Graph / Subgraph -> ONNX ModelProto."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import onnx
from onnx import helper

from xgraph.errors import GraphError
from xgraph.ir.attribute_values import array_to_tensor

if TYPE_CHECKING:
    from xgraph.ir.graph import Graph
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor


def _elem_type(dtype: np.dtype | None) -> int:
    if dtype is None:
        return onnx.TensorProto.UNDEFINED
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except Exception:  # an unmappable dtype exports as UNDEFINED
        return onnx.TensorProto.UNDEFINED


def value_info(t: "Tensor") -> onnx.ValueInfoProto:
    """A ValueInfoProto for `t` (shape omitted when the rank is unknown)."""
    if t._type_proto is not None:
        vi = onnx.ValueInfoProto(name=t.name)
        vi.type.CopyFrom(t._type_proto)
        return vi
    if t._dtype is None:
        return onnx.ValueInfoProto(name=t.name)  # type unknown: left for shape inference
    shape = None if t._shape is None else [d if isinstance(d, (int, str)) else None for d in t._shape]
    return helper.make_tensor_value_info(t.name, _elem_type(t._dtype), shape)


def _is_unused_placeholder(t: "Tensor", outputs: set) -> bool:
    return ":unused:" in t.name and not t._consumers and t not in outputs


def _node(op: "Op", outputs: set) -> onnx.NodeProto:
    node = onnx.NodeProto(
        op_type=op.type, domain=op.domain, name=op.name,
        input=["" if t is None else t.name for t in op._inputs],
        output=["" if _is_unused_placeholder(t, outputs) else t.name for t in op._outputs])
    if op.doc_string:
        node.doc_string = op.doc_string
    try:
        node.attribute.extend(op.attribute_protos())
    except TypeError as e:
        raise GraphError(f"op {op.name!r}: cannot export attribute: {e}") from None
    return node


def _ordered_ops(graph: "Graph", ops: Iterable["Op"] | None = None) -> list["Op"]:
    if ops is None:
        ops = list(graph._ops.values())
        seen: set = set()
        for op in ops:  # insertion order is topological unless rewired after creation
            if any(t is not None and t._producer is not None and t._producer not in seen for t in op._inputs):
                return graph.toposort()
            seen.add(op)
        return ops
    return list(ops)


def _opsets(graph: "Graph", ops: Iterable["Op"]) -> list[onnx.OperatorSetIdProto]:
    versions = dict(graph.opset_imports)
    for op in ops:
        versions.setdefault(op.domain, 1)
    for f in graph.functions:
        versions.setdefault(f.domain, 1)
    return [helper.make_opsetid(d, v) for d, v in sorted(versions.items())]


def _model(graph: "Graph", name: str, nodes, inputs, outputs, consts, value_infos, ops) -> onnx.ModelProto:
    initializers = [array_to_tensor(t._data, t.name) for t in consts]
    graph_inputs = [value_info(t) for t in inputs]
    if graph.ir_version < 4:  # before IR 4 every initializer had to be listed as a graph input
        graph_inputs += [value_info(t) for t in consts]
    g = helper.make_graph(nodes, name, graph_inputs, [value_info(t) for t in outputs],
                          initializer=initializers, value_info=value_infos)
    info = graph.model_info
    if info.get("graph_doc_string"):
        g.doc_string = info["graph_doc_string"]
    model = helper.make_model(g, opset_imports=_opsets(graph, ops))
    model.ir_version = graph.ir_version
    model.producer_name = info.get("producer_name") or "xgraph"
    model.producer_version = info.get("producer_version", "")
    model.domain = info.get("domain", "")
    model.model_version = int(info.get("model_version", 0))
    model.doc_string = info.get("doc_string", "")
    for k, v in info.get("metadata", {}).items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    model.functions.extend(graph.functions)
    return model


def _ensure_types(graph: "Graph", tensors: Iterable["Tensor"]) -> None:
    """Boundary tensors need an element type in ONNX: infer missing ones, or say which is unknown."""
    missing = [t for t in tensors if t._dtype is None and t._type_proto is None]
    if not missing:
        return
    from xgraph.ir.onnx.importer import apply_shape_inference
    apply_shape_inference(graph)
    still = [t.name for t in missing if t._dtype is None and t._type_proto is None]
    if still:
        raise GraphError(f"graph {graph.name!r}: cannot export, the element type of tensor(s) {still[:5]} is unknown "
                         "and shape inference could not find it; set tensor.dtype")


def graph_to_onnx(graph: "Graph", *, infer_missing: bool = True) -> onnx.ModelProto:
    """The whole graph as a ModelProto (nodes in topological order)."""
    if infer_missing:
        _ensure_types(graph, list(graph._inputs) + list(graph._outputs))
    ops = _ordered_ops(graph)
    outputs = graph._output_set()
    nodes = [_node(op, outputs) for op in ops]
    consts = [t for t in graph._tensors.values() if t._data is not None]
    io = set(graph._inputs) | outputs
    vis = [value_info(t) for op in ops for t in op._outputs
           if t not in io and not _is_unused_placeholder(t, outputs) and (t._dtype is not None or t._type_proto)]
    model = _model(graph, graph.name, nodes, graph._inputs, graph._outputs, consts, vis, ops)
    if infer_missing:
        check_exported(model, f"graph {graph.name!r}")
    return model


_SCHEMAS: dict[tuple[str, str, int], Any] = {}


def _schema(op_type: str, domain: str, version: int):
    key = (op_type, domain, version)
    if key not in _SCHEMAS:
        try:
            _SCHEMAS[key] = onnx.defs.get_schema(op_type, version, domain)
        except onnx.defs.SchemaError:  # a custom op or a function: nothing to check it against
            _SCHEMAS[key] = None
    return _SCHEMAS[key]


def check_exported(model: onnx.ModelProto, what: str) -> None:
    """Refuse an export whose nodes break their ONNX schema's input/output counts (a GraphError naming the op).

    That is what the graph API lets a caller build wrongly (an op created without its inputs);
    the counts are checked in one pass over the nodes, far cheaper than onnx.checker on the
    whole model, which also needs every graph output's shape.
    """
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    local = {(f.domain, f.name) for f in model.functions}
    for node in model.graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in ("", "ai.onnx.ml") or (domain, node.op_type) in local or domain not in opsets:
            continue
        schema = _schema(node.op_type, domain, opsets[domain])
        if schema is None:
            continue
        for kind, count, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                       ("outputs", len(node.output), schema.min_output, schema.max_output)):
            if not low <= count <= high:
                wanted = f"{low}" if low == high else f"{low} to {high}" if high < 1 << 30 else f"at least {low}"
                raise GraphError(f"{what}: op {node.name!r} ({node.op_type}) has {count} {kind}, but ONNX "
                                 f"{node.op_type}-{schema.since_version} takes {wanted}; give the op its "
                                 f"{kind} before exporting or saving")


def subgraph_to_onnx(sg: "Subgraph") -> onnx.ModelProto:
    """A standalone model of one subgraph: boundary tensors as inputs/outputs, its weights as initializers."""
    graph = sg.graph
    ops = sg.toposort()
    inputs = sg.get_input_tensors()
    outputs = sg.get_output_tensors()
    _ensure_types(graph, inputs + outputs)
    out_set = set(outputs)
    nodes = [_node(op, out_set) for op in ops]
    consts = sg.get_const_tensors()
    io = set(inputs) | out_set
    vis = [value_info(t) for op in ops for t in op._outputs
           if t not in io and not _is_unused_placeholder(t, out_set) and (t._dtype is not None or t._type_proto)]
    return _model(graph, f"{graph.name}.{sg.name}", nodes, inputs, outputs, consts, vis, ops)
