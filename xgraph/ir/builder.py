"""The one writer of IR state: tables, producer/consumer links, the subgraph tree, annotations in bulk, weights.

Every way a graph comes into being or changes shape goes through here: `Graph.create_op` /
`create_input` / `create_const` (after their checks), ONNX import, `.xmodel` load and
`Graph.copy` build with `GraphBuilder`; link edits (`Op.set_input`, `Graph.replace_uses`) use
`link_input` / `unlink_input`; removals, graph inputs and outputs, the tree's splits and merges
(`Subgraph.create_child_subgraph`, `merge_child_groups`, `set_children_attrs`), op annotations in
bulk (`Graph.set_op_annotation_columns`, `.xmodel` load) and the weight edits of constant folding
and gears (`replace_ops_by_weights`, `remove_unused_weights`, `share_weight`, `bind_weight`) are
methods and functions of this module. So the rules "a tensor's consumers count the input slots
reading it", "an op output names its producer", "the root holds every op and each op knows its
leaf" are written once. A single edit is the bulk form with one element.

`GraphBuilder` does no checking: callers check first (names free, inputs of this graph), then
build, so nothing can fail halfway. The functions below check everything first, then write.
Every structural write ends with `GraphCore._touch`, which drops the graph's index
(`xgraph.ir.index`).
"""
from __future__ import annotations

from collections import deque
from itertools import chain
from types import MappingProxyType
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from xgraph.errors import GraphError
from xgraph.ir.attr_store import check_attr_value
from xgraph.ir.op import ANNOTATION, Op
from xgraph.ir.tensor import Tensor

if TYPE_CHECKING:
    from xgraph.ir.protocols import GraphTables, TreeNode

# The writer sits beneath `graph_core.py` and `subgraph.py`, whose edits call it: it sees the graph and its
# subgraphs through `xgraph.ir.protocols`, and makes new subgraphs as `type(parent)(graph, name, parent, ops)`.
#: a subgraph of the tree (a Subgraph): what a tree edit is given is what it makes
Node = TypeVar("Node", bound="TreeNode")

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_NAME, _OUTPUTS, _OPS = attrgetter("name"), attrgetter("_outputs"), attrgetter("_ops")


def _drain(calls: Iterable) -> None:
    """Run a lazy map to its end (its calls happen in C), keeping none of the results."""
    deque(calls, maxlen=0)


def link_input(op: Op, index: int, tensor: "Tensor | None") -> None:
    """Point input slot `index` of `op` at `tensor` (which counts one more use by `op`)."""
    op._inputs[index] = tensor
    if tensor is not None:
        tensor._consumers[op] = tensor._consumers.get(op, 0) + 1


def unlink_input(op: Op, index: int) -> None:
    """Drop the use of input slot `index` of `op` from the tensor it reads (the slot keeps naming it
    until `link_input` overwrites it: a removed op still says what it read)."""
    t = op._inputs[index]
    if t is None:
        return
    n = t._consumers.get(op, 0) - 1
    if n <= 0:
        t._consumers.pop(op, None)
    else:
        t._consumers[op] = n


def set_input(op: Op, index: int, tensor: "Tensor | None") -> None:
    """Input slot `index` of `op` reads `tensor` (None: omitted) instead of what it read (`Op.set_input`, checked)."""
    unlink_input(op, index)
    link_input(op, index, tensor)


def rewire(readers: "Iterable[Op]", old: Tensor, new: Tensor) -> None:
    """Every input slot of `readers` that reads `old` reads `new` instead."""
    for c in readers:
        for i, t in enumerate(c._inputs):
            if t is old:
                set_input(c, i, new)


def tree_edited(graph: "GraphTables") -> None:
    """The subgraph tree changed: a new `tree_version` (the index, which reads only ops and links, stays)."""
    graph._tree_version += 1


def _leave_tree(leaf: "TreeNode | None", op: Op) -> None:
    """Take `op` out of `leaf` and its ancestors; a subgraph left without ops leaves its parent."""
    if leaf is not None:
        tree_edited(leaf._graph)
    s = leaf
    while s is not None:
        s._ops.discard(op)
        parent = s._parent
        if parent is not None and not s._ops:
            del parent._children[s]
        s = parent


