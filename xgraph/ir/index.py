"""GraphIndex: what a graph's structure implies, worked out on first ask and kept until it changes.

`graph.index()` hands out the index of the graph's current version. Every structural write
(`xgraph.ir.builder`, through `GraphCore._touch`) drops it, so nothing here is ever stale; an edit
that keeps the table order topological (removing ops or tensors, adding weights) keeps only that
fact. The index answers, for stages that ask them of every op of a 100k-op graph:

* orders: the deterministic topological order, each op's position in it, reachability, the
  networkx view;
* links: per op the positions of the ops it reads from, the graph outputs as a set, the reads of
  nested graphs (If/Loop/Scan bodies) by name;
* children: which children of a subgraph read from which (merge planners), the children without
  a label with their ops (placement), labels, ops and leaf op names of many subgraphs at once;
* op facts by column: per op (type, domain, ONNX attributes, numbered tensors) and per tensor
  (dtype, shape, weight, used), for signing every op; per op what its ONNX node holds (tensor
  names, arities, whether it has ONNX attributes) and its outputs' types, for the export;
* what constant folding asks of thousands of ops: which read only values, the values they read,
  an attribute identity to reuse a fold by.

It reads the IR's tables directly and hands out new lists, tuples and sets (or read-only views),
so a caller keeps the answers without being able to change the graph through them. Nothing here
writes: the one writer is `xgraph.ir.builder`.
"""
from __future__ import annotations

import heapq
from array import array
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Container, Hashable, Iterable, Mapping, NamedTuple, Sequence

from xgraph.errors import GraphError
from xgraph.ir.nested import outer_names
from xgraph.ir.op import ANNOTATION

if TYPE_CHECKING:
    import networkx as nx
    import numpy as np

    from xgraph.ir.op import Op
    from xgraph.ir.protocols import GraphTables
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor

#: (type, domain, key of the ONNX attribute pairs, input numbers, output numbers): see `GraphIndex.op_rows`.
OpRow = tuple[str, str, Hashable, tuple[Hashable, ...], tuple[Hashable, ...]]

#: `GraphIndex.producers` codes: an op reading no other op; an op reading several (MANY - code indexes `more`)
NONE, MANY = -1, -2

_EMPTY: Mapping = MappingProxyType({})
_SEQ, _CHILDREN, _INPUTS, _OUTPUTS = attrgetter("_seq"), attrgetter("_children"), attrgetter("_inputs"), \
    attrgetter("_outputs")
_SHAPE, _DTYPE, _ATTR_KINDS, _NAME = attrgetter("_shape"), attrgetter("_dtype"), attrgetter("_attr_types"), \
    attrgetter("name")


class TensorFacts(NamedTuple):
    """Per tensor of the graph (in creation order, as `Graph.get_tensors`): dtype, shape, whether it is
    a weight, and whether it is used (read by an op, or a graph output)."""

    tensors: list["Tensor"]
    dtypes: list["np.dtype | None"]
    shapes: list["tuple | None"]
    is_const: list[bool]
    used: list[bool]


