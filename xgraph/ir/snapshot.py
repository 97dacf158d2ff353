"""GraphState: everything a graph's API can change, captured by `Graph.snapshot()` and put back by
`Graph.restore(state)`.

The plugin chain runs user code in the middle of compilation; when a plugin raises or
misbehaves, the graph must be exactly as before it ran (a failed operation changes nothing).
A state records, with named fields: the graph's name, attrs and version counter; the op and
tensor tables and the graph inputs/outputs; per op its name, type, domain, doc string,
attributes with their kinds and its links; per tensor its name, shape, dtype, producer,
consumers, weight, attrs and non-tensor type; per subgraph its name, parent, children and
attrs, and each op's leaf; the model-level facts (opset imports, IR version, model info,
functions). Restoring brings back the same objects (a merge is undone by putting the
pre-merge Subgraphs back, so references held elsewhere stay valid).

`Graph.changes_since(state)` (`xgraph.ir.state_diff`) says what differs now, by kind; the
plugin chain's before/after check (`xgraph.plugins.snapshot`) is built on it. Attr values are copied with their nested dicts and lists;
arrays are shared, which is safe because weights and ONNX tensor attributes are stored
read-only. Cost: O(ops + tensors + subgraphs) time and memory per capture, kept small by capturing
column-wise (a list per field, one shared empty mapping for every object without attrs): on a
100k-op graph a capture is a few list comprehensions, not 300k records.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

import numpy as np
import onnx

from xgraph.errors import GraphError

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor


class ModelState(NamedTuple):
    """The ONNX model-level facts (`function_bytes`: each FunctionProto serialized, to catch in-place edits)."""

    opset_imports: dict[str, int]
    ir_version: int
    model_info: dict[str, Any]
    functions: "tuple[onnx.FunctionProto, ...]"
    function_bytes: tuple[bytes, ...]


class OpColumns(NamedTuple):
    """Every op as captured, one list per field, aligned with `ops` (lists: cheaper than a record per op)."""

    ops: "list[Op]"
    names: list[str]
    types: list[str]
    domains: list[str]
    docs: list[str]
    attrs: "list[Mapping[str, Any]]"
    attr_kinds: "list[Mapping[str, int | None]]"
    inputs: "list[tuple[Tensor | None, ...]]"
    outputs: "list[tuple[Tensor, ...]]"


class TensorColumns(NamedTuple):
    """Every tensor as captured, one list per field, aligned with `tensors`."""

    tensors: "list[Tensor]"
    names: list[str]
    shapes: "list[tuple | None]"
    dtypes: "list[np.dtype | None]"
    producers: "list[Op | None]"
    consumers: "list[dict[Op, int]]"
    data: "list[np.ndarray | None]"
    attrs: "list[Mapping[str, Any]]"
    type_protos: "list[bytes | None]"


class SubgraphColumns(NamedTuple):
    """Every subgraph in the tree as captured (breadth first from the root), one list per field."""

    subgraphs: "list[Subgraph]"
    names: list[str]
    parents: "list[Subgraph | None]"
    children: "list[tuple[Subgraph, ...]]"
    attrs: "list[Mapping[str, Any]]"


#: what an object without attrs captures: one shared, read-only empty mapping instead of a new dict each
EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, eq=False)
class GraphState:
    """A graph's state at one moment (see the module docstring); read its fields, never write them.

    Ops, tensors and subgraphs are captured column-wise (`op_columns`, `tensor_columns`,
    `subgraph_columns`, the root first).
    """

    graph: "GraphCore"
    #: bumped by every structural mutation (ops or tensors added, removed, rewired)
    version: int
    name: str
    attrs: dict[str, Any]
    ops: "dict[str, Op]"
    tensors: "dict[str, Tensor]"
    inputs: "tuple[Tensor, ...]"
    outputs: "tuple[Tensor, ...]"
    op_columns: OpColumns
    tensor_columns: TensorColumns
    root: "Subgraph"
    subgraph_columns: SubgraphColumns
    leaf_of: "dict[Op, Subgraph]"
    model: ModelState
    seq: int
    #: ops with graph attributes (If/Loop/Scan bodies)
    nested_ops: "frozenset[Op]"

    @cached_property
    def subgraph_index(self) -> "dict[Subgraph, int]":
        """Subgraph -> its position in `subgraph_columns`."""
        subgraphs = self.subgraph_columns.subgraphs
        return dict(zip(subgraphs, range(len(subgraphs))))


def copy_value(value: Any) -> Any:
    """Dicts and lists copied (recursively) so in-place edits of them can be undone and seen; the rest shared."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value


def copy_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """`copy_value` of each attribute (a plain copy when no value is a container, the usual case)."""
    if not attrs:
        return {}
    for v in attrs.values():
        if isinstance(v, (dict, list)):
            return {k: copy_value(v) for k, v in attrs.items()}
    return attrs.copy()


def type_bytes(tp: "onnx.TypeProto | None") -> bytes | None:
    """A TypeProto as comparable bytes (None stays None)."""
    return None if tp is None else tp.SerializeToString(deterministic=True)


def _attrs_of(objects: list) -> "list[Mapping[str, Any]]":
    return [copy_attrs(x._attrs) if x._attrs else EMPTY for x in objects]


