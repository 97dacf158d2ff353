"""Subgraph: a node of the XIR-style partition tree over a graph's ops.

The root holds every op; each level partitions its parent's ops; depth-1 children of the
root are the device-level subgraphs. Every op knows its leaf (kept by the Graph), so
"which child holds this op" is a walk up the tree, not a search.
"""
from __future__ import annotations

import heapq
from collections.abc import KeysView
from itertools import chain, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Iterable

from xgraph.errors import GraphError
from xgraph.ir.attr_store import AttrsMixin, check_attr_value, copy_value
from xgraph.ir.blob import BLOB_ATTR, Blob, BlobData, blob_from_attr, make_blob_attr
from xgraph.ir.builder import merge_children, set_subgraph_attrs, split_into_leaves, unmerge_child
from xgraph.ir.quotient import merge_makes_cycle, note_merged

if TYPE_CHECKING:
    import onnx

    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.op import Op
    from xgraph.ir.tensor import Tensor


def _copier(value: "dict | list") -> Any:
    """What copies `value` as `copy_value` does: a plain `dict`/`list` of the same items when nothing in it is a
    container (a runner map, the usual case), else `copy_value` itself."""
    items = value.values() if isinstance(value, dict) else value
    if any(isinstance(v, (dict, list)) for v in items):
        return copy_value
    return dict if isinstance(value, dict) else list


