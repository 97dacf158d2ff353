"""ONNX -> Graph: nodes become ops, initializers become weights, shapes come from onnx shape inference."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from xgraph.errors import ModelFileError
from xgraph.ir.attribute_values import attribute_to_python
from xgraph.ir.collector import collector_paused
from xgraph.ir.graph import Graph
from xgraph.ir.onnx.inference_budget import data_propagation_is_bounded, expanded_node_count
from xgraph.ir.onnx.safe_reader import Inventory, inventory, read_model_inventory, sparse_to_dense
from xgraph.ir.onnx.nodes import Nodes, is_text, node_order, unique_op_names
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


_TYPE_CACHE: dict[bytes, tuple] = {}
_TYPE_CACHE_LIMIT = 4096


def type_to_shape_dtype(tp: onnx.TypeProto) -> tuple[tuple | None, np.dtype | None, bool]:
    """(shape, dtype, is_tensor) of a TypeProto; shape None when the rank is unknown.

    Most tensors of a model share a handful of types, so decoded types are cached by their
    serialized bytes (a C call) instead of walking the proto's dims in Python every time.
    """
    key = tp.SerializeToString()
    hit = _TYPE_CACHE.get(key)
    if hit is None:
        hit = _decode_type(tp)
        if len(_TYPE_CACHE) >= _TYPE_CACHE_LIMIT:
            _TYPE_CACHE.clear()
        _TYPE_CACHE[key] = hit
    return hit


class _NotText(ValueError):
    """A string field of a type that is not valid UTF-8 (turned into a ModelFileError with the file's label)."""


def _decode_type(tp: onnx.TypeProto) -> tuple[tuple | None, np.dtype | None, bool]:
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
            if type(d.dim_param) is not str:  # protobuf hands over non-UTF-8 text as bytes
                raise _NotText(d.dim_param)
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims), dtype, True


#: onnx's data propagation (which resolves Shape -> Gather -> Reshape chains) spends time and
#: memory linear in the length of the 1-D tensors it meets: about 150 bytes per element in
#: onnx 1.23, so a 200-byte model declaring a [2**32] input asks for hundreds of GiB. Models
#: declaring a dimension longer than this get shape inference without data propagation.
DATA_PROP_MAX_DIM = 1 << 20


def _largest_declared_dim(model: onnx.ModelProto, label: str, inv: Inventory | None) -> int:
    """The largest dimension written in the model: value infos, initializers and attribute tensors, all graphs."""
    inv = inv or inventory(model, label)
    largest = max((max(t.dims, default=0) for t in inv.tensors), default=0)
    for g in inv.graphs:
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.WhichOneof("value") == "tensor_type":
                largest = max(largest, max((d.dim_value for d in vi.type.tensor_type.shape.dim), default=0))
    return largest


def _infer(model: onnx.ModelProto, label: str, inv: Inventory | None = None) -> onnx.ModelProto:
    expanded_node_count(model, label)  # refuses function-call bombs before onnx expands them
    largest = _largest_declared_dim(model, label, inv)
    data_prop = largest <= DATA_PROP_MAX_DIM and data_propagation_is_bounded(model, largest, DATA_PROP_MAX_DIM)
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=data_prop)
    except Exception:  # inference is best-effort: custom ops or >2GB models keep declared shapes only
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001 - same reason as above
            return model