class GraphBuilder:
    """Adds tensors, ops and subgraphs to one graph, keeping every table and link consistent."""

    __slots__ = ("graph", "_tensors", "_ops", "_root_ops", "_leaf_of", "_root", "_split_root")

    def __init__(self, graph: "GraphTables"):
        self.graph = graph
        self._tensors = graph._tensors
        self._ops = graph._ops
        self._root = graph._root
        self._root_ops = graph._root._ops
        self._leaf_of = graph._leaf_of
        #: once the root has children, every new op gets a leaf child of its own
        self._split_root = bool(graph._root._children)

    @property
    def tensors(self) -> "Mapping[str, Tensor]":
        """The graph's tensors by name as they are now (read-only, live: it shows what the builder adds)."""
        return MappingProxyType(self.graph._tensors)

    # -- tensors -------------------------------------------------------------------------------
    def add_input(self, name: str, shape=None, dtype=None) -> Tensor:
        """A graph input, appended to the inputs."""
        t = Tensor(self.graph, name, shape, dtype)
        self._tensors[name] = t
        self.graph._inputs.append(t)
        return t

    def add_const(self, name: str, data: np.ndarray) -> Tensor:
        """A weight (stored read-only)."""
        t = Tensor(self.graph, name, data=data)
        self._tensors[name] = t
        return t

    def add_value(self, name: str, shape=None, dtype=None) -> Tensor:
        """A tensor that is neither input, weight nor op output (kept by copies of odd graphs)."""
        t = Tensor(self.graph, name, shape, dtype)
        self._tensors[name] = t
        return t

    # -- ops -----------------------------------------------------------------------------------
    def add_op(self, name: str, op_type: str, domain: str, inputs: "Iterable[Tensor | None]",
               outputs: Sequence[str]) -> Op:
        """An op reading `inputs` (tensors of the graph) and writing new tensors named `outputs`; it joins the tree."""
        return self.add_ops([(name, op_type, domain, ["" if t is None else t.name for t in inputs], outputs)])[0]

    def add_ops(self, rows: "Iterable[tuple[str, str, str, Sequence[str], Sequence[str]]]",
                output_types: "Mapping[str, tuple] | None" = None) -> list[Op]:
        """`add_op` for many ops (import): rows of (name, type, domain, input names, output names), in order.

        An input name is "" for an omitted optional input, else a tensor of the graph or an output
        of an earlier row (the caller checked that). `output_types`: (shape tuple or None, numpy dtype
        or None) by output name, for the outputs whose type is known. One loop with its tables held
        locally, because per-call overhead is most of `add_op`'s cost on a 100k-op model.
        """
        graph, tensors = self.graph, self._tensors
        get_type = (output_types or {}).get
        seq = graph._seq
        made: list[Op] = []
        append = made.append
        for name, op_type, domain, input_names, output_names in rows:
            op = Op(graph, name, op_type, domain, seq)
            seq += 1
            op_inputs = op._inputs
            for x in input_names:
                if x:
                    t = tensors[x]
                    op_inputs.append(t)
                    consumers = t._consumers
                    consumers[op] = consumers.get(op, 0) + 1
                else:
                    op_inputs.append(None)
            op_outputs = op._outputs
            for o in output_names:
                t = Tensor(graph, o)
                t._producer = op
                typed = get_type(o)
                if typed is not None:
                    t._shape, t._dtype = typed
                tensors[o] = t
                op_outputs.append(t)
            append(op)
        graph._seq = seq
        # the tables take the new ops in bulk (names are unique: the caller checked)
        self._ops.update({op.name: op for op in made})
        self._root_ops.update(made)
        if self._split_root:
            root, leaf_of = self._root, self._leaf_of
            make = type(root)
            for op in made:
                child = make(graph, f"subgraph_{op.name}", root, (op,))
                root._children[child] = None
                leaf_of[op] = child
            tree_edited(graph)
        else:
            self._leaf_of.update(dict.fromkeys(made, self._root))
        return made

    def remove_ops(self, ops: "Sequence[Op]") -> None:
        """Take each of `ops` and its output tensors out of the tables, the links and the tree (emptied subgraphs
        go too); constant folding removes thousands at once."""
        tensors, table, leaf_of, root = self._tensors, self._ops, self._leaf_of, self._root
        for op in ops:
            for t in op._inputs:  # unlink_input per slot
                if t is not None:
                    consumers = t._consumers
                    n = consumers.get(op, 0) - 1
                    if n <= 0:
                        consumers.pop(op, None)
                    else:
                        consumers[op] = n
        outputs = [t.name for op in ops for t in op._outputs]
        _drain(map(tensors.__delitem__, outputs))  # the tables' deletions, in C
        _drain(map(table.__delitem__, [op.name for op in ops]))
        if not root._children:  # every op's leaf is the root (before any plugin ran)
            _drain(map(leaf_of.__delitem__, ops))
            root._ops.difference_update(ops)
        else:
            for op in ops:
                _leave_tree(leaf_of.pop(op), op)
        self.graph._nested_ops.difference_update(ops)

    def remove_tensor(self, t: Tensor) -> None:
        """Take an unlinked tensor (weight or graph input) out of the tables."""
        del self._tensors[t.name]
        if t in self.graph._inputs:
            self.graph._inputs.remove(t)

    @staticmethod
    def set_tensor_type(t: Tensor, shape, dtype, type_proto=None) -> None:
        """Shape (a tuple or None) and dtype (a numpy dtype or None) of a non-weight, and the TypeProto
        of a non-tensor value (sequence, map, optional) when given."""
        if type_proto is not None:
            t._type_proto = type_proto
        if t._data is None:
            t._shape, t._dtype = shape, dtype

    @staticmethod
    def set_plain_attr(op: Op, name: str, value: Any, kind: int) -> None:
        """An ONNX attribute decoded from a file whose value is a number, a str or a flat list of them (nothing to
        freeze, never a graph): written as it is."""
        op._attrs[name] = value
        op._attr_types[name] = kind

    @staticmethod
    def set_annotations(obj: "Tensor | TreeNode | GraphTables", attrs: dict[str, Any]) -> None:
        """Attrs of a tensor, subgraph or graph read back from a file (already checked by the reader)."""
        obj._attrs.update(attrs)

    # -- graph order and outputs -------------------------------------------------------------
    def set_outputs(self, tensors: Iterable[Tensor]) -> None:
        """The graph outputs, in order."""
        self.graph._outputs = list(tensors)

    def set_inputs(self, tensors: Iterable[Tensor]) -> None:
        """The graph inputs, in order (tensors made by `add_input`)."""
        self.graph._inputs = list(tensors)

    def reorder(self, op_names: Sequence[str], tensor_names: Sequence[str]) -> None:
        """Put ops (every one, by name) and tensors (those named first, each a tensor of the graph; the rest
        after) in a saved order."""
        graph = self.graph
        if list(self._ops) != list(op_names):  # a file written from this order is read back in it: kept as it is
            graph._ops = {n: self._ops[n] for n in op_names}
        for i, op in enumerate(graph._ops.values()):
            op._seq = i
        listed = dict.fromkeys(tensor_names)
        if list(self._tensors)[:len(listed)] != list(listed):
            listed.update(self._tensors)  # the named keep their places, taking their tensors; the rest follow
            graph._tensors = listed
        self._ops, self._tensors = graph._ops, graph._tensors

    # -- subgraph tree -------------------------------------------------------------------------
    def add_subgraph(self, parent: Node, name: str, attrs: dict[str, Any]) -> Node:
        """A new (for now empty) child of `parent`; its ops come from `place_ops` on its leaves."""
        sg = type(parent)(self.graph, name, parent)
        sg._attrs = attrs
        parent._children[sg] = None
        tree_edited(self.graph)
        return sg

    def place_ops(self, leaf: "TreeNode", ops: Sequence[Op]) -> None:
        """Put `ops` in `leaf` and every subgraph above it (the root already holds them): a file's tree, read back."""
        self._leaf_of.update(dict.fromkeys(ops, leaf))
        tree_edited(self.graph)
        s = leaf
        while s._parent is not None:
            s._ops.update(ops)
            s = s._parent

    def finish(self) -> None:
        """Drop the graph's derived caches (call once the bulk build is done)."""
        self.graph._touch()


