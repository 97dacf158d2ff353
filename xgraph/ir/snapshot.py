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
read-only. Cost: O(ops + tensors + subgraphs) time and memory per capture.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import onnx

from xgraph.errors import GraphError
from xgraph.ir.collector import collector_paused

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor


class OpState(NamedTuple):
    """One op as captured."""

    name: str
    type: str
    domain: str
    doc_string: str
    attrs: dict[str, Any]
    attr_kinds: dict[str, "int | None"]
    inputs: "tuple[Tensor | None, ...]"
    outputs: "tuple[Tensor, ...]"


class TensorState(NamedTuple):
    """One tensor as captured (`type_proto`: the serialized TypeProto of a non-tensor value, else None)."""

    name: str
    shape: "tuple | None"
    dtype: "np.dtype | None"
    producer: "Op | None"
    consumers: "dict[Op, int]"
    data: "np.ndarray | None"
    attrs: dict[str, Any]
    type_proto: "bytes | None"


class SubgraphState(NamedTuple):
    """One subgraph as captured (its op set follows from the ops' leaves)."""

    name: str
    parent: "Subgraph | None"
    children: "tuple[Subgraph, ...]"
    attrs: dict[str, Any]


class ModelState(NamedTuple):
    """The ONNX model-level facts (`function_bytes`: each FunctionProto serialized, to catch in-place edits)."""

    opset_imports: dict[str, int]
    ir_version: int
    model_info: dict[str, Any]
    functions: "tuple[onnx.FunctionProto, ...]"
    function_bytes: tuple[bytes, ...]


@dataclass(frozen=True, eq=False)
class GraphState:
    """A graph's state at one moment (see the module docstring); read its fields, never write them."""

    graph: "GraphCore"
    #: bumped by every structural mutation (ops or tensors added, removed, rewired)
    version: int
    name: str
    attrs: dict[str, Any]
    ops: "dict[str, Op]"
    tensors: "dict[str, Tensor]"
    inputs: "tuple[Tensor, ...]"
    outputs: "tuple[Tensor, ...]"
    op_states: "dict[Op, OpState]"
    tensor_states: "dict[Tensor, TensorState]"
    root: "Subgraph"
    subgraphs: "dict[Subgraph, SubgraphState]"
    leaf_of: "dict[Op, Subgraph]"
    model: ModelState
    seq: int
    #: ops with graph attributes (If/Loop/Scan bodies)
    nested_ops: "frozenset[Op]"


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


def capture_state(g: "GraphCore") -> GraphState:
    """The state of `g` now (`Graph.snapshot`)."""
    new = tuple.__new__  # NamedTuple's own __new__ is a Python call: this is the C one, same result
    with collector_paused():
        functions = tuple(g.functions)
        return GraphState(
            graph=g, version=g._version, name=g.name, attrs=copy_attrs(g._attrs),
            ops=dict(g._ops), tensors=dict(g._tensors), inputs=tuple(g._inputs), outputs=tuple(g._outputs),
            op_states={op: new(OpState, (op.name, op.type, op.domain, op.doc_string,
                                         copy_attrs(op._attrs) if op._attrs else {}, op._attr_types.copy(),
                                         tuple(op._inputs), tuple(op._outputs)))
                       for op in g._ops.values()},
            tensor_states={t: new(TensorState, (t.name, t._shape, t._dtype, t._producer, t._consumers.copy(), t._data,
                                                copy_attrs(t._attrs) if t._attrs else {},
                                                None if t._type_proto is None else type_bytes(t._type_proto)))
                           for t in g._tensors.values()},
            root=g._root,
            subgraphs={sg: new(SubgraphState, (sg._name, sg._parent, tuple(sg._children),
                                               copy_attrs(sg._attrs) if sg._attrs else {}))
                       for sg in g.iter_subgraphs()},
            leaf_of=dict(g._leaf_of),
            model=ModelState(dict(g.opset_imports), g.ir_version, copy_value(g.model_info), functions,
                             tuple(f.SerializeToString(deterministic=True) for f in functions)),
            seq=g._seq, nested_ops=frozenset(g._nested_ops))


def restore_state(g: "GraphCore", state: GraphState) -> None:
    """Put `g` back exactly as `state` recorded it (`Graph.restore`)."""
    if state.graph is not g:
        raise GraphError(f"graph {g.name!r}: cannot restore a state captured from graph {state.graph.name!r}")
    with collector_paused():
        structural = (g._version != state.version or g._ops.keys() != state.ops.keys()
                      or g._tensors.keys() != state.tensors.keys())
        g.name = state.name
        g._attrs = copy_attrs(state.attrs)
        g._root = state.root
        for sg, s in state.subgraphs.items():
            sg._name, sg._parent = s.name, s.parent
            sg._children = dict.fromkeys(s.children)
            sg._attrs = copy_attrs(s.attrs)
        g._leaf_of = dict(state.leaf_of)
        for op, s in state.op_states.items():
            op.name, op.type, op.domain, op.doc_string = s.name, s.type, s.domain, s.doc_string
            op._attrs, op._attr_types = copy_attrs(s.attrs), s.attr_kinds.copy()
            op._inputs, op._outputs = list(s.inputs), list(s.outputs)
        for t, s in state.tensor_states.items():
            t.name, t._shape, t._dtype, t._producer = s.name, s.shape, s.dtype, s.producer
            t._consumers, t._data, t._attrs = s.consumers.copy(), s.data, copy_attrs(s.attrs)
            if type_bytes(t._type_proto) != s.type_proto:
                t._type_proto = None if s.type_proto is None else _parse_type(s.type_proto)
        m = state.model
        g.opset_imports, g.ir_version = dict(m.opset_imports), m.ir_version
        g.model_info, g.functions = copy_value(m.model_info), list(m.functions)
        for f, data in zip(m.functions, m.function_bytes):
            if f.SerializeToString(deterministic=True) != data:
                f.ParseFromString(data)
        g._nested_ops = set(state.nested_ops)
        if structural:
            g._ops, g._tensors = dict(state.ops), dict(state.tensors)
            g._inputs, g._outputs, g._seq = list(state.inputs), list(state.outputs), state.seq
            _rebuild_op_sets(state)
        g._cache.clear()  # toposort, networkx view... computed from a changed structure
        g._version = state.version


def _parse_type(data: bytes) -> "onnx.TypeProto":
    tp = onnx.TypeProto()
    tp.ParseFromString(data)
    return tp


def _rebuild_op_sets(state: GraphState) -> None:
    """Recompute every subgraph's op set from each op's leaf (ops were added or removed)."""
    for sg in state.subgraphs:
        sg._ops = set()
    for op, leaf in state.leaf_of.items():
        s = leaf
        while s is not None:
            s._ops.add(op)
            s = s._parent
