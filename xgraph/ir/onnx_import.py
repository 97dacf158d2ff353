"""ONNX -> Graph: nodes become ops, initializers become weights, shapes come from onnx shape inference."""
from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from xgraph.errors import ModelFileError
from xgraph.ir.attributes import attribute_to_python
from xgraph.ir.collector import collector_paused
from xgraph.ir.graph import Graph
from xgraph.ir.model_file import Inventory, inventory, read_model_inventory, sparse_to_dense
from xgraph.ir.nested import GRAPH_TYPES, free_names, graphs_of
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
    data_prop = _largest_declared_dim(model, label, inv) <= DATA_PROP_MAX_DIM
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


class _Nodes:
    """The fields of a graph's NodeProtos read once into Python columns (protobuf field access is slow).

    One comprehension reads every node; the columns are checked for non-UTF-8 text with
    str.join over whole columns (C speed); only nodes with attributes are looked at one by one.
    """

    __slots__ = ("names", "op_types", "domains", "inputs", "outputs", "attributes", "docs", "implicit")

    def __init__(self, protos, label: str):
        # slicing a repeated field is about twice as fast as list(); most nodes have no attributes
        rows = [(n.name, n.op_type, n.domain, n.input[:], n.output[:], n.attribute[:] if n.attribute else None,
                 n.doc_string) for n in protos]
        columns = list(zip(*rows)) if rows else [()] * 7
        self.names, self.op_types, self.domains, self.inputs, self.outputs, self.attributes, self.docs = columns
        #: node index -> outer tensors its If/Loop/Scan bodies read by name (dependencies like inputs)
        self.implicit: dict[int, list[str]] = {}
        if not _is_text(*self.names, *self.op_types, *self.domains, *self.docs, *chain.from_iterable(self.inputs),
                        *chain.from_iterable(self.outputs)):
            bad = next(i for i in range(len(rows)) if not _is_text(*rows[i][:3], rows[i][6], *rows[i][3], *rows[i][4]))
            self._refuse_text(bad, label)
        for i, attributes in enumerate(self.attributes):
            if attributes:
                self._scan_attributes(i, attributes, label)

    def __len__(self) -> int:
        return len(self.names)

    def label(self, i: int) -> str:
        return self.names[i] or self.op_types[i]

    def _refuse_text(self, i: int, label: str) -> None:
        raise ModelFileError(f"{label}: node {self.names[i]!r} ({self.op_types[i]!r}) has a name, input, output "
                             "or attribute name that is not valid UTF-8")

    def _scan_attributes(self, i: int, attributes: list[onnx.AttributeProto], label: str) -> None:
        if not _is_text(*(a.name for a in attributes)):
            self._refuse_text(i, label)
        graphs = graphs_of(helper.get_attribute_value(a) for a in attributes if a.type in GRAPH_TYPES)
        if graphs:
            outer = set().union(*(free_names(g) for g in graphs))
            if not _is_text(*outer):
                raise ModelFileError(f"{label}: node {self.names[i]!r} ({self.op_types[i]!r}) has a nested graph "
                                     "whose names are not valid UTF-8")
            self.implicit[i] = sorted(outer - set(self.outputs[i]))

    def dependencies(self, i: int) -> list[str]:
        """Inputs then implicit inputs of node `i` (omitted optionals included as "")."""
        extra = self.implicit.get(i)
        return self.inputs[i] + extra if extra else self.inputs[i]


def _is_text(*values: Any) -> bool:
    # protobuf hands over a string field that is not valid UTF-8 as bytes; str.join refuses
    # anything but str, at C speed
    try:
        "".join(values)
    except TypeError:
        return False
    return True


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
    if not _is_text(*texts):
        bad = next(t for t in texts if type(t) is not str)
        raise ModelFileError(f"{label}: the string {bad[:40]!r} (a name, doc string or metadata entry) is not "
                             "valid UTF-8")


def _node_order(nodes: _Nodes, known: set[str], label: str) -> list[int]:
    """Indices of nodes in a topological order (file order when it already is one)."""
    produced_by: dict[str, int] = {}
    for i, outputs in enumerate(nodes.outputs):
        for o in outputs:
            if not o:
                continue
            if o in produced_by or o in known:
                raise ModelFileError(f"{label}: tensor name {o!r} is defined twice (node {nodes.label(i)!r} "
                                     "and an earlier node, initializer or input); names must be unique")
            produced_by[o] = i
    in_file_order = True
    get = produced_by.get
    for i, inputs in enumerate(nodes.inputs):
        for x in inputs:
            if x:
                j = get(x, -1)
                if j >= i or (j < 0 and x not in known):
                    in_file_order = _check_defined(nodes, i, x, j, label) and in_file_order
    for i, extra in nodes.implicit.items():
        for x in extra:
            j = get(x, -1)
            if j >= i or (j < 0 and x not in known):
                in_file_order = _check_defined(nodes, i, x, j, label) and in_file_order
    if in_file_order:
        return list(range(len(nodes)))
    indeg = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        deps = {produced_by[x] for x in nodes.dependencies(i) if x and x in produced_by}
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
        stuck = [nodes.label(i) for i in range(len(nodes)) if indeg[i] > 0][:5]
        raise ModelFileError(f"{label}: the graph has a cycle through nodes {stuck}")
    return order


def _check_defined(nodes: _Nodes, i: int, x: str, j: int, label: str) -> bool:
    """False for a tensor produced later in the file (the file is not in topological order); refuses an undefined one."""
    if j >= 0:
        return False
    how = "reads" if x in nodes.inputs[i] else "has a nested graph that reads"
    raise ModelFileError(f"{label}: node {nodes.label(i)!r} {how} tensor {x!r}, which no node, "
                         "initializer or graph input defines")


def _unique_op_names(nodes: _Nodes, order: list[int]) -> list[str]:
    given = nodes.names
    if "" not in given and len(set(given)) == len(given):  # the usual case: every node named, no clashes
        return list(given)
    counts: dict[str, int] = {}
    for name in given:
        counts[name] = counts.get(name, 0) + 1
    taken: set[str] = set()
    names = list(given)
    for i in order:
        given_name = given[i]
        if given_name and counts[given_name] == 1:
            taken.add(given_name)
            continue
        base = given_name or nodes.op_types[i] or "op"
        name, k = base, 0
        while name in taken or (name != given_name and name in counts):
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
    if not _is_text(*types):
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
    nodes = _Nodes(g.node, label)
    order = _node_order(nodes, set(tensors), label)
    names = _unique_op_names(nodes, order)
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
