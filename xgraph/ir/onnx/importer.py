"""ONNX -> graph: nodes become ops, initializers become weights, shapes come from onnx shape inference.

The graph is built through `GraphBuilder` into the class the caller names (`graph_class`,
`xgraph.Graph` for the public entry points), so this module needs only the IR core.
"""
from __future__ import annotations

from itertools import compress
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from xgraph.errors import ModelFileError
from xgraph.ir.attribute_values import attribute_to_python
from xgraph.ir.builder import GraphBuilder
from xgraph.ir.graph_core import GraphCore
from xgraph.ir.onnx.nodes import Nodes, is_text, node_order, unique_op_names
from xgraph.ir.onnx.safe_reader import read_model_inventory, sparse_to_dense
from xgraph.ir.onnx.tensor_inventory import Inventory
from xgraph.ir.onnx.functions import called_functions, inline_functions
from xgraph.ir.onnx.inference_budget import expanded_node_count
from xgraph.ir.onnx.shape_inference import DATA_PROP_MAX_DIM, infer_model
from xgraph.ir.onnx.value_types import NotText, decode_type_key, type_to_shape_dtype, value_type_keys
from xgraph.ir.op import Op
from xgraph.ir.tensor import Tensor

#: metadata_props keys written by xgraph itself (not user metadata).
RESERVED_METADATA_PREFIX = "xgraph."


#: The largest opset version a model may import (onnx looks schemas up with a 32-bit int).
MAX_OPSET_VERSION = (1 << 31) - 1


def check_text(model: onnx.ModelProto, label: str) -> None:
    """Refuse model-level and graph-level strings that are not valid UTF-8 (nodes check their own), and
    opset versions past what onnx can look up."""
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
    for o in [*model.opset_import, *(o for f in model.functions for o in f.opset_import)]:
        if not 0 <= o.version <= MAX_OPSET_VERSION:
            raise ModelFileError(f"{label}: opset import of domain {o.domain!r} has version {o.version}; an opset "
                                 f"version is a number from 0 to {MAX_OPSET_VERSION}")


def _set_tensor_type(t: Tensor, tp: onnx.TypeProto | None) -> None:
    if tp is None:
        return
    shape, dtype, is_tensor = type_to_shape_dtype(tp)
    if is_tensor:
        GraphBuilder.set_tensor_type(t, shape, dtype)
    else:
        copy = onnx.TypeProto()
        copy.CopyFrom(tp)
        GraphBuilder.set_tensor_type(t, None, None, copy)


#: attribute types whose decoded value is a scalar, a str or a flat list of scalars (cheap to share or copy)
_PLAIN_ATTRIBUTES = frozenset({onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                               onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS})


def _read_attributes(op: Op, attributes: list[onnx.AttributeProto], label: str,
                     decoded: dict[bytes, tuple[str, Any, int]]) -> None:
    """Decode `attributes` onto `op`. `decoded`: plain attributes already decoded in this model, by their
    bytes (a model repeats a handful of axis/perm attributes on thousands of nodes); lists are copied."""
    for a in attributes:
        key = a.SerializeToString() if a.type in _PLAIN_ATTRIBUTES else None
        hit = decoded.get(key) if key is not None else None
        if hit is not None:
            name, value, attr_type = hit
            if op.has_attr(name):
                raise ModelFileError(f"{label}: node {op.name!r} has attribute {name!r} twice")
            GraphBuilder.set_plain_attr(op, name, list(value) if type(value) is tuple else value, attr_type)
            continue
        if op.has_attr(a.name):
            raise ModelFileError(f"{label}: node {op.name!r} has attribute {a.name!r} twice")
        if not a.name or (a.type == onnx.AttributeProto.UNDEFINED and not a.ref_attr_name):
            raise ModelFileError(f"{label}: node {op.name!r} has an attribute without a name or type "
                                 f"(name {a.name!r}, type {a.type})")
        if a.type == onnx.AttributeProto.SPARSE_TENSOR and not a.ref_attr_name and not a.HasField("sparse_tensor"):
            # read, it would be an empty sparse tensor of no type, which no file can hold again
            raise ModelFileError(f"{label}: node {op.name!r} attribute {a.name!r} cannot be read: it is declared a "
                                 "sparse tensor and holds none")
        try:
            value, attr_type = attribute_to_python(a)
        except Exception as e:  # onnx/numpy raise assorted errors for malformed attributes
            raise ModelFileError(f"{label}: node {op.name!r} attribute {a.name!r} cannot be read: "
                                 f"{type(e).__name__}: {e}") from None
        op._set_onnx_attr(a.name, value, attr_type)
        if key is not None and not a.ref_attr_name and attr_type == a.type:
            decoded[key] = (a.name, tuple(value) if type(value) is list else value, attr_type)


