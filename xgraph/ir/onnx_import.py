"""ONNX -> Graph: nodes become ops, initializers become weights, shapes come from onnx shape inference."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from xgraph.errors import GraphError, ModelFileError
from xgraph.ir.attributes import attribute_to_python
from xgraph.ir.graph import Graph
from xgraph.ir.model_file import read_model
from xgraph.ir.op import Op
from xgraph.ir.tensor import Tensor

#: metadata_props keys written by xgraph itself (not user metadata).
RESERVED_METADATA_PREFIX = "xgraph."


_DTYPES: dict[int, np.dtype | None] = {}


def _np_dtype(elem_type: int) -> np.dtype | None:
    if elem_type not in _DTYPES:
        try:
            _DTYPES[elem_type] = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)) if elem_type else None
        except Exception:  # onnx has no numpy type for this element type
            _DTYPES[elem_type] = None
    return _DTYPES[elem_type]


def type_to_shape_dtype(tp: onnx.TypeProto) -> tuple[tuple | None, np.dtype | None, bool]:
    """(shape, dtype, is_tensor) of a TypeProto; shape None when the rank is unknown."""
    which = tp.WhichOneof("value")
    if which not in ("tensor_type", "sparse_tensor_type"):
        return None, None, which is None
    tt = getattr(tp, which)
    dtype = _np_dtype(tt.elem_type)
    if not tt.HasField("shape"):
        return None, dtype, True
    dims = []
    for d in tt.shape.dim:
        kind = d.WhichOneof("value")
        if kind == "dim_value":
            dims.append(d.dim_value)
        elif kind == "dim_param" and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims), dtype, True


def _infer(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # inference is best-effort: custom ops or >2GB models keep declared shapes only
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001 - same reason as above
            return model


def _value_types(g: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    types = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.name and vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    return types


class _Node:
    """A NodeProto's fields read once into Python objects (protobuf field access is slow)."""

    __slots__ = ("name", "op_type", "domain", "inputs", "outputs", "proto")

    def __init__(self, n: onnx.NodeProto):
        self.name = n.name
        self.op_type = n.op_type
        self.domain = n.domain
        self.inputs = list(n.input)
        self.outputs = list(n.output)
        self.proto = n

    def label(self) -> str:
        return self.name or self.op_type


def _node_order(nodes: list[_Node], known: set[str], label: str) -> list[int]:
    """Indices of nodes in a topological order (file order when it already is one)."""
    produced_by: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if not o:
                continue
            if o in produced_by or o in known:
                raise ModelFileError(f"{label}: tensor name {o!r} is defined twice (node {n.label()!r} "
                                     "and an earlier node, initializer or input); names must be unique")
            produced_by[o] = i
    in_file_order = True
    for i, n in enumerate(nodes):
        for x in n.inputs:
            if not x or x in known:
                continue
            j = produced_by.get(x)
            if j is None:
                raise ModelFileError(f"{label}: node {n.label()!r} reads tensor {x!r}, which no node, "
                                     "initializer or graph input defines")
            if j >= i:
                in_file_order = False
    if in_file_order:
        return list(range(len(nodes)))
    indeg = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        deps = {produced_by[x] for x in n.inputs if x and x in produced_by}
        indeg[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i in range(len(nodes)) if indeg[i] == 0]
    ready.reverse()
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for u in sorted(users.get(i, []), reverse=True):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        stuck = [nodes[i].label() for i in range(len(nodes)) if indeg[i] > 0][:5]
        raise ModelFileError(f"{label}: the graph has a cycle through nodes {stuck}")
    return order


def _unique_op_names(nodes: list[_Node], order: list[int]) -> dict[int, str]:
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    taken: set[str] = set()
    names = {}
    for i in order:
        n = nodes[i]
        if n.name and counts[n.name] == 1:
            names[i] = n.name
            taken.add(n.name)
            continue
        base = n.name or n.op_type or "op"
        name, k = base, 0
        while name in taken or (name != n.name and name in counts):
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        names[i] = name
    return names


def _set_tensor_type(t: Tensor, tp: onnx.TypeProto | None) -> None:
    if tp is None:
        return
    shape, dtype, is_tensor = type_to_shape_dtype(tp)
    if is_tensor:
        if t._data is None:
            t._shape = shape
            t._dtype = dtype
    else:
        copy = onnx.TypeProto()
        copy.CopyFrom(tp)
        t._type_proto = copy


def graph_from_onnx(src: Any, *, infer_shapes: bool = True, label: str | None = None) -> Graph:
    """Build a Graph from an ONNX model (path, bytes, or ModelProto)."""
    model, _, label = read_model(src, label)
    return graph_from_model_proto(model, label, infer_shapes=infer_shapes)


