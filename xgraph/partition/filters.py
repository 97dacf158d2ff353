"""Filters: pick the unassigned subgraphs a plugin wants, by op name, op type, template or predicate.

A subgraph is *unassigned* when it is a depth-1 leaf child of the root without a "device"
attr. Earlier plugins' subgraphs carry a "device", and children a device compiler split
further are not leaves, so neither is ever returned: a plugin only sees what is still free.

The helpers need the root to have children (one per op after
``graph.get_root_subgraph().create_child_subgraph()``, which the compile pipeline does
before any plugin runs). On a graph with ops but no children they raise a PartitionError
saying so; on a graph without ops they find nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import accumulate, chain

from xgraph.errors import PartitionError
from xgraph.ir.arguments import require_graph
from xgraph.ir import Graph, GraphTemplate, Subgraph

#: The attr that marks a subgraph as taken by a plugin or the device placer.
DEVICE_ATTR = "device"


def unassigned_subgraphs(graph: Graph) -> set[Subgraph]:
    """Every unassigned subgraph of `graph`: depth-1 leaf children of the root without "device"."""
    root = _root_with_children(graph, "unassigned_subgraphs")
    return {child for child in root.get_children() if _is_free(child)}


def unassigned_reason(subgraph: Subgraph, graph: Graph) -> str | None:
    """Why `subgraph` is not an unassigned subgraph of `graph` (a phrase), or None when it is one."""
    if not isinstance(subgraph, Subgraph):
        return f"{subgraph!r:.60} is a {type(subgraph).__name__}, not a Subgraph"
    name = subgraph.name
    if subgraph.get_graph() is not graph:
        return f"subgraph {name!r} belongs to graph {subgraph.get_graph().name!r}, not to {graph.name!r}"
    root = graph.get_root_subgraph()
    if subgraph is root:
        return (f"subgraph {name!r} is the root; call graph.get_root_subgraph().create_child_subgraph() "
                "and work with its children")
    if subgraph.get_parent() is not root:
        return f"subgraph {name!r} is at depth {subgraph.depth}; only depth-1 children of the root are unassigned"
    if not root.is_child(subgraph):
        return (f"subgraph {name!r} is no longer in graph {graph.name!r} (it was merged into another "
                "subgraph); use the subgraphs the merge returned")
    if not subgraph.is_leaf:
        return f"subgraph {name!r} has children of its own; only leaf subgraphs are unassigned"
    if subgraph.has_attr(DEVICE_ATTR):
        return (f"subgraph {name!r} is already assigned to device {subgraph.get_attr(DEVICE_ATTR)!r}; "
                "select only unassigned subgraphs (the filter_by_* helpers return those)")
    return None


def filter_by_name(graph: Graph, name: str) -> Subgraph | None:
    """The unassigned subgraph holding the op called `name`; None if it is assigned or no such op exists."""
    root = _root_with_children(graph, "filter_by_name")
    if not isinstance(name, str):
        raise PartitionError(f"filter_by_name: the op name must be a str, got {type(name).__name__} {name!r:.60}")
    if not graph.has_op(name):
        return None
    child = root.find_child_subgraph_by_op(name)
    return child if child is not None and _is_free(child) else None


def filter_by_type(graph: Graph, type: "str | Iterable[str]") -> set[Subgraph]:
    """The unassigned subgraphs holding at least one op whose type is `type` (a str or several strs)."""
    root = _root_with_children(graph, "filter_by_type")
    types = _op_types(type)
    result: set[Subgraph] = set()
    for op in graph.get_ops():
        if op.type in types:
            leaf = graph.get_leaf_subgraph(op)
            if leaf.get_parent() is root and _is_free(leaf):
                result.add(leaf)
    return result


def filter_by_template(graph: Graph, template: GraphTemplate) -> set[Subgraph]:
    """The unassigned subgraphs holding the ops of every match of `template` that lies wholly in them.

    A match touching a subgraph that is already assigned (or split deeper) is skipped, so a
    plugin receives whole patterns, never the remains of one an earlier plugin cut into.
    """
    root = _root_with_children(graph, "filter_by_template")
    if not isinstance(template, GraphTemplate):
        raise PartitionError(f"filter_by_template: expected a GraphTemplate, got {type(template).__name__}; "
                             "build one with xgraph.GraphTemplate(name).add_op(...)")
    matches = [list(match.values()) for match in graph.isomorphism(template)]
    leaves = graph.get_leaf_subgraphs(chain.from_iterable(matches))
    ends = list(accumulate(map(len, matches)))
    per_match = [set(leaves[end - len(ops):end]) for ops, end in zip(matches, ends)]
    held = set(leaves)
    taken = {leaf for leaf in held if not (leaf.get_parent() is root and _is_free(leaf))}  # once per subgraph
    if not taken:
        return held
    return set().union(*(leaves for leaves in per_match if leaves.isdisjoint(taken)))


def filter(graph: Graph, func: Callable[[set[Subgraph]], Iterable[Subgraph]]) -> set[Subgraph]:
    """`func(set of all unassigned subgraphs)`, checked to be a subset of what it was given."""
    candidates = unassigned_subgraphs(graph)
    if not callable(func):
        raise PartitionError(f"filter: func must be callable (set[Subgraph] -> set[Subgraph]), "
                             f"got {type(func).__name__}")
    returned = func(set(candidates))
    if returned is None or isinstance(returned, (Subgraph, str)) or not isinstance(returned, Iterable):
        raise PartitionError(f"filter: {_func_name(func)} returned {type(returned).__name__}; it must return "
                             "a subset of the set of unassigned subgraphs it was given (a set, maybe empty)")
    result = set()
    for sg in returned:
        if not isinstance(sg, Subgraph) or sg not in candidates:
            reason = unassigned_reason(sg, graph) or f"subgraph {sg.name!r} was not in the set it was given"
            raise PartitionError(f"filter: {_func_name(func)} returned something it was not given: {reason}")
        result.add(sg)
    return result


def _is_free(child: Subgraph) -> bool:
    """True for a leaf without "device" (the caller has checked it is a child of the root)."""
    return child.is_leaf and not child.has_attr(DEVICE_ATTR)


def _root_with_children(graph: Graph, where: str) -> Subgraph:
    """The root of `graph`, once it is known to have children (or the graph has no ops at all)."""
    require_graph(graph, where, error=PartitionError)
    root = graph.get_root_subgraph()
    if root.is_leaf and graph.get_op_num():
        raise PartitionError(f"{where}: the root subgraph of graph {graph.name!r} has no children yet; call "
                             "graph.get_root_subgraph().create_child_subgraph() first (xgraph.compile does "
                             "this before running plugins)")
    return root


def _op_types(type_or_types: "str | Iterable[str]") -> frozenset[str]:
    """The op types asked for, as a set of non-empty strs."""
    types = [type_or_types] if isinstance(type_or_types, str) else type_or_types
    if not isinstance(types, Iterable):
        raise PartitionError(f"filter_by_type: expected an op type str such as 'Conv' (or several), "
                             f"got {type(type_or_types).__name__}")
    types = list(types)
    bad = [t for t in types if not isinstance(t, str) or not t]
    if bad:
        raise PartitionError(f"filter_by_type: op types must be non-empty strs such as 'Conv', got {bad[0]!r:.60}")
    return frozenset(types)


def _func_name(func: Callable) -> str:
    """A readable name for a user callable in error messages."""
    return f"func {getattr(func, '__qualname__', None) or type(func).__name__!s}"