def _unused_output_name(op_name: str, position: int, declared: set[str], tensors: "Mapping[str, Tensor]") -> str:
    """A private name for an omitted optional output (positions are kept), used by no tensor of the model."""
    name = base = f"{op_name}:unused:{position}"
    k = 0
    while name in tensors or name in declared:
        k += 1
        name = f"{base}_{k}"
    return name


def graph_from_onnx(src: Any, *, infer_shapes: bool = True, label: str | None = None,
                    graph_class: type[GraphCore] = GraphCore) -> GraphCore:
    """Build a `graph_class` graph from an ONNX model (path, bytes, or ModelProto)."""
    mapped: dict[str, np.ndarray] = {}
    model, _, label, inv = read_model_inventory(src, label, mapped)
    return graph_from_model_proto(model, label, infer_shapes=infer_shapes, inventory=inv,
                                  graph_class=graph_class, mapped=mapped, nodes=inv.nodes)


def graph_from_model_proto(model: onnx.ModelProto, label: str, *, infer_shapes: bool = True,
                           skip_initializers: frozenset[str] = frozenset(),
                           inventory: Inventory | None = None, graph_class: type[GraphCore] = GraphCore,
                           mapped: dict[str, np.ndarray] | None = None, largest_dim: int | None = None,
                           nodes: Nodes | None = None) -> GraphCore:
    """Build a `graph_class` graph from a ModelProto whose data is inline and already checked
    (`inventory`: its checks' walk), or, for the initializers named in `mapped`, external and
    already mapped (the arrays become the weights as they are: no copy). `largest_dim`: the
    model's `largest_declared_dim`, when the caller read it from its inventory; `nodes`: the main
    graph's nodes as the safe reader read them into columns (unchecked), else they are read here."""
    try:
        return _build_graph(model, label, infer_shapes, skip_initializers, inventory, graph_class, mapped or {},
                            largest_dim, nodes)
    except NotText as e:
        raise ModelFileError(f"{label}: the dimension name {e.args[0][:40]!r} is not valid UTF-8") from None


def _build_graph(model: onnx.ModelProto, label: str, infer_shapes: bool, skip_initializers: frozenset[str],
                 inv: Inventory | None, graph_class: type[GraphCore], mapped: dict[str, np.ndarray],
                 largest_dim: int | None = None, columns: Nodes | None = None) -> GraphCore:
    # read once: the inference budget and the build both use the columns
    nodes = Nodes(model.graph.node, label) if columns is None else columns.check(label)
    if model.functions and called_functions(model):
        expanded_node_count(model, label, top=nodes)  # refuses function-call bombs before expanding them
        model = inline_functions(model, label)
        nodes = Nodes(model.graph.node, label)
    if infer_shapes:
        model = infer_model(model, label, inv, nodes, largest_dim)  # the inferred model has the same nodes, in the same order
    check_text(model, label)
    g = model.graph
    graph = graph_class(g.name or "graph")
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
    types, type_protos = value_type_keys(g)
    if not is_text(*types):
        bad = next(n for n in types if type(n) is not str)
        raise ModelFileError(f"{label}: the value name {bad[:40]!r} is not valid UTF-8")
    build = GraphBuilder(graph)
    tensors = build.tensors  # read-only here: the builder fills it

    def add_const(name: str, array: np.ndarray) -> None:
        if name in tensors:
            raise ModelFileError(f"{label}: initializer {name!r} is defined twice")
        build.add_const(name, array)

    for init in g.initializer:
        if init.name in skip_initializers:
            continue
        if not init.name:
            raise ModelFileError(f"{label}: an initializer has no name")
        try:
            array = mapped.get(init.name) if init.data_location == onnx.TensorProto.EXTERNAL else None
            add_const(init.name, numpy_helper.to_array(init) if array is None else array)
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
    input_names: set[str] = set()
    for vi in g.input:
        if vi.name in tensors:
            if tensors[vi.name].is_const and vi.name not in input_names:
                continue  # an initializer listed as input (IR < 4): a weight
            raise ModelFileError(f"{label}: graph input {vi.name!r} is listed twice; names must be unique")
        if not vi.name:
            raise ModelFileError(f"{label}: a graph input has no name")
        _set_tensor_type(build.add_input(vi.name), vi.type)
        input_names.add(vi.name)
    _add_nodes(build, nodes, types, type_protos, label)
    outputs = []
    for vi in g.output:
        if vi.name not in tensors:
            raise ModelFileError(f"{label}: graph output {vi.name!r} is not defined by any node, initializer or input")
        t = tensors[vi.name]
        if t.shape is None and t.dtype is None:
            _set_tensor_type(t, vi.type)
        outputs.append(t)
    build.set_outputs(outputs)
    build.finish()
    return graph