def mark_nested(graph: "GraphTables", op: Op, nested: bool) -> None:
    """Record whether `op` holds a graph attribute (an If/Loop/Scan body): the graph's set of such ops."""
    if nested:
        graph._nested_ops.add(op)
    else:
        graph._nested_ops.discard(op)


# -- annotations of many ops ---------------------------------------------------------------------
_NOT_GIVEN = object()


def write_op_annotations(graph: "GraphTables", ops: "Sequence[Op]", columns: "Mapping[str, Sequence[Any]]",
                         missing: Any = _NOT_GIVEN) -> None:
    """Set annotation `key` to `values[i]` on `ops[i]` for each (key, values) of `columns`, keys in order, except
    where a value is `missing`; all or nothing. An op carrying an ONNX attribute named `key` keeps it; a later
    occurrence of an op in `ops` wins. What `Graph.set_op_annotations`, `set_op_annotation_columns`,
    `Op.set_attr(..., onnx_type=None)` in bulk and the `.xmodel` reader write. O(ops x keys)."""
    leaf_of = graph._leaf_of
    if not all(map(leaf_of.__contains__, ops)):  # every op of the graph has a leaf; checked in C
        op = next(op for op in ops if op not in leaf_of)
        raise GraphError(f"graph {graph.name!r}: set_op_annotations got {op!r}, which is not an op of it")
    for key, values in columns.items():
        if len(values) != len(ops):
            raise GraphError(f"graph {graph.name!r}: annotation {key!r} has {len(values)} values for {len(ops)} ops; "
                             "give one value per op")
        if not set(map(type, values)) <= {str}:  # the usual values (devices, reasons, kernels) are all str
            for op, value in zip(ops, values):
                if value is not missing:
                    check_attr_value(f"op {op.name!r}", key, value)
    for key, values in columns.items():  # one plain loop per key: no per-op dict or call to build
        for op, value in zip(ops, values):
            kinds = op._attr_types
            if value is not missing and (key not in kinds or kinds[key] is ANNOTATION):
                op._attrs[key] = value
                kinds[key] = ANNOTATION


