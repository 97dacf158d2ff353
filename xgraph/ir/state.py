"""The state capture: `GraphState`, everything a graph's API can change, captured by `Graph.snapshot()`, put
back by `Graph.restore(state)` and compared with the live graph by `Graph.changes_since(state)`.

`check_links(graph)` checks every invariant of that state: links agree both ways, the name
tables hold what they name, and every level of the subgraph tree partitions its parent's ops.

The plugin chain runs user code in the middle of compilation; when a plugin raises or
misbehaves, the graph must be exactly as before it ran (a failed operation changes nothing).
A state records, with named fields: the graph's name, attrs and version counter; the op and
tensor tables and the graph inputs/outputs; per op its name, type, domain, doc string,
attributes with their kinds and its links; per tensor its name, shape, dtype, producer,
consumers, weight, attrs and non-tensor type; per subgraph its name, parent, children and
attrs, and each op's leaf; the model-level facts (opset imports, IR version, model info,
functions). Restoring brings back the same objects (a merge is undone by putting the
pre-merge Subgraphs back, so references held elsewhere stay valid).

`Graph.changes_since(state)` (`StateDiff`, below) says what differs now, by kind, in one pass over the
live graph comparing in place (nothing is captured a second time), O(ops + tensors + subgraphs). The
diff is complete and neutral: it says what changed, per op, tensor and subgraph; what is allowed is the
caller's policy (the plugin chain's before/after check, `xgraph.plugins.snapshot`).

Attr values are copied with their nested dicts and lists; arrays are shared, which is safe because weights and ONNX tensor attributes are stored
read-only. Cost: O(ops + tensors + subgraphs) time and memory per capture, kept small by capturing
column-wise (a list per field, one shared empty mapping for every object without attrs): on a
100k-op graph a capture is a few list comprehensions, not 300k records.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

import numpy as np
import onnx

from xgraph.errors import GraphError
from xgraph.ir.attr_store import copy_attrs, copy_value

if TYPE_CHECKING:
    from xgraph.ir.op import Op
    from xgraph.ir.protocols import GraphTables
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor


class ModelState(NamedTuple):
    """The ONNX model-level facts (`function_bytes`: each FunctionProto serialized, to catch in-place edits)."""

    opset_imports: dict[str, int]
    ir_version: int
    model_info: dict[str, Any]
    functions: "tuple[onnx.FunctionProto, ...]"
    function_bytes: tuple[bytes, ...]


class Flat(NamedTuple):
    """A sequence per object, captured as one flat list and the length of each (`split` gives the sequences
    back): two lists in place of a tuple or dict per op or tensor, which the collector would walk."""

    items: list
    counts: list[int]

    @classmethod
    def of(cls, sequences: "list") -> "Flat":
        """The items of `sequences` (lists, tuples or dicts: their keys) and their lengths, in C."""
        return cls(list(chain.from_iterable(sequences)), list(map(len, sequences)))

    def split(self) -> "list[list]":
        """The sequences again, as new lists."""
        items, at, found = self.items, 0, []
        for n in self.counts:
            found.append(items[at:at + n])
            at += n
        return found


class OpColumns(NamedTuple):
    """Every op as captured, one list per field, aligned with `ops` (lists: cheaper than a record per op)."""

    ops: "list[Op]"
    names: list[str]
    types: list[str]
    domains: list[str]
    docs: list[str]
    attrs: "list[Mapping[str, Any]]"
    attr_kinds: "list[Mapping[str, int | None]]"
    #: per op its input tensors (None: an omitted optional input), flat
    inputs: Flat
    #: per op its output tensors, flat
    outputs: Flat


class TensorColumns(NamedTuple):
    """Every tensor as captured, one list per field, aligned with `tensors`."""

    tensors: "list[Tensor]"
    names: list[str]
    shapes: "list[tuple | None]"
    dtypes: "list[np.dtype | None]"
    producers: "list[Op | None]"
    #: per tensor the ops reading it, flat (`consumer_uses`: how many input slots each uses, aligned)
    consumers: Flat
    consumer_uses: list[int]
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

    graph: "GraphTables"
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


def type_bytes(tp: "onnx.TypeProto | None") -> bytes | None:
    """A TypeProto as comparable bytes (None stays None)."""
    return None if tp is None else tp.SerializeToString(deterministic=True)


_INPUTS, _OUTPUTS, _CONSUMERS = operator.attrgetter("_inputs"), operator.attrgetter("_outputs"), \
    operator.attrgetter("_consumers")


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


def capture_state(g: "GraphTables") -> GraphState:
    """The state of `g` now (`Graph.snapshot`)."""
    functions = tuple(g.functions)
    ops, tensors, subgraphs = list(g._ops.values()), list(g._tensors.values()), _tree(g._root)
    op_columns = OpColumns(
        ops, [op.name for op in ops], [op.type for op in ops], [op.domain for op in ops],
        [op.doc_string for op in ops], _attrs_of(ops),
        [op._attr_types.copy() if op._attr_types else EMPTY for op in ops],
        Flat.of(list(map(_INPUTS, ops))), Flat.of(list(map(_OUTPUTS, ops))))
    consumers = list(map(_CONSUMERS, tensors))
    tensor_columns = TensorColumns(
        tensors, [t.name for t in tensors], [t._shape for t in tensors], [t._dtype for t in tensors],
        [t._producer for t in tensors], Flat.of(consumers),
        list(chain.from_iterable(map(dict.values, consumers))), [t._data for t in tensors],
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


def restore_state(g: "GraphTables", state: GraphState) -> None:
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
    g._tree_version += 1
    c = state.op_columns
    for op, name, op_type, domain, doc, attrs, kinds, inputs, outputs in zip(
            c.ops, c.names, c.types, c.domains, c.docs, c.attrs, c.attr_kinds, c.inputs.split(), c.outputs.split()):
        op.name, op.type, op.domain, op.doc_string = name, op_type, domain, doc
        op._attrs, op._attr_types = copy_attrs(attrs), dict(kinds)
        op._inputs, op._outputs = inputs, outputs
    c = state.tensor_columns
    uses = iter(c.consumer_uses)
    for t, name, shape, dtype, producer, consumers, data, attrs, type_proto in zip(
            c.tensors, c.names, c.shapes, c.dtypes, c.producers, c.consumers.split(), c.data, c.attrs, c.type_protos):
        t.name, t._shape, t._dtype, t._producer = name, shape, dtype, producer
        t._consumers, t._data, t._attrs = dict(zip(consumers, uses)), data, copy_attrs(attrs)
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


@dataclass
class StateDiff:
    """What differs now from a captured state; every field empty/False when nothing does."""

    #: ops or tensors added, removed or rewired, or graph inputs/outputs changed
    structure: bool = False
    name: bool = False
    graph_attrs: list[str] = field(default_factory=list)
    #: model-level facts, described ("the model's IR version (8 -> 3)", ...)
    model: list[str] = field(default_factory=list)
    root_replaced: bool = False
    #: the root's children now
    root_children: "tuple[Subgraph, ...]" = ()
    #: captured subgraphs (still in the tree) whose attrs changed -> the keys
    subgraph_attrs: "dict[Subgraph, list[str]]" = field(default_factory=dict)
    #: captured subgraphs (still in the tree) whose children or name changed
    subgraph_children: "set[Subgraph]" = field(default_factory=set)
    #: subgraphs in the tree now that were not captured -> whether they carry attrs or children
    new_subgraphs: "dict[Subgraph, bool]" = field(default_factory=dict)
    #: op -> what changed ("the name/type/domain", "the doc string", "attrs [...]")
    ops: "dict[Op, list[str]]" = field(default_factory=dict)
    #: tensor -> its most serious change: "the name", "the dtype/shape (was ..., now ...)", "the weight or value
    #: type", else "attrs [...]"
    tensors: "dict[Tensor, str]" = field(default_factory=dict)


def same_value(a: Any, b: Any) -> bool:
    """Equality that works for numpy arrays and nested containers of them."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _plainly_equal(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """dict ==, which skips identical values; False when it has to compare numpy arrays."""
    try:
        return bool(before == after)
    except (TypeError, ValueError):
        return False


def changed_keys(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Attribute names added, removed or given a different value."""
    if _plainly_equal(before, after):
        return []
    keys = set(before) | set(after)
    return sorted(k for k in keys if k not in before or k not in after or not same_value(before[k], after[k]))


