"""Graph / Subgraph -> ONNX ModelProto. Exporting never changes the graph.

Boundary tensors (graph or subgraph inputs and outputs) need an element type in ONNX. When
the graph leaves some untyped, the model is first built as it is, run through shape
inference, and rebuilt with the inferred types (`Types`, name -> (shape, dtype)) laid over
the graph's own; the graph keeps what it had (`Graph.infer_shapes` is the way to store them).
"""
from __future__ import annotations

from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from xgraph.errors import GraphError
from xgraph.ir.attribute_values import fill_tensor
from xgraph.ir.onnx.shape_inference import infer_model, type_updates
from xgraph.ir.onnx.side_file import external_reference, goes_external
from xgraph.ir.onnx.wire import nodes as wire_nodes, type_field, value_infos

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.index import GraphIndex
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor

#: Inferred types laid over the graph's on export: tensor name -> (shape, dtype).
Types = dict[str, tuple]

_DOC = attrgetter("doc_string")


def _elem_type(dtype: np.dtype | None) -> int:
    if dtype is None:
        return onnx.TensorProto.UNDEFINED
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except Exception:  # an unmappable dtype exports as UNDEFINED
        return onnx.TensorProto.UNDEFINED


def _typed(t: "Tensor", types: Types | None) -> bool:
    if t.type_proto is not None or t.dtype is not None:
        return True
    return bool(types) and t.name in types and types[t.name][1] is not None


def value_info(t: "Tensor", types: Types | None = None) -> onnx.ValueInfoProto:
    """A ValueInfoProto for `t` (shape omitted when the rank is unknown); `types` overrides the graph's."""
    vi = onnx.ValueInfoProto()
    fill_value_info(vi, t, types)
    return vi


def fill_value_info(vi: onnx.ValueInfoProto, t: "Tensor", types: Types | None = None) -> None:
    """Write `value_info(t, types)` into `vi` (a message already in place, e.g. from ``graph.value_info.add()``)."""
    vi.name = t.name
    type_proto = t.type_proto
    if type_proto is not None:
        vi.type.CopyFrom(type_proto)
        return
    shape, dtype = t.shape, t.dtype
    if types:
        shape, dtype = types.get(t.name, (shape, dtype))
    if dtype is not None:  # else the type is unknown: left for shape inference
        vi.type.CopyFrom(_tensor_type(shape, dtype))


#: (shape, dtype) -> its TypeProto: the tensors of a 100k-op graph share a few types, and building one
#: through onnx.helper costs ten times a copy
_TENSOR_TYPES: dict[tuple, onnx.TypeProto] = {}
_TENSOR_TYPES_LIMIT = 4096


def _tensor_type(shape: tuple | None, dtype: np.dtype) -> onnx.TypeProto:
    # first by the shape as it is, with its dims' types (1, True and 1.0 are equal keys but different dims)
    try:
        exact = (shape, None if shape is None else tuple(map(type, shape)), dtype)
        hit = _TENSOR_TYPES.get(exact)
    except TypeError:  # an unhashable dim or dtype
        exact = hit = None
    if hit is None:
        hit = _normalised_tensor_type(shape, dtype)
        if exact is not None:
            _TENSOR_TYPES[exact] = hit
    return hit


def _normalised_tensor_type(shape: tuple | None, dtype: np.dtype) -> onnx.TypeProto:
    dims = None if shape is None else tuple(d if isinstance(d, (int, str)) else None for d in shape)
    key = (dims, dtype)
    try:
        hit = _TENSOR_TYPES.get(key)
    except TypeError:  # an unhashable dtype
        hit, key = None, None
    if hit is None:
        hit = helper.make_tensor_type_proto(_elem_type(dtype), None if dims is None else list(dims))
        if key is not None:
            if len(_TENSOR_TYPES) >= _TENSOR_TYPES_LIMIT:
                _TENSOR_TYPES.clear()
            _TENSOR_TYPES[key] = hit
    return hit