class GraphIndex:
    """The derived facts of one version of a graph (see the module docstring); `graph.index()` gives it."""

    __slots__ = ("graph", "_table_order", "_order", "_positions", "_producers", "_outputs", "_implicit", "_digraph")

    def __init__(self, graph: "GraphTables", table_order_topological: bool = False) -> None:
        self.graph = graph
        #: the table order is known topological (None: not checked yet)
        self._table_order: "bool | None" = True if table_order_topological else None
        self._order: "list[Op] | None" = None
        self._positions: "dict[Op, int] | None" = None
        self._producers: "tuple[array, list[tuple[int, ...]]] | None" = None
        self._outputs: "set[Tensor] | None" = None
        self._implicit: "tuple[dict, dict] | None" = None
        self._digraph: "nx.DiGraph | None" = None

    # -- orders ------------------------------------------------------------------------------------
    def toposort(self) -> "list[Op]":
        """The ops in a deterministic topological order (creation order breaks ties; do not change the
        list). O(V+E) when the table order is topological (the usual graph), else O((V+E) log V)."""
        if self._order is None:
            self._order = self._topological_order()
        return self._order

    def _topological_order(self) -> "list[Op]":
        g = self.graph
        ops = list(g._ops.values())
        if not g._nested_ops and (self._table_order or self._table_order is None and _table_is_topological(ops)):
            self._table_order = True
            return ops
        self._table_order = False
        indeg = {op: len(op.get_input_ops()) for op in ops}
        heap = [(op._seq, op) for op, n in indeg.items() if n == 0]  # creation numbers are unique: ties broken
        heapq.heapify(heap)
        order = []
        while heap:
            op = heapq.heappop(heap)[1]
            order.append(op)
            for c in op.get_fanout_ops():
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(heap, (c._seq, c))
        if len(order) != len(ops):
            stuck = sorted(op.name for op, n in indeg.items() if n > 0)[:5]
            raise GraphError(f"graph {g.name!r} has a cycle through ops {stuck}")
        return order

    def after_order_keeping_edit(self) -> "GraphIndex | None":
        """The index of the next version when the edit made (removing ops or tensors, adding weights) keeps a
        topological table order so: only that fact carried over; None when it was not known."""
        return GraphIndex(self.graph, True) if self._table_order else None

    def table_order_is_topological(self) -> bool:
        """True when the toposort is the table order (no op has nested graphs): an order taken now then
        stays the order, less the removed ops, after edits that remove ops or add weights."""
        self.toposort()
        return bool(self._table_order)

    def positions(self) -> "Mapping[Op, int]":
        """Op -> its position in `toposort()` (read-only)."""
        if self._positions is None:
            self._positions = dict(zip(self.toposort(), range(len(self.graph._ops))))
        return MappingProxyType(self._positions)

    def reaches(self, src: "Op", dst: "Op") -> bool:
        """True when a path leads from `src` to `dst` (src == dst counts); walks no further than `dst`'s position."""
        if src is dst:
            return True
        self.positions()
        index = self._positions
        limit = index[dst]
        stack, seen = [src], {src}
        while stack:
            for c in stack.pop().get_fanout_ops():
                if c is dst:
                    return True
                if c not in seen and index[c] < limit:
                    seen.add(c)
                    stack.append(c)
        return False

    def op_graph(self) -> "nx.DiGraph":
        """The op-to-op dependency graph as a networkx.DiGraph over the Op objects."""
        if self._digraph is None:
            import networkx as nx
            ops = list(self.graph._ops.values())
            g = nx.DiGraph()
            g.add_nodes_from(ops)
            g.add_edges_from((p, op) for op in ops for p in op.get_input_ops())
            self._digraph = g
        return self._digraph

    # -- links -------------------------------------------------------------------------------------
    def output_set(self) -> "frozenset[Tensor] | set[Tensor]":
        """The graph outputs as a set (do not change it)."""
        if self._outputs is None:
            self._outputs = set(self.graph._outputs)
        return self._outputs

    def implicit_reads(self) -> "tuple[dict[Op, list[Tensor]], dict[Tensor, list[Op]]]":
        """(op -> the outer tensors its nested graphs read by name, tensor -> such readers); do not change them."""
        if self._implicit is None:
            g = self.graph
            reads: "dict[Op, list[Tensor]]" = {}
            readers: "dict[Tensor, list[Op]]" = {}
            tensors = g._tensors
            for op in sorted(g._nested_ops, key=_SEQ):  # an op's own outputs are not reads
                own = set(op._outputs)
                reads[op] = found = [tensors[n] for n in outer_names(op._attrs.values())
                                     if n in tensors and tensors[n] not in own]
                for t in found:
                    readers.setdefault(t, []).append(op)
            self._implicit = reads, readers
        return self._implicit

    def nested_read_tensors(self) -> "set[Tensor]":
        """The tensors some op's nested graph reads by name (a new set; empty at no cost without such ops)."""
        return set(self.implicit_reads()[1]) if self.graph._nested_ops else set()

    def input_ops(self, op: "Op") -> "list[Op]":
        """The producers of `op`'s inputs, in input order, without duplicates (its nested graphs' reads last)."""
        seen: "dict[Op, None]" = {}
        for t in op._inputs:
            if t is not None and t._producer is not None:
                seen[t._producer] = None
        if self.graph._nested_ops and op in self.graph._nested_ops:
            for t in self.implicit_reads()[0].get(op, ()):
                if t._producer is not None:
                    seen.setdefault(t._producer, None)
        return list(seen)

    def reads_from(self, op: "Op", producer: "Op") -> bool:
        """`producer in input_ops(op)`, without building the list (the template matcher's edge test)."""
        if self.graph._nested_ops:
            return producer in self.input_ops(op)
        for t in op._inputs:
            if t is not None and t._producer is producer:
                return True
        return False

    def fanout_ops(self, op: "Op") -> "list[Op]":
        """The ops reading any output of `op`, without duplicates (those reading it from nested graphs included)."""
        outputs = op._outputs
        if len(outputs) == 1 and not self.graph._nested_ops:  # the usual op: its one output's readers, in order
            return list(outputs[0]._consumers)
        seen: "dict[Op, None]" = {}
        for t in outputs:
            seen.update(t._consumers)
        if self.graph._nested_ops:
            readers = self.implicit_reads()[1]
            for t in outputs:
                for c in readers.get(t, ()):
                    seen.setdefault(c, None)
        return list(seen)

    def has_nested_graphs(self, op: "Op | None" = None) -> bool:
        """True when `op` (None: some op of the graph) has a graph attribute (an If/Loop/Scan body)."""
        nested = self.graph._nested_ops
        return bool(nested) if op is None else op in nested

    def producers(self) -> "tuple[array, list[tuple[int, ...]]]":
        """(first, more): per op in table order, the position of the one op it reads from, or `NONE`, or for an
        op reading several distinct ops `MANY - i` with `more[i]` their positions in input order (implicit
        reads of nested graphs count). Compact: 8 bytes per op, a tuple only per op reading several. O(V+E)."""
        if self._producers is None:
            ops = list(self.graph._ops.values())
            if self.graph._nested_ops:
                first, more = _producers_nested(ops, self.graph._nested_ops)
            else:
                first, more = _producers_plain(ops)
            self._producers = (array("q", first), more)
        return self._producers

    # -- children ----------------------------------------------------------------------------------
    def child_dependencies(self, sg: "Subgraph") -> "tuple[list[Subgraph], list[list[int]]]":
        """(children, preds): the children of `sg` numbered by their first op in table order and, per child,
        the numbers of the children its ops read from, producer by producer in op order (a number may
        repeat; a child's own number never appears). O(V+E); `Subgraph.child_dependencies` is this."""
        first, more = self.producers()
        holder = list(map(_child_lookup(sg).get, self.graph._ops.values()))  # None or sg: outside every child
        numbered = dict.fromkeys(holder)
        numbered.pop(None, None)
        numbered.pop(sg, None)
        if len(numbered) == len(holder):  # one child per op (as create_child_subgraph makes): child i holds op i
            return list(numbered), [[] if u == NONE else [u] if u >= 0 else list(more[MANY - u]) for u in first]
        number = dict(zip(numbered, range(len(numbered))))
        number[None] = number[sg] = -1
        owner = list(map(number.__getitem__, holder))  # per op position: its child's number, -1 outside sg
        preds: list[list[int]] = [[] for _ in numbered]
        for v, u in zip(owner, first):
            if v < 0 or u == NONE:
                continue
            found = preds[v]
            for u in (u,) if u >= 0 else more[MANY - u]:
                u = owner[u]
                if u >= 0 and u != v:
                    found.append(u)
        return list(numbered), preds

    def edges_go_forward(self, sg: "Subgraph", rank: "Mapping[Subgraph, int]") -> bool:
        """True when every dependency between children of `sg` points from a child of smaller `rank` to one of
        larger or equal rank (an op's own child included). O(V+E)."""
        first, more = self.producers()
        get = rank.get
        ranks = [get(c) for c in map(_child_lookup(sg).get, self.graph._ops.values())]
        for here, u in zip(ranks, first):
            if here is None or u == NONE:
                continue
            for u in (u,) if u >= 0 else more[MANY - u]:
                there = ranks[u]
                if there is not None and there > here:
                    return False
        return True

    def children_in_op_order(self, sg: "Subgraph", ops: "Iterable[Op]") -> "list[Subgraph]":
        """The children of `sg` holding some of `ops`, ordered by the first of `ops` each holds. O(len(ops))."""
        found = dict.fromkeys(map(_child_lookup(sg).get, ops))
        found.pop(None, None)
        found.pop(sg, None)
        return list(found)

    def unlabelled_children(self, children: "Iterable[Subgraph]", key: str) -> "tuple[list[Subgraph], list[list[Op]]]":
        """(the subgraphs of `children`, in order, without attr `key`; each one's ops, as `Subgraph.toposort`
        orders them)."""
        kept = [c for c in children if key not in c._attrs]
        return kept, [list(c._ops) if len(c._ops) == 1 else c.toposort() for c in kept]

    def attr_column(self, objects: "Iterable[Subgraph | Op]", key: str, default: object = None) -> list:
        """`[x.get_attrs().get(key, default) for x in objects]` (subgraphs or ops), without a copy of each one's attrs."""
        return [x._attrs.get(key, default) for x in objects]

    def attr_kind_column(self, ops: "Iterable[Op]", key: str, default: object = None) -> list:
        """Per op of `ops`, the kind of its attribute `key` (`Op.get_attr_kind`: None for an annotation), or `default`."""
        return [op._attr_types.get(key, default) for op in ops]

    def attr_dicts(self, objects: "Iterable[Tensor | Subgraph]") -> "list[dict[str, Any] | None]":
        """Per object, a copy of its attrs, or None when it has none (no empty dict made per object)."""
        return [dict(x._attrs) if x._attrs else None for x in objects]

    def attributed(self, objects: "Iterable[Tensor | Subgraph]") -> "list[tuple[Tensor | Subgraph, dict[str, Any]]]":
        """(object, a copy of its attrs) for each of `objects` that has attrs, in order (most tensors have none)."""
        return [(x, dict(x._attrs)) for x in objects if x._attrs]

    def leaf_op_names(self, subgraphs: "Iterable[Subgraph]") -> "list[list[str] | None]":
        """Per subgraph of `subgraphs`: the names of its ops, sorted, when it is a leaf; None when it has children."""
        return [None if sg._children else [next(iter(sg._ops)).name] if len(sg._ops) == 1 else
                sorted(map(_NAME, sg._ops)) for sg in subgraphs]

    def carries_annotations(self, keys: "Iterable[str]") -> bool:
        """True when an op carries an annotation named in `keys` (`op.is_annotation(key)`): one set test per
        op, so an op whose attribute names miss every key is passed over in C."""
        wanted = frozenset(keys)
        for op in self.graph.get_ops():
            types = op._attr_types
            if not wanted.isdisjoint(types) and any(types[k] is ANNOTATION for k in wanted.intersection(types)):
                return True
        return False

    def annotation_columns(self, ops: "Sequence[Op]", missing: object = None) -> "dict[str, list]":
        """Annotation key -> per op of `ops` its value, or `missing` where the op has none; keys in first-seen
        order. One pass over the ops."""
        columns: dict[str, list] = {}
        n = len(ops)
        for i, op in enumerate(ops):
            kinds = op._attr_types
            for k, v in op._attrs.items():
                if kinds.get(k) is ANNOTATION:
                    column = columns.get(k)
                    if column is None:
                        column = columns[k] = [missing] * n
                    column[i] = v
        return columns

    def all_leaves(self, subgraphs: "Iterable[Subgraph]") -> bool:
        """True when none of `subgraphs` has children (in C)."""
        return not any(map(_CHILDREN, subgraphs))

    def subgraphs(self) -> "list[Subgraph]":
        """Every subgraph of the tree as it is now, breadth first from the root (`Graph.iter_subgraphs`' order), a
        level at a time in C."""
        found: list[Subgraph] = []
        level = [self.graph._root]
        while level:
            found += level
            level = list(chain.from_iterable([sg._children for sg in level if sg._children]))
        return found

    def children(self, sg: "Subgraph") -> "list[Subgraph]":
        """The children of `sg` in the order they were made (`get_children` is a set)."""
        return list(sg._children)

    def ops_of(self, subgraphs: "Iterable[Subgraph]") -> "list[Op]":
        """The ops of each of `subgraphs` in turn (`get_ops()` order within each), in one list."""
        return [op for s in subgraphs for op in s._ops]

    # -- op facts by column ------------------------------------------------------------------------
    def op_rows(self, ops: "Iterable[Op]", tensor_number: "Mapping[Tensor | None, Hashable]",
                attr_key: "Callable[[tuple[tuple[str, Any], ...]], Hashable]" = tuple) -> list[OpRow]:
        """Per op of `ops`, in order: (type, domain, `attr_key` of its ONNX attributes as (name, value) pairs in
        the op's own order, annotations left out (() for an op without any attribute, without calling
        `attr_key`), the numbers of its inputs, the numbers of its outputs), each tensor numbered by
        `tensor_number[t]` (an omitted optional input is looked up as None)."""
        number = tensor_number.__getitem__
        return [(op.type, op.domain, attr_key(_onnx_items(op)) if op._attrs else (), tuple(map(number, op._inputs)),
                 tuple(map(number, op._outputs))) for op in ops]

    def node_rows(self, ops: "Iterable[Op]") -> list[tuple[list[str], list[str], str, str, str]]:
        """Per op of `ops`: (the names of its input tensors, "" for an omitted optional input; the names of its output
        tensors; its name, type and domain), what an ONNX node of it holds besides attributes (new lists)."""
        return [(["" if t is None else t.name for t in op._inputs], [t.name for t in op._outputs], op.name, op.type,
                 op.domain) for op in ops]

    def op_arities(self, ops: "Iterable[Op]") -> list[tuple[str, str, int, int]]:
        """Per op of `ops`: (domain, type, number of input slots, number of outputs), what a schema's counts check."""
        return [(op.domain, op.type, len(op._inputs), len(op._outputs)) for op in ops]

    def output_tensors(self, ops: "Iterable[Op]") -> "list[Tensor]":
        """The output tensors of `ops`, op after op, in one new list."""
        return list(chain.from_iterable(map(_OUTPUTS, ops)))

    def tensor_types(self, tensors: "Sequence[Tensor]") -> "tuple[list[tuple | None], list[np.dtype | None], list[bytes | None]]":
        """(shapes, dtypes, types): per tensor of `tensors`, its shape and dtype, and the serialized TypeProto of a
        non-tensor value (None for a tensor)."""
        return (list(map(_SHAPE, tensors)), list(map(_DTYPE, tensors)),
                [None if t._type_proto is None else t._type_proto.SerializeToString() for t in tensors])

    def onnx_attr_positions(self, ops: "Sequence[Op]") -> list[int]:
        """Positions in `ops` of the ops with an ONNX attribute (annotations are not), in order."""
        return [i for i, kinds in enumerate(map(_ATTR_KINDS, ops))
                if kinds and list(kinds.values()).count(ANNOTATION) < len(kinds)]

    def tensor_facts(self) -> TensorFacts:
        """The facts of every tensor of the graph, one list per field."""
        tensors = list(self.graph._tensors.values())
        outputs = self.output_set()
        return TensorFacts(tensors, [t._dtype for t in tensors], [t._shape for t in tensors],
                           [t._data is not None for t in tensors],
                           [bool(t._consumers) or t in outputs for t in tensors])

    def distinct_output_shapes(self, ops: "Iterable[Op]") -> set:
        """The distinct shapes (tuples, or None when unknown) of the outputs of `ops`."""
        return {t._shape for op in ops for t in op._outputs}

    # -- what constant folding asks ----------------------------------------------------------------
    def fed_positions(self, ops: "Sequence[Op]", pending: "Container[Tensor]" = _EMPTY,
                      skip: "Container[Op]" = _EMPTY) -> list[int]:
        """Positions in `ops` of the ops not in `skip` whose inputs (omitted optionals aside) are all weights or
        in `pending` (values a pass computed but has not turned into weights yet), in order; an op without
        inputs counts."""
        found = []
        for i, op in enumerate(ops):
            for t in op._inputs:
                if t is not None and t._data is None and t not in pending:
                    break
            else:
                if op not in skip:
                    found.append(i)
        return found

    def reads_only_values(self, op: "Op", pending: "Container[Tensor]" = _EMPTY) -> bool:
        """True when every input of `op` (omitted optionals aside) is a weight or in `pending`."""
        for t in op._inputs:
            if t is not None and t._data is None and t not in pending:
                return False
        return True

    def known_values(self, op: "Op", pending: "Mapping[Tensor, np.ndarray]") -> "list[np.ndarray | None] | None":
        """The arrays `op` reads, in input order (a weight's data, else `pending[t]`; None for an omitted
        input), or None when some input is neither a weight nor in `pending`."""
        values = []
        for t in op._inputs:
            if t is None:
                values.append(None)
            elif t._data is not None:
                values.append(t._data)
            else:
                value = pending.get(t)
                if value is None:
                    return None
                values.append(value)
        return values

    def unread_positions(self, ops: "Sequence[Op]", used: "Container[Tensor]") -> list[int]:
        """Positions in `ops` of the ops none of whose outputs has a reader or is in `used`, in order."""
        found = []
        for i, op in enumerate(ops):
            for t in op._outputs:
                if t._consumers or t in used:
                    break
            else:
                found.append(i)
        return found

    def fold_identity(self, op: "Op") -> "tuple[tuple, tuple, tuple]":
        """(key, values, output types) of `op`. The key is (type, domain, attribute names, their kinds, the ids
        of their values): two ops with equal keys have equal attributes as long as `values` (the attribute
        values, which the caller holds on to with the key) stays alive, so no id is reused; ops with equal
        attributes may still have different keys. The output types are ((shape, dtype) per output)."""
        attrs = op._attrs
        values = tuple(attrs.values())
        return ((op.type, op.domain, tuple(attrs), tuple(op._attr_types.values()), tuple(map(id, values))), values,
                tuple([(t._shape, t._dtype) for t in op._outputs]))

    def creation_number(self, op: "Op") -> int:
        """The op's creation number: along a table order `table_order_is_topological` vouches for, it rises with
        the topological position (so it can stand for the position without a map of every op)."""
        return op._seq


