"""GraphSnapshot: the mutable state of a Graph, kept so a failed plugin can be undone.

A plugin is user code run in the middle of compilation; when it raises or misbehaves the
graph must be exactly as before it ran (CONVENTIONS: a failed operation changes nothing).
A snapshot records the subgraph tree (every subgraph's parent, ops, children and attrs,
and each op's leaf), the attrs of the graph, ops and tensors, and the op/tensor links;
`restore` puts all of it back, undoing merges (the pre-merge Subgraph objects come back,
so references held elsewhere stay valid) and any op/tensor edits. `changes` lists what
differs from the snapshot outside what a plugin step may touch, which is how the chain
catches a `partition` or `compile` that reaches beyond its own subgraphs.

This module reads the IR's private fields on purpose: it is the one place outside
`xgraph.ir` that does, so an IR refactor has one file to follow.

Limits: graph and subgraph attrs are copied with their nested dicts and lists (numpy arrays
are shared); op and tensor attrs are copied one level (values are shared). Mutating an array,
or a list held in an op attr, in place is therefore neither undone nor detected; `set_attr`
always is. Cost: O(ops + tensors + subgraphs) time and memory per snapshot or comparison,
about two `Graph.toposort()`s; on a 100k-op graph the chain spends ~1 s per plugin here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from xgraph.ir.collector import collector_paused

if TYPE_CHECKING:
    from xgraph.ir import Graph, Op, Subgraph, Tensor


def _copy_value(value: Any) -> Any:
    """Copy dicts and lists (recursively) so in-place edits of them can be undone; share the rest."""
    if isinstance(value, dict):
        return {k: _copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_value(v) for v in value]
    return value


def _copy_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy_value(v) for k, v in attrs.items()} if attrs else {}


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


class GraphSnapshot:
    """Everything a plugin could change in a Graph through its API, captured at construction."""

    def __init__(self, graph: "Graph"):
        g = graph
        self.graph = g
        with collector_paused():
            self.version = g._version
            self.name = g.name
            self.attrs = _copy_attrs(g._attrs)
            self.root = g._root
            self.leaf_of = dict(g._leaf_of)
            # (name, parent, children, attrs) per subgraph; op sets only change with the ops
            # themselves (version bump), and are then rebuilt from leaf_of.
            self.tree = {sg: (sg._name, sg._parent, list(sg._children), _copy_attrs(sg._attrs))
                         for sg in g.iter_subgraphs()}
            self.ops = dict(g._ops)
            self.tensors = dict(g._tensors)
            self.inputs, self.outputs, self.seq = list(g._inputs), list(g._outputs), g._seq
            self.model = (dict(g.opset_imports), g.ir_version, _copy_attrs(g.model_info), list(g.functions))
            self.op_state = {op: (op.name, op.type, op.domain, op._attrs.copy(), op._attr_types.copy(),
                                  list(op._inputs), list(op._outputs), op.doc_string)
                             for op in g._ops.values()}
            self.tensor_state = {t: (t.name, t._shape, t._dtype, t._producer, t._consumers.copy(), t._data,
                                     t._attrs.copy(), t._type_proto)
                                 for t in g._tensors.values()}

    # -- undo ----------------------------------------------------------------------------------
    def restore(self) -> None:
        """Put the graph back exactly as captured (tree, attrs, and ops/tensors if they changed)."""
        g = self.graph
        structural = (g._version != self.version or g._ops.keys() != self.ops.keys()
                      or g._tensors.keys() != self.tensors.keys())
        g.name = self.name
        g._attrs = _copy_attrs(self.attrs)
        g._root = self.root
        for sg, (name, parent, children, attrs) in self.tree.items():
            sg._name, sg._parent = name, parent
            sg._children = dict.fromkeys(children)
            sg._attrs = _copy_attrs(attrs)
        g._leaf_of = dict(self.leaf_of)
        for op, (name, type_, domain, attrs, attr_types, inputs, outputs, doc) in self.op_state.items():
            op.name, op.type, op.domain, op.doc_string = name, type_, domain, doc
            op._attrs, op._attr_types = attrs.copy(), attr_types.copy()
            op._inputs, op._outputs = list(inputs), list(outputs)
        for t, (name, shape, dtype, producer, consumers, data, attrs, type_proto) in self.tensor_state.items():
            t.name, t._shape, t._dtype, t._producer = name, shape, dtype, producer
            t._consumers, t._data, t._attrs, t._type_proto = consumers.copy(), data, attrs.copy(), type_proto
        opsets, ir_version, model_info, functions = self.model
        g.opset_imports, g.ir_version = dict(opsets), ir_version
        g.model_info, g.functions = _copy_attrs(model_info), list(functions)
        if structural:
            g._ops, g._tensors = dict(self.ops), dict(self.tensors)
            g._inputs, g._outputs, g._seq = list(self.inputs), list(self.outputs), self.seq
            self._rebuild_op_sets()
            g._touch()  # drop caches (toposort, networkx view) computed from the changed structure

    def _rebuild_op_sets(self) -> None:
        """Recompute every subgraph's op set from each op's leaf (ops were added or removed)."""
        for sg in self.tree:
            sg._ops = set()
        for op, leaf in self.leaf_of.items():
            s = leaf
            while s is not None:
                s._ops.add(op)
                s = s._parent

    # -- compare -------------------------------------------------------------------------------
    def changes(self, *, merges_allowed: bool = False, children: "Iterable[Subgraph] | None" = None,
                free_subgraphs: Iterable["Subgraph"] = (), free_ops: Iterable["Op"] = ()) -> list[str]:
        """What differs from the snapshot, outside the given allowances; empty when nothing else changed.

        `merges_allowed` lets depth-1 children without a "device" attr be merged; `children`
        instead names the root's children expected now (a later check after allowed
        merges). New children must carry no attrs or children unless free. `free_subgraphs`
        may change their attrs and everything below them; `free_ops` may change their
        attrs and their output tensors' attrs.
        """
        g = self.graph
        found: list[str] = []
        if g._version != self.version or g._ops.keys() != self.ops.keys():
            found.append("the graph's ops or tensors (ops added, removed or rewired)")
        keys = changed_keys(self.attrs, g._attrs)
        if keys or g.name != self.name:
            found.append(f"graph attrs {keys}" if keys else "the graph's name")
        found += self._tree_changes(set(free_subgraphs), merges_allowed, children)
        found += self._op_changes(set(free_ops))
        return found

    def _tree_changes(self, free: set["Subgraph"], merges_allowed: bool,
                      expected: "Iterable[Subgraph] | None") -> list[str]:
        root = self.graph._root
        if root is not self.root:
            return ["the root subgraph was replaced"]
        now = list(root._children)
        reference = self.tree[root][2] if expected is None else list(expected)
        found: list[str] = []
        reference_set = set(reference)
        gone = [c for c in reference if c not in root._children]
        new = [c for c in now if c not in reference_set]
        if gone or new:
            assigned = [f"{c.name!r} (device {self.tree[c][3]['device']!r})" for c in gone
                        if c in self.tree and "device" in self.tree[c][3]]
            if not merges_allowed or expected is not None:
                found.append(f"the root's children (merged or split: {_names(gone + new)})")
            elif assigned:
                found.append(f"subgraphs assigned earlier were merged away: {', '.join(assigned[:5])}")
        for child in now:
            if child in free:
                continue
            if child in self.tree:
                found += self._subtree_changes(child)
            elif child._attrs or child._children:
                found.append(f"attrs or children of subgraph {child.name!r}, which it did not return")
        return found

    def _subtree_changes(self, sg: "Subgraph") -> list[str]:
        state = self.tree.get(sg)
        if state is None:
            return [f"subgraph {sg.name!r} (created)"]
        name, _, children, attrs = state
        found = []
        keys = changed_keys(attrs, sg._attrs)
        if keys:
            found.append(f"attrs {keys} of subgraph {sg.name!r}")
        if children != list(sg._children) or name != sg._name:
            found.append(f"the children of subgraph {sg.name!r}")
        for child in sg._children:
            found += self._subtree_changes(child)
        return found

    def _op_changes(self, free_ops: set["Op"]) -> list[str]:
        found: list[str] = []
        tensor_state = self.tensor_state
        for op, (name, type_, domain, attrs, _, _, outputs, _) in self.op_state.items():
            if op in free_ops:
                continue
            if op.name != name or op.type != type_ or op.domain != domain:
                found.append(f"the name/type/domain of op {name!r}")
            if not _plainly_equal(attrs, op._attrs) and changed_keys(attrs, op._attrs):
                found.append(f"attrs {changed_keys(attrs, op._attrs)} of op {name!r}")
            for t in outputs:
                state = tensor_state[t]
                if t._attrs or state[6] or t._shape != state[1] or t._dtype != state[2]:
                    change = self._tensor_change(t)
                    if change:
                        found.append(change)
            if len(found) > 5:
                break
        for t, state in tensor_state.items():
            if state[3] is None:
                change = self._tensor_change(t)
                if change:
                    found.append(change)
                    break
        return found
    def _tensor_change(self, t: "Tensor") -> str:
        """What changed in a tensor's attrs, shape or dtype ("" when nothing did)."""
        _, shape, dtype, _, _, _, attrs, _ = self.tensor_state[t]
        keys = changed_keys(attrs, t._attrs)
        if keys:
            return f"attrs {keys} of tensor {t.name!r}"
        if (shape, dtype) != (t._shape, t._dtype):
            return f"the shape or dtype of tensor {t.name!r}"
        return ""


def _names(subgraphs: list["Subgraph"]) -> str:
    names = sorted(sg.name for sg in subgraphs)
    return ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