# -- weights ---------------------------------------------------------------------------------------
def replace_op_by_weights(graph: "GraphTables", op: Op, arrays: "Sequence[np.ndarray]") -> "list[Tensor]":
    """`replace_ops_by_weights` of one op: remove `op` and make each of its outputs that has readers a weight of
    the same name holding `arrays[i]`, read by the same ops in the same slots. Returns the new weights."""
    return replace_ops_by_weights(graph, [(op, arrays)])


def replace_ops_by_weights(graph: "GraphTables", folds: "Sequence[tuple[Op, Sequence[np.ndarray]]]",
                           keep_unread: bool = True) -> "list[Tensor]":
    """For each (op, arrays) of `folds` in turn: remove the op and make each of its outputs that has readers a
    weight of the same name holding `arrays[i]` (a read-only view, as `create_const` keeps it), read by the same
    ops in the same slots; one check of everything first and one index drop. Returns the new weights in the
    order they were made. The result is what `create_const` + `replace_uses` per output, `remove_op`, then
    `remove_tensor` of the temporary leave, op after op.

    A weight some later op of `folds` is the only reader of would be made and then be left unread; with
    `keep_unread=False` it is not made at all (what `remove_unused_weights` would do to it next). GraphError,
    changing nothing, when an op is not of this graph or given twice, `arrays` has not one array per output,
    or an output is a graph output or read by a nested graph.
    """
    ops = list(map(_FIRST, folds))
    table = graph._ops
    try:
        known = list(map(table.get, map(_NAME, ops))) == ops  # each op the one of its name here (in C)
    except (AttributeError, TypeError):
        known = False
    if not known:
        for op in ops:
            graph._resolve_op(op)  # raises, naming what it is
    rank = dict(zip(ops, range(len(ops))))  # the order of the calls
    if len(rank) != len(ops):
        twice = next(op for op in ops if ops.count(op) > 1)
        raise GraphError(f"op {twice.name!r} is given twice to replace by weights; give each op once")
    for op, (_, arrays) in zip(ops, folds):
        if len(arrays) != len(op._outputs):
            raise GraphError(f"op {op.name!r} has {len(op._outputs)} output(s) but {len(arrays)} array(s) were "
                             "given to replace them; give one array per output")
    index = graph.index()
    exposed, implicit = index.output_set(), index.implicit_reads()[1].keys()
    every = list(chain.from_iterable(map(_OUTPUTS, ops)))
    if not (exposed.isdisjoint(every) and implicit.isdisjoint(every)):  # asked in C; the op named below
        for op in ops:
            kept = [t.name for t in op._outputs if t in exposed or t in implicit]
            if kept:
                raise GraphError(f"cannot replace op {op.name!r} by weights: its output(s) {kept} are graph outputs "
                                 "or read by a nested graph")
    # checks done: nothing below can fail
    arrays = list(chain.from_iterable(map(_SECOND, folds)))  # one per output, as `every`
    if keep_unread:  # whether a weight is made depends on the readers when its producer's call runs
        calls = list(chain.from_iterable([i] * len(op._outputs) for i, op in enumerate(ops)))
        moved = [(call, t, list(t._consumers), a) for call, t, a in zip(calls, every, arrays) if t._consumers]
    builder = GraphBuilder(graph)
    builder.remove_ops(ops)  # an op removed later than a producer reads the old tensor: never relinked
    if not keep_unread:  # an output's readers now are those no call removes, in their order: the weight's
        moved = [(0, t, t._consumers, a) for t, a in zip(every, arrays) if t._consumers]
    add_const, asarray, last = builder.add_const, np.asarray, len(ops)
    made = []
    for call, old, consumers, array in moved:
        if keep_unread:
            readers = [c for c in consumers if c not in rank]  # the readers no call removes: the weight keeps them
            if not readers and all(rank.get(c, last) < call for c in consumers):
                continue  # every reader was removed by an earlier call: that call made no weight
        else:
            readers = list(consumers)
        weight = add_const(old.name, asarray(array))
        rewire(readers, old, weight)
        made.append(weight)
    if ops:
        graph._touch(keeps_order=True)  # ops and their outputs gone, weights (no producer) added
    return made