def changes_since(g: "GraphTables", state: GraphState) -> StateDiff:
    """What differs in `g` now from `state` (see `StateDiff`)."""
    diff = StateDiff()
    diff.structure = (g._version != state.version or g._ops.keys() != state.ops.keys()
                      or g._tensors.keys() != state.tensors.keys())
    diff.name = g.name != state.name
    diff.graph_attrs = changed_keys(state.attrs, g._attrs)
    diff.model = _model_changes(state.model, g)
    _tree_diff(g, state, diff)
    _op_diff(g, state, diff)
    _tensor_diff(g, state, diff)
    return diff


def _model_changes(before: ModelState, g: "GraphTables") -> list[str]:
    found = []
    if before.opset_imports != g.opset_imports:
        found.append(f"the model's opset imports ({before.opset_imports} -> {g.opset_imports})")
    if before.ir_version != g.ir_version:
        found.append(f"the model's IR version ({before.ir_version} -> {g.ir_version})")
    keys = changed_keys(before.model_info, g.model_info) if isinstance(g.model_info, dict) else ["(replaced)"]
    if keys:
        found.append(f"the model info {keys}")
    functions = tuple(g.functions) if isinstance(g.functions, list) else None
    if functions is None or before.functions != functions or any(f.SerializeToString(deterministic=True) != data
                                            for f, data in zip(functions, before.function_bytes)):
        found.append("the model's functions")
    return found