def _add_nodes(build: GraphBuilder, nodes: Nodes, types: dict[str, bytes], type_protos: dict[bytes, onnx.TypeProto],
               label: str) -> None:
    """Every node as an op, in a topological order, with its attributes and its outputs' types
    (`types`, `type_protos`: serialized TypeProto by value name, and the type of each, `value_type_keys`)."""
    tensors = build.tensors
    order = node_order(nodes, set(tensors), label)
    names = unique_op_names(nodes, order)
    omitted = nodes.omitted_outputs > 0  # optional outputs left out: they get private names (`node_order` counted)
    declared = {o for outs in nodes.outputs for o in outs if o} if omitted else set()
    op_types, domains, inputs, outputs, attributes, docs = \
        nodes.op_types, nodes.domains, nodes.inputs, nodes.outputs, nodes.attributes, nodes.docs
    tensor_types, others = _decoded_types(types, type_protos)

    def output_names(i: int) -> list[str]:
        outs = outputs[i]
        if "" in outs:
            return [o or _unused_output_name(names[i], j, declared, tensors) for j, o in enumerate(outs)]
        return outs

    in_file_order = order == list(range(len(order)))
    if omitted or not in_file_order:
        made = build.add_ops(((names[i], op_types[i], domains[i], inputs[i], output_names(i)) for i in order),
                             tensor_types)
    else:  # file order and every output named (the usual case): the columns as they are
        made = build.add_ops(zip(names, op_types, domains, inputs, outputs), tensor_types)
    op_of = made if in_file_order else dict(zip(order, made))  # node index -> its op
    for i in compress(range(len(docs)), docs):
        op_of[i].doc_string = docs[i]
    decoded: dict[bytes, tuple[str, Any, int]] = {}
    for i in (compress(range(len(attributes)), attributes) if in_file_order else
              [i for i in order if attributes[i]]):  # ops in order: the first bad attribute is named
        _read_attributes(op_of[i], attributes[i], label, decoded)
    if others:  # sequences, maps, optionals, and types that cannot be decoded: op by op, in order
        for op in made:
            for t in op.get_output_tensors():
                key = others.get(t.name)
                if key is not None:
                    _set_tensor_type(t, type_protos[key])


def _decoded_types(types: dict[str, bytes], protos: dict[bytes, onnx.TypeProto]
                   ) -> tuple[dict[str, tuple], dict[str, bytes]]:
    """(name -> (shape, dtype) of the tensor types, name -> key of every other type), each distinct type
    decoded once; a type whose decoding fails is left to `_set_tensor_type`, which raises for it when a
    tensor of the graph has it."""
    distinct = set(types.values())
    shapes: dict[bytes, tuple] = {}
    for key in distinct:
        try:
            shape, dtype, is_tensor = decode_type_key(key, protos[key])
        except NotText:
            continue
        if is_tensor:
            shapes[key] = (shape, dtype)
    if len(shapes) == len(distinct):  # the usual case: every type a tensor type
        return dict(zip(types, map(shapes.__getitem__, types.values()))), {}  # in C
    tensor_types = {name: shapes[key] for name, key in types.items() if key in shapes}
    others = {name: key for name, key in types.items() if key not in shapes}
    return tensor_types, others


__all__ = ["DATA_PROP_MAX_DIM", "RESERVED_METADATA_PREFIX", "check_text", "graph_from_model_proto",
           "graph_from_onnx"]