def graph_from_model_proto(model: onnx.ModelProto, label: str, *, infer_shapes: bool = True,
                           skip_initializers: frozenset[str] = frozenset()) -> Graph:
    """Build a Graph from a ModelProto whose data is inline and already checked."""
    if infer_shapes:
        model = _infer(model, label)
    g = model.graph
    graph = Graph(g.name or "graph")
    graph.ir_version = int(model.ir_version)
    graph.opset_imports = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    graph.model_info = {
        "producer_name": model.producer_name, "producer_version": model.producer_version,
        "domain": model.domain, "model_version": int(model.model_version), "doc_string": model.doc_string,
        "graph_doc_string": g.doc_string,
        "metadata": {p.key: p.value for p in model.metadata_props if not p.key.startswith(RESERVED_METADATA_PREFIX)},
    }
    for f in model.functions:
        copy = onnx.FunctionProto()
        copy.CopyFrom(f)
        graph.functions.append(copy)
    types = _value_types(g)
    tensors = graph._tensors

    def add_const(name: str, array: np.ndarray) -> None:
        if name in tensors:
            raise ModelFileError(f"{label}: initializer {name!r} is defined twice")
        tensors[name] = Tensor(graph, name, data=array)

    for init in g.initializer:
        if init.name in skip_initializers:
            continue
        if not init.name:
            raise ModelFileError(f"{label}: an initializer has no name")
        try:
            add_const(init.name, numpy_helper.to_array(init))
        except ModelFileError:
            raise
        except Exception as e:  # numpy_helper raises assorted errors for malformed tensors
            raise ModelFileError(f"{label}: initializer {init.name!r} cannot be read: {e}") from None
    for sp in g.sparse_initializer:
        try:
            dense = numpy_helper.to_array(onnx.helper.make_tensor(
                sp.values.name, sp.values.data_type, list(sp.dims), np.zeros(int(np.prod(sp.dims))).tolist()))
            values = numpy_helper.to_array(sp.values)
            idx = numpy_helper.to_array(sp.indices)
            flat = dense.reshape(-1)
            if idx.ndim == 2:
                idx = np.ravel_multi_index(tuple(idx.T), tuple(sp.dims))
            flat[idx] = values
            add_const(sp.values.name, flat.reshape(tuple(sp.dims)))
        except ModelFileError:
            raise
        except Exception as e:  # malformed sparse tensors raise from numpy
            raise ModelFileError(f"{label}: sparse initializer {sp.values.name!r} cannot be read: {e}") from None
    for vi in g.input:
        if vi.name in tensors:
            continue  # an initializer listed as input (IR < 4): a weight
        if not vi.name:
            raise ModelFileError(f"{label}: a graph input has no name")
        t = Tensor(graph, vi.name)
        _set_tensor_type(t, vi.type)
        tensors[vi.name] = t
        graph._inputs.append(t)
    nodes = [_Node(n) for n in g.node]
    order = _node_order(nodes, set(tensors), label)
    names = _unique_op_names(nodes, order)
    root_ops, leaf_of, ops = graph._root._ops, graph._leaf_of, graph._ops
    for i in order:
        n = nodes[i]
        op = Op(graph, names[i], n.op_type, n.domain, graph._seq)
        graph._seq += 1
        proto = n.proto
        if proto.doc_string:
            op.doc_string = proto.doc_string
        for a in proto.attribute:
            if a.name in op._attrs:
                raise ModelFileError(f"{label}: node {op.name!r} has attribute {a.name!r} twice")
            value, attr_type = attribute_to_python(a)
            op._set_onnx_attr(a.name, value, attr_type)
        op._link_inputs([tensors[x] if x else None for x in n.inputs])
        for o in n.outputs:
            if not o:
                # an omitted optional output: give it a private name so positions are kept
                o = f"{op.name}:unused:{len(op._outputs)}"
            t = Tensor(graph, o)
            t._producer = op
            _set_tensor_type(t, types.get(o))
            tensors[o] = t
            op._outputs.append(t)
        ops[op.name] = op
        root_ops.add(op)
        leaf_of[op] = graph._root
    for vi in g.output:
        if vi.name not in tensors:
            raise ModelFileError(f"{label}: graph output {vi.name!r} is not defined by any node, initializer or input")
        t = tensors[vi.name]
        if t._shape is None and t._dtype is None:
            _set_tensor_type(t, vi.type)
        graph._outputs.append(t)
    graph._touch()
    return graph


def apply_shape_inference(graph: Graph) -> None:
    """Refresh unknown tensor shapes/dtypes from onnx shape inference on the exported graph."""
    from xgraph.ir.onnx_export import graph_to_onnx
    model = graph_to_onnx(graph, infer_missing=False)
    inferred = _infer(model, f"graph {graph.name!r}")
    for name, tp in _value_types(inferred.graph).items():
        t = graph._tensors.get(name)
        if t is None or t._data is not None:
            continue
        shape, dtype, is_tensor = type_to_shape_dtype(tp)
        if not is_tensor:
            continue
        if t._dtype is None:
            t._dtype = dtype
        if t._shape is None or (shape is not None and len(shape) == len(t._shape)
                                and sum(isinstance(d, int) for d in shape) > sum(isinstance(d, int) for d in t._shape)):
            t._shape = shape
