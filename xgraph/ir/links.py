"""Invariant checks over a Graph: links agree both ways, and the subgraph tree partitions the ops."""
from __future__ import annotations

from xgraph.errors import GraphError
from xgraph.ir.graph_core import GraphCore
from xgraph.ir.subgraph import Subgraph


def check_links(graph: GraphCore) -> None:
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


def check_tree(graph: GraphCore) -> None:
    """Raise GraphError unless every level of the subgraph tree partitions its parent's ops."""
    root = graph._root
    if root._ops != set(graph._ops.values()):
        raise GraphError("the root subgraph does not hold exactly the graph's ops")
    stack: list[Subgraph] = [root]
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