def _tree_diff(g: "GraphTables", state: GraphState, diff: StateDiff) -> None:
    root = g._root
    diff.root_replaced = root is not state.root
    diff.root_children = tuple(root._children)
    get = state.subgraph_index.get
    cols = state.subgraph_columns
    names, children, attrs = cols.names, cols.children, cols.attrs
    level = [root]
    while level:
        below = []
        for sg in level:
            i = get(sg)
            kids = sg._children
            if i is None:
                diff.new_subgraphs[sg] = bool(sg._attrs or kids)
            else:
                old_attrs = attrs[i]
                if old_attrs or sg._attrs:
                    keys = changed_keys(old_attrs, sg._attrs)
                    if keys:
                        diff.subgraph_attrs[sg] = keys
                if names[i] != sg._name or ((kids or children[i]) and children[i] != tuple(kids)):
                    diff.subgraph_children.add(sg)
            if kids:
                below.extend(kids)
        level = below


def _same_columns(now: list, before: list) -> bool:
    """list ==, in C (identical items compare equal at once); False when items refuse to compare (arrays)."""
    try:
        return bool(now == before)
    except (TypeError, ValueError):
        return False


def _op_diff(g: "GraphTables", state: GraphState, diff: StateDiff) -> None:
    c = state.op_columns
    ops = c.ops
    if (_same_columns([op.name for op in ops], c.names) and _same_columns([op.type for op in ops], c.types)
            and _same_columns([op.domain for op in ops], c.domains)
            and _same_columns([op.doc_string for op in ops], c.docs)
            and _same_columns([op._attrs for op in ops], c.attrs)):
        return  # the usual case, compared column by column; else op by op, as below
    for op, name, op_type, domain, doc, attrs in zip(ops, c.names, c.types, c.domains, c.docs, c.attrs):
        found = []
        if op.name != name or op.type != op_type or op.domain != domain:
            found.append(f"the name/type/domain of op {name!r}")
        if op.doc_string != doc:
            found.append(f"the doc string of op {name!r}")
        if not _plainly_equal(attrs, op._attrs):
            keys = changed_keys(attrs, op._attrs)
            if keys:
                found.append(f"attrs {keys} of op {name!r}")
        if found:
            diff.ops[op] = found


