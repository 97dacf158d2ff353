"""Which children of a subgraph read from which: the children graph, numbered, for merge planners.

Read through `Subgraph.child_dependencies()`. It lives in `xgraph/ir` because it walks the
op links directly, which a 100k-op graph needs: the planners in `xgraph.partition` call it
once per merge, and the op-to-op links it reads are worked out once per graph structure
(kept in the graph's cache; a merge changes the tree, never the links).
"""
from __future__ import annotations

from array import array
from operator import attrgetter, eq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph


_CHILDREN = attrgetter("_children")
_INPUTS = attrgetter("_inputs")
_OUTPUTS = attrgetter("_outputs")
_SEQ = attrgetter("_seq")


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
    holder = list(map(_child_lookup(sg).get, ops))  # per op position: the child holding it (None or sg: outside)
    numbered = dict.fromkeys(holder)  # the children in the order of their first op
    numbered.pop(None, None)
    numbered.pop(sg, None)
    if len(numbered) == len(holder) and not any(map(eq, first, range(len(first)))):
        # one child per op (the tree create_child_subgraph makes): child i holds op i, its preds are the op's
        return list(numbered), [[u] if u >= 0 else [] if u == NONE else [x for x in more[MANY - u] if x != v]
                                for v, u in enumerate(first)]
    number = dict(zip(numbered, range(len(numbered))))
    number[None] = number[sg] = -1
    owner = list(map(number.__getitem__, holder))  # per op position: the child's number, -1 outside sg
    owner.append(-1)  # owner[NONE]: an op reading no other op
    preds: list[list[int]] = [[] for _ in numbered]
    for v, u in zip(owner, first):
        if v < 0:
            continue
        if u >= NONE:  # the usual op: one producer, or none
            u = owner[u]
            if u >= 0 and u != v:
                preds[v].append(u)
            continue
        found = preds[v]
        for u in more[MANY - u]:
            u = owner[u]
            if u >= 0 and u != v:
                found.append(u)
    return list(numbered), preds


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
    ops = list(graph._ops.values())
    first: list[int] = []
    more: list[tuple[int, ...]] = []
    append = first.append
    if graph._nested_ops:
        position = dict(zip(ops, range(len(ops))))
        for op in ops:
            sources = tuple(position[p] for p in op.get_input_ops())
            if len(sources) == 1:
                append(sources[0])
            elif sources:
                append(MANY - len(more))
                more.append(sources)
            else:
                append(NONE)
        return _keep(graph, first, more)
    if not ops:
        return _keep(graph, first, more)
    # an op's position from its creation number, which no other op of the table shares: one list (a dict when
    # the numbers lie far apart) maps them, read off the producer in hand; a producer is always an op of the table
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
        if n == 1:  # the usual ops: one or two inputs, nothing to deduplicate by hand
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
            sources = dict.fromkeys(position[t._producer._seq - base] for t in inputs
                                    if t is not None and t._producer is not None)
            if len(sources) == 1:
                append(next(iter(sources)))
            elif sources:
                append(MANY - len(more))
                more.append(tuple(sources))
            else:
                append(NONE)
    return _keep(graph, first, more)


def _keep(graph: "Graph", first: list[int], more: list[tuple[int, ...]]) -> "tuple[array, list[tuple[int, ...]]]":
    """Store `_op_producers`' result in the graph's cache, `first` packed (8 bytes per op)."""
    cached = graph._cache["op_producers"] = (array("q", first), more)
    return cached


__all__ = ["child_dependencies", "children_in_op_order", "edges_go_forward"]
