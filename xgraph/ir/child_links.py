"""Which children of a subgraph read from which: the children graph, numbered, for merge planners.

Read through `Subgraph.child_dependencies()`. It lives in `xgraph/ir` because it walks the
op links directly (one pass, no per-op lists), which a 100k-op graph needs: the planners in
`xgraph.partition` call it once per merge.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xgraph.ir.subgraph import Subgraph


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
    graph = sg._graph
    child_of = sg._child_map()
    ops = []
    number: dict["Subgraph", int] = {}
    index_of: dict["Op", int] = {}
    for op in graph._ops.values():  # one pass in insertion order: the ops of sg, their children numbered
        child = child_of.get(op)
        if child is not None:
            n = number.get(child)
            if n is None:
                n = number[child] = len(number)
            index_of[op] = n
            ops.append(op)
    preds: list[list[int]] = [[] for _ in number]
    nested = bool(graph._nested_ops)
    get = index_of.get
    for op in ops:
        v = index_of[op]
        sources = preds[v]
        inputs = op._inputs
        if nested:
            producers = op.get_input_ops()
        elif len(inputs) == 1:  # the usual op: one producer, nothing to deduplicate
            t = inputs[0]
            producers = () if t is None or t._producer is None else (t._producer,)
        else:
            producers = dict.fromkeys(t._producer for t in inputs if t is not None and t._producer is not None)
        for producer in producers:
            u = get(producer)
            if u is not None and u != v:
                sources.append(u)
    return list(number), preds


__all__ = ["child_dependencies"]