def _tensor_diff(g: "GraphTables", state: GraphState, diff: StateDiff) -> None:
    c = state.tensor_columns
    ts = c.tensors
    if (_same_columns([t.name for t in ts], c.names) and _same_columns([t._attrs for t in ts], c.attrs)
            and _same_columns([t._shape for t in ts], c.shapes) and _same_columns([t._dtype for t in ts], c.dtypes)
            and all(map(operator.is_, [t._data for t in ts], c.data))
            and [t._type_proto for t in ts].count(None) == len(ts) and c.type_protos.count(None) == len(ts)):
        return  # the usual case, compared column by column; else tensor by tensor, as below
    for t, name, shape, dtype, data, attrs, type_proto in zip(ts, c.names, c.shapes, c.dtypes, c.data, c.attrs,
                                                              c.type_protos):
        # the most serious change is the one named: a caller may allow attrs changes only
        if t.name != name:
            diff.tensors[t] = f"the name of tensor {name!r} (now {t.name!r})"
        elif shape != t._shape or dtype != t._dtype:
            diff.tensors[t] = (f"the dtype/shape of tensor {name!r} (was {_type_text(dtype, shape)}, now "
                               f"{_type_text(t._dtype, t._shape)})")
        elif data is not t._data or (type_proto is not None or t._type_proto is not None) \
                and type_proto != type_bytes(t._type_proto):
            diff.tensors[t] = f"the weight or value type of tensor {name!r}"
        elif (attrs or t._attrs) and changed_keys(attrs, t._attrs):
            diff.tensors[t] = f"attrs {changed_keys(attrs, t._attrs)} of tensor {name!r}"


def _type_text(dtype, shape) -> str:
    """'float32 [1, 7]' ('unknown' for what is not known)."""
    return f"{dtype if dtype is not None else 'unknown dtype'} {list(shape) if shape is not None else 'unknown shape'}"



# -- the invariants a graph's state keeps (IR tests check them after every mutation) --------------
def check_links(graph: "GraphTables") -> None:
    """Raise GraphError unless every producer/consumer link and name index is consistent. O(V+E)."""
    for name, t in graph._tensors.items():
        if t.name != name or t._graph is not graph:
            raise GraphError(f"tensor index entry {name!r} holds {t!r}")
        if t._producer is not None and t not in t._producer._outputs:
            raise GraphError(f"tensor {name!r} names producer {t._producer.name!r}, which does not list it")
        for op, n in t._consumers.items():
            if graph._ops.get(op.name) is not op:
                raise GraphError(f"tensor {name!r} lists consumer {op.name!r}, which is not in the graph")
            if sum(1 for x in op._inputs if x is t) != n:
                raise GraphError(f"tensor {name!r} counts {n} uses by {op.name!r}, which disagrees with its inputs")
        if t._producer is not None and t._data is not None:
            raise GraphError(f"tensor {name!r} is both produced by an op and a weight")
    for name, op in graph._ops.items():
        if op.name != name or op._graph is not graph:
            raise GraphError(f"op index entry {name!r} holds {op!r}")
        for t in op._inputs:
            if t is not None and (graph._tensors.get(t.name) is not t or op not in t._consumers):
                raise GraphError(f"op {name!r} reads {t.name!r}, which does not list it as a consumer")
        for t in op._outputs:
            if graph._tensors.get(t.name) is not t or t._producer is not op:
                raise GraphError(f"op {name!r} writes {t.name!r}, which does not name it as producer")
    for t in graph._inputs + graph._outputs:
        if graph._tensors.get(t.name) is not t:
            raise GraphError(f"graph input/output {t.name!r} is not a tensor of the graph")
    check_tree(graph)


def check_tree(graph: "GraphTables") -> None:
    """Raise GraphError unless every level of the subgraph tree partitions its parent's ops."""
    root = graph._root
    if root._ops != set(graph._ops.values()):
        raise GraphError("the root subgraph does not hold exactly the graph's ops")
    stack: "list[Subgraph]" = [root]
    while stack:
        s = stack.pop()
        if not s._children:
            for op in s._ops:
                if graph._leaf_of.get(op) is not s:
                    raise GraphError(f"op {op.name!r} is in leaf {s.name!r} but indexed under another leaf")
            continue
        union: set = set()
        for c in s._children:
            if c._parent is not s:
                raise GraphError(f"subgraph {c.name!r} does not name {s.name!r} as parent")
            if not c._ops:
                raise GraphError(f"subgraph {c.name!r} is empty")
            if union & c._ops:
                raise GraphError(f"children of {s.name!r} overlap in {sorted(o.name for o in union & c._ops)[:3]}")
            union |= c._ops
            stack.append(c)
        if union != s._ops:
            raise GraphError(f"children of {s.name!r} do not cover its ops")


__all__ = ["EMPTY", "Flat", "GraphState", "ModelState", "OpColumns", "StateDiff", "SubgraphColumns", "TensorColumns",
           "capture_state", "changes_since", "check_links", "check_tree", "restore_state", "type_bytes"]