def _tree(root: "Subgraph") -> "list[Subgraph]":
    """Every subgraph, breadth first from the root (`Graph.iter_subgraphs`' order), a level at a time in C."""
    found: list[Subgraph] = []
    level = [root]
    while level:
        found += level
        level = list(chain.from_iterable([sg._children for sg in level if sg._children]))  # leaves skipped
    return found


def capture_state(g: "GraphCore") -> GraphState:
    """The state of `g` now (`Graph.snapshot`)."""
    functions = tuple(g.functions)
    ops, tensors, subgraphs = list(g._ops.values()), list(g._tensors.values()), _tree(g._root)
    op_columns = OpColumns(
        ops, [op.name for op in ops], [op.type for op in ops], [op.domain for op in ops],
        [op.doc_string for op in ops], _attrs_of(ops),
        [op._attr_types.copy() if op._attr_types else EMPTY for op in ops],
        [tuple(op._inputs) for op in ops], [tuple(op._outputs) for op in ops])
    tensor_columns = TensorColumns(
        tensors, [t.name for t in tensors], [t._shape for t in tensors], [t._dtype for t in tensors],
        [t._producer for t in tensors], [t._consumers.copy() for t in tensors], [t._data for t in tensors],
        _attrs_of(tensors), [None if t._type_proto is None else type_bytes(t._type_proto) for t in tensors])
    subgraph_columns = SubgraphColumns(
        subgraphs, [sg._name for sg in subgraphs], [sg._parent for sg in subgraphs],
        [tuple(sg._children) if sg._children else () for sg in subgraphs], _attrs_of(subgraphs))
    # dict.copy, not dict(): a table with deleted entries (folded ops) is copied compacted in one pass,
    # where dict() would insert the entries again one by one
    return GraphState(
        graph=g, version=g._version, name=g.name, attrs=copy_attrs(g._attrs),
        ops=g._ops.copy(), tensors=g._tensors.copy(), inputs=tuple(g._inputs), outputs=tuple(g._outputs),
        op_columns=op_columns, tensor_columns=tensor_columns, root=g._root, subgraph_columns=subgraph_columns,
        leaf_of=g._leaf_of.copy(),
        model=ModelState(dict(g.opset_imports), g.ir_version, copy_value(g.model_info), functions,
                         tuple(f.SerializeToString(deterministic=True) for f in functions)),
        seq=g._seq, nested_ops=frozenset(g._nested_ops))


def restore_state(g: "GraphCore", state: GraphState) -> None:
    """Put `g` back exactly as `state` recorded it (`Graph.restore`)."""
    if state.graph is not g:
        raise GraphError(f"graph {g.name!r}: cannot restore a state captured from graph {state.graph.name!r}")
    structural = (g._version != state.version or g._ops.keys() != state.ops.keys()
                  or g._tensors.keys() != state.tensors.keys())
    g.name = state.name
    g._attrs = copy_attrs(state.attrs)
    g._root = state.root
    for sg, name, parent, children, attrs in zip(*state.subgraph_columns):
        sg._name, sg._parent = name, parent
        sg._children = dict.fromkeys(children)
        sg._attrs = copy_attrs(attrs)
    g._leaf_of = state.leaf_of.copy()
    for op, name, op_type, domain, doc, attrs, kinds, inputs, outputs in zip(*state.op_columns):
        op.name, op.type, op.domain, op.doc_string = name, op_type, domain, doc
        op._attrs, op._attr_types = copy_attrs(attrs), dict(kinds)
        op._inputs, op._outputs = list(inputs), list(outputs)
    for t, name, shape, dtype, producer, consumers, data, attrs, type_proto in zip(*state.tensor_columns):
        t.name, t._shape, t._dtype, t._producer = name, shape, dtype, producer
        t._consumers, t._data, t._attrs = consumers.copy(), data, copy_attrs(attrs)
        if (t._type_proto is not None or type_proto is not None) and type_bytes(t._type_proto) != type_proto:
            t._type_proto = None if type_proto is None else _parse_type(type_proto)
    m = state.model
    g.opset_imports, g.ir_version = dict(m.opset_imports), m.ir_version
    g.model_info, g.functions = copy_value(m.model_info), list(m.functions)
    for f, data in zip(m.functions, m.function_bytes):
        if f.SerializeToString(deterministic=True) != data:
            f.ParseFromString(data)
    g._nested_ops = set(state.nested_ops)
    if structural:
        g._ops, g._tensors = state.ops.copy(), state.tensors.copy()
        g._inputs, g._outputs, g._seq = list(state.inputs), list(state.outputs), state.seq
        _rebuild_op_sets(state)
    g._index = None  # toposort, links, networkx view... derived from a changed structure
    g._version = state.version


def _parse_type(data: bytes) -> "onnx.TypeProto":
    tp = onnx.TypeProto()
    tp.ParseFromString(data)
    return tp


def _rebuild_op_sets(state: GraphState) -> None:
    """Recompute every subgraph's op set from each op's leaf (ops were added or removed)."""
    for sg in state.subgraph_columns.subgraphs:
        sg._ops = set()
    for op, leaf in state.leaf_of.items():
        s = leaf
        while s is not None:
            s._ops.add(op)
            s = s._parent