def _table_is_topological(ops: "Sequence[Op]") -> bool:
    """True when `ops` (a table) is in creation order and topological: then it is exactly what Kahn's heap
    pops (the smallest ready op is always the next one). O(V+E)."""
    last = -1
    for op in ops:
        seq = op._seq
        if seq <= last:
            return False
        last = seq
        for t in op._inputs:  # with creation numbers rising along the table, "earlier" is "smaller number"
            if t is not None and t._producer is not None and t._producer._seq >= seq:
                return False
    return True


def _producers_nested(ops: "list[Op]", nested: "Container[Op]") -> "tuple[list[int], list[tuple[int, ...]]]":
    """`GraphIndex.producers` of a graph with nested graphs (their reads by name count)."""
    position = dict(zip(ops, range(len(ops))))
    first: list[int] = []
    more: list[tuple[int, ...]] = []
    append = first.append
    for op in ops:
        sources = [position[t._producer] for t in op._inputs if t is not None and t._producer is not None]
        if op in nested:
            sources += [position[p] for p in op.get_input_ops()]
        _record(dict.fromkeys(sources), append, more)
    return first, more


def _record(sources: "dict[int, None]", append: "Callable[[int], None]", more: "list[tuple[int, ...]]") -> None:
    """Append an op's producer positions (`sources`, distinct, in input order) to the `producers` columns."""
    if len(sources) == 1:
        append(next(iter(sources)))
    elif sources:
        append(MANY - len(more))
        more.append(tuple(sources))
    else:
        append(NONE)


