"""Orders of a graph's ops: the deterministic topological order and reachability along it.

`GraphCore.toposort` caches what `topological_order` returns; `reaches` walks fan-outs no
further than the destination's position in that order.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Iterable, Sequence

from xgraph.errors import GraphError

if TYPE_CHECKING:
    import networkx as nx

    from xgraph.ir.op import Op


def table_order_if_topological(ops: "Sequence[Op]") -> "list[Op] | None":
    """`ops` as they are when that order is by creation and topological (then it is exactly what
    Kahn's heap pops: the smallest ready op is always the next one); else None. O(V+E)."""
    last = -1
    for op in ops:
        seq = op._seq
        if seq <= last:
            return None
        last = seq
        for t in op._inputs:  # with creation numbers rising along the table, "earlier" is "smaller number"
            if t is not None and t._producer is not None and t._producer._seq >= seq:
                return None
    return list(ops)


#: Key in a graph's derived-state cache: its table order was found topological, and only edits that
#: keep it so (removing ops or tensors, adding weights: `GraphCore._touch(keeps_order=True)`) came since.
TABLE_ORDER = "table_order_topological"


def topological_order(ops: "Iterable[Op]", graph_name: str, nested: bool,
                      known: "dict | None" = None) -> "list[Op]":
    """Ops in a deterministic topological order (creation order breaks ties). O((V+E) log V).

    `nested`: some op has nested graphs (its implicit reads are links the table order may break).
    `known`: the graph's cache; its `TABLE_ORDER` entry spares the O(V+E) check of the table order
    and is set when that check succeeds. GraphError naming a few of the ops when they form a cycle."""
    ops = list(ops)
    if not nested:
        if known is not None and known.get(TABLE_ORDER):
            return ops
        in_order = table_order_if_topological(ops)
        if in_order is not None:
            if known is not None:
                known[TABLE_ORDER] = True
            return in_order
    indeg = {op: len(op.get_input_ops()) for op in ops}
    heap = [op for op, n in indeg.items() if n == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        op = heapq.heappop(heap)
        order.append(op)
        for c in op.get_fanout_ops():
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, c)
    if len(order) != len(ops):
        stuck = sorted(op.name for op, n in indeg.items() if n > 0)[:5]
        raise GraphError(f"graph {graph_name!r} has a cycle through ops {stuck}")
    return order


def reaches(src: "Op", dst: "Op", index: "dict[Op, int]") -> bool:
    """True when a path leads from `src` to `dst` (src == dst counts); `index`: op -> topological position."""
    if src is dst:
        return True
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


def dependency_digraph(ops: "Iterable[Op]") -> "nx.DiGraph":
    """The op-to-op dependency graph as a networkx.DiGraph over the Op objects."""
    import networkx as nx
    ops = list(ops)
    g = nx.DiGraph()
    g.add_nodes_from(ops)
    g.add_edges_from((p, op) for op in ops for p in op.get_input_ops())
    return g


__all__ = ["TABLE_ORDER", "dependency_digraph", "reaches", "table_order_if_topological", "topological_order"]