def remove_unused_weights(graph: "GraphTables", keep: "Iterable[Tensor]" = ()) -> int:
    """Remove every weight nobody reads (not consumed, not a graph output, not read by a nested graph,
    not in `keep`), in one step; returns how many went."""
    index = graph.index()
    keep = set(keep) | index.output_set() | index.nested_read_tensors()
    unused = [t for t in graph._tensors.values() if t._data is not None and not t._consumers and t not in keep]
    if unused:
        builder = GraphBuilder(graph)
        for t in unused:
            builder.remove_tensor(t)
        graph._touch(keeps_order=True)
    return len(unused)


def set_weights(graph: "GraphTables", pairs: "Iterable[tuple[Tensor, Tensor]]") -> None:
    """Each (tensor, source) of `pairs`: `tensor` of `graph` holds `source`'s read-only array (the same object: gears
    keep one copy of equal weights); a graph input made a weight leaves the inputs. Checked by the caller."""
    for t, source in pairs:
        t._data = source._data
    graph._inputs = [t for t in graph._inputs if t._data is None]
    graph._touch()


# -- the subgraph tree ----------------------------------------------------------------------------
def split_into_leaves(sg: "TreeNode") -> None:
    """Give the leaf `sg` one leaf child per op, named "subgraph_<op name>", in creation order (checked by caller)."""
    graph = sg._graph
    ops = sorted(sg._ops, key=attrgetter("_seq"))
    make = type(sg)
    children = [make(graph, "subgraph_" + op.name, sg, (op,)) for op in ops]
    sg._children.update(dict.fromkeys(children))
    graph._leaf_of.update(zip(ops, children))
    tree_edited(graph)


def merge_children(parent: Node, groups: "Sequence[Sequence[Node]]") -> "list[Node]":
    """Each group of leaf children of `parent` (checked by the caller) becomes one new child named
    "subgraph_<smallest op name>", without attrs; a group of one keeps its child. Returns the child per group."""
    leaf_of = parent._graph._leaf_of
    children = parent._children
    tree_edited(parent._graph)
    result = []
    for group in groups:
        if len(group) == 1:
            result.append(group[0])
            continue
        ops = set().union(*map(_OPS, group))
        merged = type(parent)(parent._graph, f"subgraph_{min(map(_NAME, ops))}", parent)
        merged._ops = ops  # the union made here: not copied again
        for c in group:
            del children[c]
        children[merged] = None
        leaf_of.update(dict.fromkeys(ops, merged))
        result.append(merged)
    return result


def unmerge_child(parent: Node, child: Node, parts: "Sequence[Node]") -> None:
    """Put back `parts`, the leaves a merge replaced by `child`, in place of `child` (checked by the caller)."""
    del parent._children[child]
    parent._children.update(dict.fromkeys(parts))
    tree_edited(parent._graph)
    leaf_of = parent._graph._leaf_of
    for p in parts:
        leaf_of.update(dict.fromkeys(p._ops, p))


def set_subgraph_attrs(subgraphs: "Iterable[TreeNode]", attrs: "Mapping[str, Any]",
                       copies: "Sequence[tuple[str, Callable[[Any], Any]]]" = ()) -> None:
    """`attrs` on each of `subgraphs` (checked by the caller); each (key, copy) of `copies` gives every subgraph
    its own `copy(attrs[key])`."""
    for sg in subgraphs:
        own = sg._attrs
        own.update(attrs)
        for key, copy in copies:
            own[key] = copy(attrs[key])


__all__ = ["GraphBuilder", "link_input", "mark_nested", "merge_children", "remove_unused_weights",
           "replace_op_by_weights", "replace_ops_by_weights", "rewire", "set_input", "set_subgraph_attrs", "set_weights",
           "split_into_leaves", "unlink_input", "unmerge_child", "write_op_annotations"]
