"""GraphBuilder: the one writer of a graph's tables, producer/consumer links and subgraph tree.

Every way a graph comes into being or grows goes through here: `Graph.create_op` /
`create_input` / `create_const` (after their checks), ONNX import, `.xmodel` load and
`Graph.copy`. Link edits after creation (`Op.set_input`, `Graph.replace_uses`) use
`link_input` / `unlink_input` below; `Graph.remove_op` / `remove_tensor` and
`set_inputs` / `set_outputs` go through the builder too. So the rules "a tensor's
consumers count the input slots reading it", "an op output names its producer", "the root
holds every op and each op knows its leaf" are written once.

The builder does no checking: callers check first (names free, inputs of this graph), then
build, so nothing here can fail halfway. Bulk callers (import of 100k-op models) call
`add_op` once per op; it does the minimum a consistent graph needs.
"""
from __future__ import annotations

from collections import deque
from itertools import compress, repeat
from operator import attrgetter, is_, is_not
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from xgraph.ir.op import Op
from xgraph.ir.subgraph import Subgraph
from xgraph.ir.tensor import Tensor

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore

_ATTRS, _ATTR_TYPES = attrgetter("_attrs"), attrgetter("_attr_types")


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


def _leave_tree(leaf: "Subgraph | None", op: Op) -> None:
    """Take `op` out of `leaf` and its ancestors; a subgraph left without ops leaves its parent."""
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

    def __init__(self, graph: "GraphCore"):
        self.graph = graph
        self._tensors = graph._tensors
        self._ops = graph._ops
        self._root = graph._root
        self._root_ops = graph._root._ops
        self._leaf_of = graph._leaf_of
        #: once the root has children, every new op gets a leaf child of its own
        self._split_root = bool(graph._root._children)

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
        """An op reading `inputs` and writing new tensors named `outputs`; it joins the tree."""
        graph = self.graph
        op = Op(graph, name, op_type, domain, graph._seq)
        graph._seq += 1
        op_inputs = op._inputs
        for t in inputs:
            op_inputs.append(t)
            if t is not None:
                consumers = t._consumers
                consumers[op] = consumers.get(op, 0) + 1
        tensors, op_outputs = self._tensors, op._outputs
        for o in outputs:
            t = Tensor(graph, o)
            t._producer = op
            tensors[o] = t
            op_outputs.append(t)
        self._ops[name] = op
        self._root_ops.add(op)
        if self._split_root:
            child = Subgraph(graph, f"subgraph_{name}", self._root, (op,))
            self._root._children[child] = None
            self._leaf_of[op] = child
        else:
            self._leaf_of[op] = self._root
        return op

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
            for op in made:
                child = Subgraph(graph, f"subgraph_{op.name}", root, (op,))
                root._children[child] = None
                leaf_of[op] = child
        else:
            self._leaf_of.update(dict.fromkeys(made, self._root))
        return made

    def add_output(self, op: Op, name: str) -> Tensor:
        """One more output tensor of `op` (import adds outputs while naming omitted ones)."""
        t = Tensor(self.graph, name)
        t._producer = op
        self._tensors[name] = t
        op._outputs.append(t)
        return t

    def remove_op(self, op: Op) -> None:
        """Take `op` and its output tensors out of the tables, the links and the tree (emptied subgraphs go too)."""
        for i in range(len(op._inputs)):
            unlink_input(op, i)
        for t in op._outputs:
            del self._tensors[t.name]
        del self._ops[op.name]
        self.graph._nested_ops.discard(op)
        _leave_tree(self._leaf_of.pop(op), op)

    def remove_ops(self, ops: "Sequence[Op]") -> None:
        """`remove_op` for each of `ops` in turn (constant folding removes thousands at once)."""
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
    def set_annotations(obj: "Op | Tensor | Subgraph | GraphCore", attrs: dict[str, Any]) -> None:
        """Attrs read back from a file (already checked by the reader); on an op they are annotations."""
        if isinstance(obj, Op):
            for k, v in attrs.items():
                obj._attrs[k] = v
                obj._attr_types[k] = None
        else:
            obj._attrs.update(attrs)

    @staticmethod
    def set_op_annotation_column(key: str, ops: Sequence[Op], values: Sequence[Any], missing: Any) -> None:
        """Annotation `key` read back from a file for many ops at once: `values[i]` on `ops[i]`, except where
        it is `missing` (already checked by the reader)."""
        if any(map(is_, values, repeat(missing))):  # some ops without it: only the others
            keep = list(map(is_not, values, repeat(missing)))
            ops, values = list(compress(ops, keep)), list(compress(values, keep))
        # two dict writes per op, made by map in C (a Python loop over 100k ops costs several times more)
        deque(map(dict.__setitem__, map(_ATTRS, ops), repeat(key), values), maxlen=0)
        deque(map(dict.__setitem__, map(_ATTR_TYPES, ops), repeat(key), repeat(None)), maxlen=0)

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
    def add_subgraph(self, parent: Subgraph, name: str, attrs: dict[str, Any]) -> Subgraph:
        """A new (for now empty) child of `parent`; its ops come from `place_op` on its leaves."""
        sg = Subgraph(self.graph, name, parent)
        sg._attrs = attrs
        parent._children[sg] = None
        return sg

    def place_op(self, leaf: Subgraph, op: Op) -> None:
        """Put `op` in `leaf` and every subgraph above it (the root already holds it)."""
        self._leaf_of[op] = leaf
        s = leaf
        while s._parent is not None:
            s._ops.add(op)
            s = s._parent

    def place_ops(self, leaf: Subgraph, ops: Sequence[Op]) -> None:
        """`place_op` for many ops of one leaf (a file's subgraph tree, read back)."""
        self._leaf_of.update(dict.fromkeys(ops, leaf))
        s = leaf
        while s._parent is not None:
            s._ops.update(ops)
            s = s._parent

    def finish(self) -> None:
        """Drop the graph's derived caches (call once the bulk build is done)."""
        self.graph._touch()


__all__ = ["GraphBuilder", "link_input", "unlink_input"]