def _is_unused_placeholder(t: "Tensor", outputs: set) -> bool:
    return ":unused:" in t.name and not t.consumers and t not in outputs


#: nodes and value infos encoded per `MergeFromString` (bytes held at once stay a few hundred KB)
_BATCH = 4096


def _add_node(nodes, op: "Op", outputs: set) -> None:
    """`op` as a NodeProto appended to `nodes` (a graph's repeated field: built in place, never copied)."""
    (inputs, outs, name, op_type, domain), = _omit_placeholders(op.graph.index().node_rows([op]), [op], outputs)
    node = nodes.add(op_type=op_type, domain=domain, name=name, input=inputs, output=outs)
    _add_node_extras(node, op)


def _omit_placeholders(rows: list[tuple[list[str], list[str], str, str, str]], ops: "Sequence[Op]",
                       outputs: set) -> list[tuple[list[str], list[str], str, str, str]]:
    """`rows` (`GraphIndex.node_rows` of `ops`) with "" for each omitted optional output's private placeholder that
    nothing reads (`outputs`: the graph outputs, which are never omitted), as its node names it."""
    for (_, names, *_), op in zip(rows, ops):
        if ":unused:" in "".join(names):
            names[:] = [n if ":unused:" not in n or not _is_unused_placeholder(t, outputs) else ""
                        for n, t in zip(names, op.get_output_tensors())]
    return rows


def _add_node_extras(node: onnx.NodeProto, op: "Op") -> None:
    """The doc string and the ONNX attributes of `op` on its node."""
    if op.doc_string:
        node.doc_string = op.doc_string
    if op.has_onnx_attrs():
        try:
            node.attribute.extend(op.attribute_protos())
        except TypeError as e:
            raise GraphError(f"op {op.name!r}: cannot export attribute: {e}") from None


def _add_nodes(g: onnx.GraphProto, ops: list["Op"], outputs: set, index: "GraphIndex") -> None:
    """Every op as a NodeProto appended to `g.node`, in order: what `_add_node` builds per op, with the names,
    types and domains encoded as bytes (`wire.nodes`: on a 100k-op graph a fifth of a save's time less than
    `nodes.add` per op, measured with `benchmarks/compile_scale.py`) and merged in batches, then the doc strings
    and attributes set on the nodes that have them. A name that is not valid Unicode takes `_add_node`'s way.
    The links and which ops have attributes come from the index, a batch at a time."""
    nodes = g.node
    start = len(nodes)
    for at in range(0, len(ops), _BATCH):
        batch = ops[at:at + _BATCH]
        try:
            encoded = wire_nodes(index.node_rows(batch))
            if b":unused:" in encoded:  # some name may be a placeholder (rare): its node names it ""
                encoded = wire_nodes(_omit_placeholders(index.node_rows(batch), batch, outputs))
        except UnicodeEncodeError:
            for op in batch:
                _add_node(nodes, op, outputs)
            continue
        g.MergeFromString(encoded)
        extras = set(index.onnx_attr_positions(batch))
        extras.update(compress(range(len(batch)), map(_DOC, batch)))
        for i in sorted(extras):
            _add_node_extras(nodes[start + at + i], batch[i])


def _ordered_ops(graph: "Graph", ops: Iterable["Op"] | None = None) -> list["Op"]:
    if ops is None:
        return graph.toposort()  # insertion order unless an op was rewired after creation
    return list(ops)


def _opsets(graph: "Graph", ops: Iterable["Op"]) -> list[onnx.OperatorSetIdProto]:
    versions = dict(graph.opset_imports)
    for op in ops:
        versions.setdefault(op.domain, 1)
    for f in graph.functions:
        versions.setdefault(f.domain, 1)
    return [helper.make_opsetid(d, v) for d, v in sorted(versions.items())]