def _producers_plain(ops: "list[Op]") -> "tuple[list[int], list[tuple[int, ...]]]":
    """`GraphIndex.producers` of a graph without nested graphs: an op's position found from its creation number
    (unique in the table) through one list, the usual one- and two-input ops without a dict each."""
    first: list[int] = []
    more: list[tuple[int, ...]] = []
    if not ops:
        return first, more
    append = first.append
    seqs = list(map(_SEQ, ops))
    base = min(seqs)
    span = max(seqs) - base + 1
    if span <= 4 * len(ops) + 1024:  # the usual table: numbers from a few removals apart, a list indexes them
        position: "list[int] | dict[int, int]" = [NONE] * span
        for i, number in enumerate(seqs):
            position[number - base] = i
    else:  # many ops made and removed since: only the numbers in use
        position = {number - base: i for i, number in enumerate(seqs)}
    for inputs in map(_INPUTS, ops):
        n = len(inputs)
        if n == 1:
            t = inputs[0]
            p = None if t is None else t._producer
            append(NONE if p is None else position[p._seq - base])
        elif n == 2:
            a, b = inputs
            p = None if a is None or a._producer is None else position[a._producer._seq - base]
            q = None if b is None or b._producer is None else position[b._producer._seq - base]
            if p is None:
                append(NONE if q is None else q)
            elif q is None or q == p:
                append(p)
            else:
                append(MANY - len(more))
                more.append((p, q))
        else:
            _record(dict.fromkeys([position[t._producer._seq - base] for t in inputs
                                   if t is not None and t._producer is not None]), append, more)
    return first, more


def _child_lookup(sg: "Subgraph") -> "Mapping[Op, Subgraph]":
    """op -> the child of `sg` holding it; for the root over leaf children the graph's own op -> leaf map
    (where an op outside every child maps to the root itself: callers skip `sg`)."""
    if sg._parent is None and sg._children and not any(map(_CHILDREN, sg._children)):
        return sg._graph._leaf_of
    return sg.child_map()


def _onnx_items(op: "Op") -> tuple[tuple[str, Any], ...]:
    attrs, kinds = op._attrs, op._attr_types
    if ANNOTATION not in kinds.values() and kinds.keys() == attrs.keys():  # the usual op: no annotation
        return tuple(attrs.items())
    return tuple((k, v) for k, v in attrs.items() if kinds.get(k) is not ANNOTATION)


__all__ = ["MANY", "NONE", "GraphIndex", "OpRow", "TensorFacts"]