def _value_types(g: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """Declared or inferred types by value name (graph inputs and outputs win over value_info)."""
    types = {}
    for infos in (g.value_info, g.input, g.output):
        for vi in infos:
            tp = vi.type
            if tp.WhichOneof("value") is not None:
                types[vi.name] = tp
    types.pop("", None)
    return types


def check_text(model: onnx.ModelProto, label: str) -> None:
    """Refuse model-level and graph-level strings that are not valid UTF-8 (nodes check their own)."""
    g = model.graph
    texts = [model.producer_name, model.producer_version, model.domain, model.doc_string, g.name, g.doc_string]
    texts += [p.key for p in model.metadata_props] + [p.value for p in model.metadata_props]
    texts += [o.domain for o in model.opset_import]
    texts += [t.name for t in g.initializer] + [s.values.name for s in g.sparse_initializer]
    # value_info names are checked where the type map is built, dim names where types are decoded
    for f in model.functions:  # kept as protos, but their names and domains are read
        texts += [f.name, f.domain, getattr(f, "overload", ""), *f.input, *f.output, *f.attribute]
        texts += [o.domain for o in f.opset_import]
        for n in f.node:
            texts += [n.name, n.op_type, n.domain, *n.input, *n.output]
    if not is_text(*texts):
        bad = next(t for t in texts if type(t) is not str)
        raise ModelFileError(f"{label}: the string {bad[:40]!r} (a name, doc string or metadata entry) is not "
                             "valid UTF-8")


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


def _read_attributes(op: Op, attributes: list[onnx.AttributeProto], label: str) -> None:
    for a in attributes:
        if a.name in op._attrs:
            raise ModelFileError(f"{label}: node {op.name!r} has attribute {a.name!r} twice")
        if not a.name or (a.type == onnx.AttributeProto.UNDEFINED and not a.ref_attr_name):
            raise ModelFileError(f"{label}: node {op.name!r} has an attribute without a name or type "
                                 f"(name {a.name!r}, type {a.type})")
        try:
            value, attr_type = attribute_to_python(a)
        except Exception as e:  # onnx/numpy raise assorted errors for malformed attributes
            raise ModelFileError(f"{label}: node {op.name!r} attribute {a.name!r} cannot be read: "
                                 f"{type(e).__name__}: {e}") from None
        op._set_onnx_attr(a.name, value, attr_type)


def _unused_output_name(op: Op, declared: set[str], tensors: dict[str, Tensor]) -> str:
    """A private name for an omitted optional output (positions are kept), used by no tensor of the model."""
    name = base = f"{op.name}:unused:{len(op._outputs)}"
    k = 0
    while name in tensors or name in declared:
        k += 1
        name = f"{base}_{k}"
    return name


def graph_from_onnx(src: Any, *, infer_shapes: bool = True, label: str | None = None) -> Graph:
    """Build a Graph from an ONNX model (path, bytes, or ModelProto)."""
    model, _, label, inv = read_model_inventory(src, label)
    return graph_from_model_proto(model, label, infer_shapes=infer_shapes, inventory=inv)


def graph_from_model_proto(model: onnx.ModelProto, label: str, *, infer_shapes: bool = True,
                           skip_initializers: frozenset[str] = frozenset(),
                           inventory: Inventory | None = None) -> Graph:
    """Build a Graph from a ModelProto whose data is inline and already checked (`inventory`: its checks' walk)."""
    with collector_paused():
        try:
            return _build_graph(model, label, infer_shapes, skip_initializers, inventory)
        except _NotText as e:
            raise ModelFileError(f"{label}: the dimension name {e.args[0][:40]!r} is not valid UTF-8") from None


def _build_graph(model: onnx.ModelProto, label: str, infer_shapes: bool, skip_initializers: frozenset[str],
                 inv: Inventory | None) -> Graph:
    if infer_shapes:
        model = _infer(model, label, inv)
    check_text(model, label)
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
    if not is_text(*types):
        bad = next(n for n in types if type(n) is not str)
        raise ModelFileError(f"{label}: the value name {bad[:40]!r} is not valid UTF-8")
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
        if not sp.values.name:
            raise ModelFileError(f"{label}: a sparse initializer has no name")
        try:
            add_const(sp.values.name, sparse_to_dense(sp, label))
        except ModelFileError:
            raise
        except Exception as e:  # malformed sparse tensors raise from numpy
            raise ModelFileError(f"{label}: sparse initializer {sp.values.name!r} cannot be read: {e}") from None
    for vi in g.input:
        if vi.name in tensors:
            if tensors[vi.name]._data is not None and tensors[vi.name] not in graph._inputs:
                continue  # an initializer listed as input (IR < 4): a weight
            raise ModelFileError(f"{label}: graph input {vi.name!r} is listed twice; names must be unique")
        if not vi.name:
            raise ModelFileError(f"{label}: a graph input has no name")
        t = Tensor(graph, vi.name)
        _set_tensor_type(t, vi.type)
        tensors[vi.name] = t
        graph._inputs.append(t)
    nodes = Nodes(g.node, label)
    order = node_order(nodes, set(tensors), label)
    names = unique_op_names(nodes, order)
    declared = {o for outs in nodes.outputs for o in outs if o} \
        if any("" in outs for outs in nodes.outputs) else set()
    root, root_ops, leaf_of, ops = graph._root, graph._root._ops, graph._leaf_of, graph._ops
    seq = graph._seq
    get_type = types.get
    decoded_types = _TYPE_CACHE  # filled by _set_tensor_type; read inline here, the hottest loop
    op_types, domains, inputs, outputs, attributes, docs = \
        nodes.op_types, nodes.domains, nodes.inputs, nodes.outputs, nodes.attributes, nodes.docs
    for i in order:
        op = Op(graph, names[i], op_types[i], domains[i], seq)
        seq += 1
        if docs[i]:
            op.doc_string = docs[i]
        if attributes[i]:
            _read_attributes(op, attributes[i], label)
        op_inputs = op._inputs
        for x in inputs[i]:
            if x:
                t = tensors[x]
                consumers = t._consumers
                consumers[op] = consumers.get(op, 0) + 1
                op_inputs.append(t)
            else:
                op_inputs.append(None)
        op_outputs = op._outputs
        for o in outputs[i]:
            if not o:
                o = _unused_output_name(op, declared, tensors)
            t = Tensor(graph, o)
            t._producer = op
            tp = get_type(o)
            if tp is not None:
                decoded = decoded_types.get(tp.SerializeToString())
                if decoded is not None and decoded[2]:
                    t._shape, t._dtype = decoded[0], decoded[1]
                else:
                    _set_tensor_type(t, tp)
            tensors[o] = t
            op_outputs.append(t)
        ops[op.name] = op
        root_ops.add(op)
        leaf_of[op] = root
    graph._seq = seq
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
    from xgraph.ir.onnx.exporter import graph_to_onnx
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