def _model(graph: "Graph", name: str, ops: list["Op"], inputs, outputs, consts, types: Types | None,
           external: Mapping[str, onnx.TensorProto] | None = None) -> onnx.ModelProto:
    """The model, built in place in one ModelProto (onnx.helper's make_graph/make_model copy every node twice:
    on a 100k-op graph those copies were most of the peak memory of a save)."""
    model = onnx.ModelProto()
    g = model.graph
    g.name = name
    out_set = set(outputs)
    index = graph.index()
    _add_nodes(g, ops, out_set, index)
    io = set(inputs) | out_set
    if types:
        add = g.value_info.add
        for op in ops:
            for t in op.get_output_tensors():
                if t not in io and not _is_unused_placeholder(t, out_set) and _typed(t, types):
                    fill_value_info(add(), t, types)
    else:  # the usual case: the fields `fill_value_info` writes, encoded as bytes (`wire`) and merged in batches,
        # each distinct type encoded once, by the ids of a shape and dtype (the tensors hold both)
        known: dict[tuple[int, int], bytes] = {}
        entries: list[tuple[str, bytes]] = []
        tensors = index.output_tensors(ops)
        for t, shape, dtype, type_bytes in zip(tensors, *index.tensor_types(tensors)):
            if (dtype is None and type_bytes is None) or t in io \
                    or (":unused:" in t.name and _is_unused_placeholder(t, out_set)):
                continue
            if type_bytes is not None:
                entries.append((t.name, type_field(type_bytes)))
                continue
            typed = known.get((id(shape), id(dtype)))
            if typed is None:
                typed = known[(id(shape), id(dtype))] = type_field(_tensor_type(shape, dtype).SerializeToString())
            entries.append((t.name, typed))
            if len(entries) >= _BATCH:  # merged in batches: the bytes never add up to a copy
                g.MergeFromString(value_infos(entries))
                entries.clear()
        g.MergeFromString(value_infos(entries))
    external = external or {}  # weights stored elsewhere: their references, never their bytes
    for t in consts:
        if t.name in external:
            g.initializer.append(external[t.name])
        else:  # written in place: the bytes copied once
            fill_tensor(g.initializer.add(), t.data, t.name)
    for t in inputs:
        fill_value_info(g.input.add(), t, types)
    if graph.ir_version < 4:  # before IR 4 every initializer had to be listed as a graph input
        for t in consts:
            fill_value_info(g.input.add(), t)
    for t in outputs:
        fill_value_info(g.output.add(), t, types)
    info = graph.model_info
    if info.get("graph_doc_string"):
        g.doc_string = info["graph_doc_string"]
    model.opset_import.extend(_opsets(graph, ops))
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


def inferred_types(graph: "Graph") -> Types:
    """What onnx shape inference adds to the graph's tensor types: name -> (shape, dtype). Pure."""
    # large weights go in as references: inference reads only their dims, and copying them
    # would cost their size again (and pass protobuf's 2 GiB limit for large models)
    model = graph_to_onnx(graph, infer_missing=False, external=weight_references(graph.get_tensors()))
    inferred = infer_model(model, f"graph {graph.name!r}")

    def facts(name: str):
        t = graph.get_tensor(name) if graph.has_tensor(name) else None
        return None if t is None else (t.shape, t.dtype, t.is_const)

    return type_updates(facts, inferred)


def _types_for(graph: "Graph", boundary: Iterable["Tensor"]) -> Types | None:
    """None when every boundary tensor is typed, else the inferred types (GraphError naming what stays unknown)."""
    missing = [t for t in boundary if not _typed(t, None)]
    if not missing:
        return None
    types = inferred_types(graph)
    still = [t.name for t in missing if not _typed(t, types)]
    if still:
        raise GraphError(f"graph {graph.name!r}: cannot export, the element type of tensor(s) {still[:5]} is unknown "
                         "and shape inference could not find it; set tensor.dtype")
    return types


#: The location of `weight_references`: a name, never a file.
UNWRITTEN_LOCATION = "xgraph-weight-not-written"


