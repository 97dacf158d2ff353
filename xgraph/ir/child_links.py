"""Which children of a subgraph read from which: the children graph, numbered, for merge planners.

Read through `Subgraph.child_dependencies()`. It lives in `xgraph/ir` because it walks the
op links directly, which a 100k-op graph needs: the planners in `xgraph.partition` call it
once per merge, and the op-to-op links it reads are worked out once per graph structure
(kept in the graph's cache; a merge changes the tree, never the links).
"""
from __future__ import annotations

from array import array
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph


_CHILDREN = attrgetter("_children")


def child_dependencies(sg: "Subgraph") -> "tuple[list[Subgraph], list[list[int]]]":
    """(children, preds): the children of `sg` numbered by their first op in graph insertion order, and per
    child the numbers of the children its ops read from, producer by producer in op order (a number may
    repeat; a child's own number never appears). Implicit inputs of nested graphs count as reads. O(V+E).

    >>> from xgraph import Graph
    >>> g = Graph("g"); x = g.create_input("x", [1])
    >>> for n, src in [("a", "x"), ("b", "a"), ("c", "b")]: _ = g.create_op(n, "Relu", inputs=[src])
    >>> root = g.get_root_subgraph(); root.create_child_subgraph()
    >>> children, preds = root.child_dependencies()
    >>> [c.name for c in children], preds
    (['subgraph_a', 'subgraph_b', 'subgraph_c'], [[], [0], [1]])
    """
    ops = sg._graph._ops.values()
    first, more = _op_producers(sg._graph)
    child_of = _child_lookup(sg)
    number: dict["Subgraph", int] = {}
    get = child_of.get
    owner = [-1] * len(ops)  # per op position: the number of the child holding it, -1 outside sg
    for i, op in enumerate(ops):  # one pass in insertion order: the children numbered by their first op
        child = get(op)
        if child is not None and child is not sg:
            n = number.get(child)
            if n is None:
                n = number[child] = len(number)
            owner[i] = n
    preds: list[list[int]] = [[] for _ in number]
    for v, u in zip(owner, first):
        if v < 0 or u == NONE:
            continue
        if u >= 0:  # the usual op: one producer
            u = owner[u]
            if u >= 0 and u != v:
                preds[v].append(u)
            continue
        found = preds[v]
        for u in more[MANY - u]:
            u = owner[u]
            if u >= 0 and u != v:
                found.append(u)
    return list(number), preds


def edges_go_forward(sg: "Subgraph", rank: "dict[Subgraph, int]") -> bool:
    """True when every dependency between children of `sg` points from a child of smaller `rank` to one of
    larger or equal rank (an op's own child included). O(V+E) over the cached op links."""
    first, more = _op_producers(sg._graph)
    child_of = _child_lookup(sg)
    get = rank.get
    ranks = [get(child_of.get(op)) for op in sg._graph._ops.values()]  # None: not in sg (or sg itself)
    for here, u in zip(ranks, first):
        if here is None or u == NONE:
            continue
        for u in (u,) if u >= 0 else more[MANY - u]:
            there = ranks[u]
            if there is not None and there > here:
                return False
    return True


def children_in_op_order(sg: "Subgraph", ops: "list[Op]") -> "list[Subgraph]":
    """The children of `sg` holding some of `ops`, ordered by the first of `ops` each holds. O(len(ops))."""
    found = dict.fromkeys(map(_child_lookup(sg).get, ops))
    found.pop(None, None)
    found.pop(sg, None)
    return list(found)


def _child_lookup(sg: "Subgraph") -> "dict[Op, Subgraph]":
    """op -> the child of `sg` holding it; for the root over leaf children the graph's own op -> leaf map
    (where an op outside every child maps to the root itself: callers skip `sg`)."""
    if sg._parent is None and sg._children and not any(map(_CHILDREN, sg._children)):
        return sg._graph._leaf_of
    return sg._child_map()


#: `_op_producers` codes: an op reading no other op; an op reading several (MANY - code indexes `more`)
NONE, MANY = -1, -2


def _op_producers(graph: "Graph") -> "tuple[array, list[tuple[int, ...]]]":
    """(first, more): per op in insertion order, the position of the one op it reads from, or NONE, or for an
    op reading several distinct ops `MANY - i` with `more[i]` their positions in input order.

    Computed once per graph structure and kept in the graph's cache, which every structural
    change clears (as it does the toposort): the tree can change between calls (merges), the
    op links cannot. Implicit inputs of nested graphs count as reads. Compact (8 bytes per op,
    a tuple only per op reading several), as it stays in the cache after the compile.
    """
    cached = graph._cache.get("op_producers")
    if cached is not None:
        return cached
    ops = graph._ops.values()
    position = {op: i for i, op in enumerate(ops)}
    first = array("q", bytes(8 * len(position)))
    more: list[tuple[int, ...]] = []
    nested = bool(graph._nested_ops)
    for i, op in enumerate(ops):
        inputs = op._inputs
        if nested:
            sources = tuple(position[p] for p in op.get_input_ops())
        elif len(inputs) == 1:  # the usual op: one producer, nothing to deduplicate
            t = inputs[0]
            first[i] = NONE if t is None or t._producer is None else position[t._producer]
            continue
        else:
            sources = tuple(position[p] for p in dict.fromkeys(
                t._producer for t in inputs if t is not None and t._producer is not None))
        if len(sources) == 1:
            first[i] = sources[0]
        elif sources:
            first[i] = MANY - len(more)
            more.append(sources)
        else:
            first[i] = NONE
    cached = graph._cache["op_producers"] = (first, more)
    return cached


__all__ = ["child_dependencies", "children_in_op_order", "edges_go_forward"]