class Subgraph(AttrsMixin):
    """A set of ops with attrs ("device", "runner", ...) and children that partition it."""

    __slots__ = ("_name", "_graph", "_parent", "_children", "_ops", "_attrs", "__weakref__")

    def __init__(self, graph: "Graph", name: str, parent: "Subgraph | None", ops: Iterable["Op"] = ()):
        self._graph = graph
        self._name = name
        self._parent = parent
        self._children: dict[Subgraph, None] = {}
        self._ops: set[Op] = set(ops)
        self._attrs: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Subgraph({self._name!r}, ops={len(self._ops)}, children={len(self._children)})"

    # -- tree ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The subgraph's name ("root", or "subgraph_<smallest op name>")."""
        return self._name

    @property
    def graph(self) -> "Graph":
        """The graph this subgraph partitions."""
        return self._graph

    @property
    def is_root(self) -> bool:
        """True for the root (all ops)."""
        return self._parent is None

    @property
    def is_leaf(self) -> bool:
        """True when the subgraph has no children."""
        return not self._children

    @property
    def depth(self) -> int:
        """0 for the root, 1 for device-level subgraphs, and so on."""
        d, s = 0, self._parent
        while s is not None:
            d, s = d + 1, s.get_parent()
        return d

    def get_name(self) -> str:
        """The subgraph's name."""
        return self._name

    def get_graph(self) -> "Graph":
        """The graph this subgraph partitions."""
        return self._graph

    def get_parent(self) -> "Subgraph | None":
        """The parent, or None for the root."""
        return self._parent

    def get_children(self) -> "set[Subgraph]":
        """The children, as a set (use toposort_child_subgraph for an order)."""
        return set(self._children)

    def get_children_num(self) -> int:
        """Number of children."""
        return len(self._children)

    def is_child(self, other: "Subgraph") -> bool:
        """True when `other` is a direct child of this subgraph."""
        return other in self._children

    def are_children(self, subgraphs: "Iterable[Subgraph]") -> bool:
        """True when every one of `subgraphs` is a direct child of this subgraph (`is_child` for all of them, in C,
        without a copy of the children)."""
        if not isinstance(subgraphs, (set, frozenset, KeysView)):
            subgraphs = set(subgraphs)
        return self._children.keys() >= subgraphs

    def set_children_attrs(self, children: "Iterable[Subgraph]", attrs: "dict[str, Any]") -> None:
        """Set the same `attrs` on many children of this subgraph, as `child.set_attr(k, v)` per key would:
        checked once, then written (each child gets its own copy of dict and list values); all or nothing."""
        children = list(children)
        for c in children:
            if not isinstance(c, Subgraph) or c.get_parent() is not self:
                raise GraphError(f"set_children_attrs on {self._name!r}: {c!r:.60} is not a child of it")
        for k, v in attrs.items():
            check_attr_value(f"the children of subgraph {self._name!r}", k, v)
        set_subgraph_attrs(children, attrs, [(k, _copier(v)) for k, v in attrs.items() if isinstance(v, (dict, list))])

    def create_child_subgraph(self) -> None:
        """Give this leaf one leaf child per op, named "subgraph_<op name>"."""
        if self._children:
            raise GraphError(f"subgraph {self._name!r} already has children; create_child_subgraph needs a leaf")
        split_into_leaves(self)

    def merge_children(self, children: "set[Subgraph]") -> "Subgraph":
        """Merge leaf children into one new child; refuses (changing nothing) a merge that makes a cycle."""
        return self._merge_groups([self._check_merge_group(children)], check_cycles=True)[0]

    def merge_child_groups(self, groups: "Iterable[Iterable[Subgraph]]", *,
                           check_cycles: bool = True) -> "list[Subgraph]":
        """Merge each group of leaf children into one new child, all groups at once or none.

        Check, then apply: every group is checked (non-empty, leaf children of this subgraph, no
        child in two groups) and, with `check_cycles`, the children graph contracted by all the
        groups must stay acyclic; only then is anything changed. A group of one child keeps that
        child. Returns the resulting child per group, in the groups' order. Pass
        `check_cycles=False` only for groups proved acyclic as they were made (`xgraph.partition.merge.
        group_children`); the check costs O(V+E). Merged children's attrs are dropped; a new child is
        named "subgraph_<smallest op name>".

        >>> from xgraph import Graph
        >>> g = Graph("g"); x = g.create_input("x", [1])
        >>> for n, src in [("a", "x"), ("b", "a"), ("c", "b"), ("d", "c")]: _ = g.create_op(n, "Relu", inputs=[src])
        >>> root = g.get_root_subgraph(); root.create_child_subgraph()
        >>> pairs = [[g.get_leaf_subgraph("a"), g.get_leaf_subgraph("b")], [g.get_leaf_subgraph("c"), g.get_leaf_subgraph("d")]]
        >>> [sg.name for sg in root.merge_child_groups(pairs)]
        ['subgraph_a', 'subgraph_c']
        """
        groups = [list(dict.fromkeys(g)) for g in groups]
        members = list(chain.from_iterable(groups))
        if not (all(groups) and all(map(isinstance, members, repeat(Subgraph))) and self.are_children(members)
                and self._graph.index().all_leaves(members)):
            groups = [self._check_merge_group(g) for g in groups]  # names the first offender
        return self._merge_groups(groups, check_cycles=check_cycles)

    def unmerge_child(self, child: "Subgraph", parts: "Iterable[Subgraph]") -> None:
        """Put back `parts`, the leaf children a merge replaced by `child`, in place of `child` (and its subtree).

        How a plugin's declined subgraph returns its ops to placement as they were before the
        plugin merged them. Checked, then applied: `parts` must be leaves this subgraph once held
        (as `merge_children` leaves them) whose ops are exactly `child`'s, each op in one part.
        """
        parts = list(dict.fromkeys(parts))
        if not isinstance(child, Subgraph) or child.get_parent() is not self or child not in self._children:
            raise GraphError(f"unmerge_child on {self._name!r}: {child!r:.60} is not a child of it")
        held = 0
        for p in parts:
            if not isinstance(p, Subgraph) or p.get_parent() is not self or p in self._children or not p.is_leaf:
                raise GraphError(f"unmerge_child on {self._name!r}: {p!r:.60} is not a leaf it held before a merge")
            held += p.get_op_num()
        ops = set().union(*[p.get_ops() for p in parts]) if parts else set()
        if ops != child.get_ops() or held != len(ops):
            raise GraphError(f"unmerge_child on {self._name!r}: the parts' ops are not exactly those of "
                             f"{child.name!r}, each once; nothing was changed")
        unmerge_child(self, child, parts)

    def _merge_groups(self, groups: "list[list[Subgraph]]", check_cycles: bool) -> "list[Subgraph]":
        if len(set(chain.from_iterable(groups))) != sum(map(len, groups)):  # some child twice: name the first
            seen: set[Subgraph] = set()
            for g in groups:
                for c in g:
                    if c in seen:
                        raise GraphError(f"subgraph {c.name!r} appears in two merge groups; nothing was changed")
                    seen.add(c)
        version = self._graph.tree_version
        if check_cycles:
            cycle = merge_makes_cycle(self, groups)
            if cycle:
                raise GraphError(f"merging {cycle} under {self._name!r} would create a cycle among its children; "
                                 "nothing was changed")
        merged = merge_children(self, groups)
        if check_cycles:  # what the cycle check of one group keeps, kept up to date
            several = [(group, child) for group, child in zip(groups, merged) if len(group) > 1]
            if len(several) == 1:
                note_merged(self, *several[0], version)
        return merged

    def _check_merge_group(self, children: Iterable["Subgraph"]) -> list["Subgraph"]:
        group = list(dict.fromkeys(children))
        if not group:
            raise GraphError(f"merge_children on {self._name!r}: nothing to merge (empty set)")
        for c in group:
            if not isinstance(c, Subgraph) or c.get_parent() is not self:
                raise GraphError(f"merge_children on {self._name!r}: {c!r} is not a child of it")
            if not c.is_leaf:
                raise GraphError(f"merge_children on {self._name!r}: child {c.name!r} is not a leaf")
        return group

    def toposort_child_subgraph(self) -> "list[Subgraph]":
        """Children in dependency order; ties broken by their first op in graph toposort order."""
        index = self._graph.index()
        by_first = index.children_in_op_order(self, index.toposort())
        if len(by_first) != len(self._children):  # a child without ops: numbered as before, by its first op
            by_first = sorted(self._children, key=self._first_in_topo_order().__getitem__)
        first = {c: i for i, c in enumerate(by_first)}  # ranks: the order of the first ops, as numbers
        if index.edges_go_forward(self, first):
            return by_first  # what the heap below pops when the first-op order is already topological
        child_of = self.child_map()
        succ: dict[Subgraph, set[Subgraph]] = {c: set() for c in self._children}
        indeg = dict.fromkeys(self._children, 0)
        for c in self._children:
            for op in c.get_ops():
                for consumer in op.get_fanout_ops():
                    d = child_of.get(consumer)
                    if d is not None and d is not c and d not in succ[c]:
                        succ[c].add(d)
                        indeg[d] += 1
        heap = [(first[c], id(c), c) for c, n in indeg.items() if n == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, _, c = heapq.heappop(heap)
            order.append(c)
            for d in succ[c]:
                indeg[d] -= 1
                if indeg[d] == 0:
                    heapq.heappush(heap, (first[d], id(d), d))
        if len(order) != len(self._children):
            raise GraphError(f"children of subgraph {self._name!r} depend on each other cyclically")
        return order

    def _first_in_topo_order(self) -> "dict[Subgraph, int]":
        index = self._graph.index().positions()
        return {c: min(map(index.__getitem__, c.get_ops())) for c in self._children}

    def child_dependencies(self) -> "tuple[list[Subgraph], list[list[int]]]":
        """(children, preds): the children numbered by their first op in graph insertion order, and per child
        the numbers of the children its ops read from (repeats possible, never its own). O(V+E).
        See `xgraph.ir.index.GraphIndex.child_dependencies`."""
        return self._graph.index().child_dependencies(self)

    def child_map(self) -> "dict[Op, Subgraph]":
        """op -> the child of this subgraph holding it (every op of this subgraph)."""
        child_of = {}
        for c in self._children:
            for op in c.get_ops():
                child_of[op] = c
        return child_of

    def find_child_subgraph_by_op(self, op: "Op | str") -> "Subgraph | None":
        """The direct child holding `op` (an Op or its name), or None."""
        op = self._graph._resolve_op(op, strict=False)
        if op is None or op not in self._ops:
            return None
        s = self._graph.get_leaf_subgraph(op)
        while s is not None and s.get_parent() is not self:
            s = s.get_parent()
        return s

    # -- ops -----------------------------------------------------------------------------------
    def get_ops(self) -> "set[Op]":
        """The ops of this subgraph."""
        return set(self._ops)

    def get_op_num(self) -> int:
        """Number of ops."""
        return len(self._ops)

    def has_op(self, op: "Op | str") -> bool:
        """True when `op` (an Op or its name) belongs to this subgraph."""
        op = self._graph._resolve_op(op, strict=False)
        return op is not None and op in self._ops

    def toposort(self) -> "list[Op]":
        """The ops in the graph's deterministic topological order."""
        if self._parent is None:
            return self._graph.toposort()
        ops = self._ops
        index = self._graph.index()
        if len(ops) * 8 > self._graph.get_op_num():
            return [op for op in index.toposort() if op in ops]
        return sorted(ops, key=index.positions().__getitem__)

    def get_input_tensors(self) -> "list[Tensor]":
        """Tensors consumed inside and produced outside (graph inputs included; weights excluded)."""
        ops, seen, result = self._ops, set(), []
        nested = self._graph.index().has_nested_graphs()
        for op in self.toposort():
            for t in (op.get_input_tensors() + op.get_implicit_input_tensors()) if nested else op.get_input_tensors():
                if t is None or t.is_const or t in seen:
                    continue
                if t.producer is None or t.producer not in ops:
                    seen.add(t)
                    result.append(t)
        return result

    def get_output_tensors(self) -> "list[Tensor]":
        """Tensors produced inside and consumed outside, or graph outputs."""
        index = self._graph.index()
        ops, outputs, result = self._ops, index.output_set(), []
        readers = index.implicit_reads()[1]
        for op in self.toposort():
            for t in op.get_output_tensors():
                if t in outputs or any(c not in ops for c in t.consumers) \
                        or any(c not in ops for c in readers.get(t, ())):
                    result.append(t)
        return result

    def get_const_tensors(self) -> "list[Tensor]":
        """The weights the ops of this subgraph read (they travel with it)."""
        seen: dict[Tensor, None] = {}
        nested = self._graph.index().has_nested_graphs()
        for op in self.toposort():
            for t in (op.get_input_tensors() + op.get_implicit_input_tensors()) if nested else op.get_input_tensors():
                if t is not None and t.is_const:
                    seen.setdefault(t, None)
        return list(seen)

    # -- compiled blob -----------------------------------------------------------------------------
    def set_blob(self, data: BlobData, weights: str = "shared", compat: str = "") -> Blob:
        """Keep what a vendor compiler produced for this subgraph (bytes, a uint8 array or a file path).

        `weights="shared"`: the blob holds none of the weights the graph holds (the runner takes them from
        `get_const_tensors()` at load); "embedded": it holds them. `compat` is checked by the plugin's
        `check_blob` at load. Replaces an earlier blob; stored once in the .xmodel (`xgraph.ir.blob`)."""
        value = make_blob_attr(data, weights, compat, f"subgraph {self._name!r}")
        self.set_attr(BLOB_ATTR, value)
        return blob_from_attr(value)

    def get_blob(self) -> "Blob | None":
        """The compiled blob set by `set_blob` (data as a read-only uint8 array, mapped when loaded from a
        side file), or None."""
        value = self._attrs.get(BLOB_ATTR)
        return None if value is None else blob_from_attr(value)

    def to_onnx(self, *, external_weights: bool = False) -> "onnx.ModelProto":
        """A standalone onnx.ModelProto: boundary tensors as inputs/outputs, its weights inside.

        With `external_weights`, weights of 4 KiB or more are left out: each is an ONNX
        external-data reference (location ``xgraph-weight-not-written``, never a file) and the
        model stays small whatever their size (over protobuf's 2 GiB too). Give their arrays
        (`get_const_tensors()`) to onnxruntime with `SessionOptions.add_external_initializers`,
        as `xgraph.runners.ort_session` does: no copy is made.

        The same as `xgraph.ir.onnx.exporter.subgraph_to_onnx(sg)`; reached through the graph,
        whose class (`xgraph.Graph`) sits above the codec. Never changes the graph.
        """
        if external_weights:
            return self._graph._export_subgraph(self, external_weights=True)
        return self._graph._export_subgraph(self)