def weight_references(tensors: Iterable["Tensor"]) -> dict[str, onnx.TensorProto]:
    """Stand-ins for the large weights among `tensors`: external references to a file that is
    never written, for passes that read only dims and types (shape inference) or get the
    arrays another way (onnxruntime's external initializers)."""
    return {t.name: external_reference(t.name, t.data, UNWRITTEN_LOCATION, 0)
            for t in tensors if t.is_const and goes_external(t.data)}


def graph_to_onnx(graph: "Graph", *, infer_missing: bool = True,
                  external: Mapping[str, onnx.TensorProto] | None = None) -> onnx.ModelProto:
    """The whole graph as a ModelProto (nodes in topological order); the graph is not changed.

    `external`: weight name -> the TensorProto to use in place of its data (an external-data
    reference, as an .xmodel with a side file stores it)."""
    inputs, outputs = graph.get_input_tensors(), graph.get_output_tensors()
    types = _types_for(graph, [*inputs, *outputs]) if infer_missing else None
    ops = _ordered_ops(graph)
    model = _model(graph, graph.name, ops, inputs, outputs, graph.get_const_tensors(), types, external)
    if infer_missing:
        check_exported(model, f"graph {graph.name!r}", ops)
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


def check_exported(model: onnx.ModelProto, what: str, ops: "Sequence[Op] | None" = None) -> None:
    """Refuse an export whose nodes break their ONNX schema's input/output counts (a GraphError naming the op).

    That is what the graph API lets a caller build wrongly (an op created without its inputs);
    the counts are checked once per distinct (domain, op type, input count, output count), far
    cheaper than onnx.checker on the whole model, which also needs every graph output's shape.
    `ops`: the ops the model's nodes were made from, in node order (each node has its op's name and
    counts): the counts are read from them instead of from the protos.
    """
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    local = {(f.domain, f.name) for f in model.functions}
    if ops is None:
        nodes = model.graph.node
        keys = [(node.domain, node.op_type, len(node.input), len(node.output)) for node in nodes]
    else:
        nodes = ops
        keys = ops[0].graph.index().op_arities(ops) if ops else []
    for key in dict.fromkeys(keys):  # each distinct key once, in the order of its first node
        domain, op_type, n_inputs, n_outputs = key
        domain = "" if domain == "ai.onnx" else domain
        if domain not in ("", "ai.onnx.ml") or (domain, op_type) in local or domain not in opsets:
            continue
        schema = _schema(op_type, domain, opsets[domain])
        if schema is None:
            continue
        for kind, count, low, high in (("inputs", n_inputs, schema.min_input, schema.max_input),
                                       ("outputs", n_outputs, schema.min_output, schema.max_output)):
            if not low <= count <= high:
                wanted = f"{low}" if low == high else f"{low} to {high}" if high < 1 << 30 else f"at least {low}"
                raise GraphError(f"{what}: op {nodes[keys.index(key)].name!r} ({op_type}) has {count} {kind}, but "
                                 f"ONNX {op_type}-{schema.since_version} takes {wanted}; give the op its "
                                 f"{kind} before exporting or saving")


def subgraph_to_onnx(sg: "Subgraph", *, external_weights: bool = False) -> onnx.ModelProto:
    """A standalone model of one subgraph: boundary tensors as inputs/outputs, its weights as
    initializers (with `external_weights`, the large ones as references: `weight_references`)."""
    graph = sg.graph
    inputs = sg.get_input_tensors()
    outputs = sg.get_output_tensors()
    types = _types_for(graph, inputs + outputs)
    consts = sg.get_const_tensors()
    external = weight_references(consts) if external_weights else None
    return _model(graph, f"{graph.name}.{sg.name}", sg.toposort(), inputs, outputs, consts, types, external)


__all__ = ["fill_value_info", "graph_to_onnx", "inferred_types", "subgraph_to_onnx", "value_info",
           "weight_references"]
