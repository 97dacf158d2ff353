"""Merging sibling subgraphs into as few subgraphs as their data dependencies allow.

Layers, each usable on its own:

* `level_partition(preds, labels)` and `coalesce_groups(preds, labels, levels)` (both in one go:
  `group_nodes`), in
  `xgraph.partition.levels`: the algorithm, on a plain integer DAG. Pure. The first gives
  every node a level so that grouping by (label, level) is acyclic and never worse than
  topological waves; the second joins those groups further wherever an exact, budgeted path
  search allows.
* `group_children(root, labels)`: the root's children as such a DAG, any number of labels at
  once (the device placer passes one device per child). Pure: returns merge groups.
* `merge_subgraph(subgraphs)`: checks its input, groups with a single label, and applies the
  groups with one all-or-nothing `Subgraph.merge_child_groups` call.

A merge must never make the root's children depend on each other in a cycle: a runner
executes a subgraph as a unit, so a cycle (A feeds B, B feeds A) could never be scheduled.
The grouping guarantees acyclicity by construction, so the groups are applied without the IR's
own cycle check.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, is_, lt, methodcaller, ne

from xgraph.errors import PartitionError
from xgraph.ir import Subgraph
from xgraph.partition.filters import DEVICE_ATTR, unassigned_reason
from xgraph.partition.levels import FIXED, group_nodes, topological_order

_IS_LEAF = attrgetter("is_leaf")
_PARENT = methodcaller("get_parent")

#: The one label `merge_subgraph` gives every subgraph it was asked to merge.
_MERGE_LABEL = "merge"


@dataclass(frozen=True)
class ChildrenDag:
    """The children of a subgraph in a deterministic topological order, with their dependencies as indices."""

    children: list[Subgraph]
    #: preds[i]: indices (all < i) of the children that an op of children[i] reads from; may repeat.
    preds: list[list[int]]


def children_dag(root: Subgraph) -> ChildrenDag:
    """The dependency DAG of the root's children: an edge where an op of one reads an op of another. O((V+E) log V).

    Children are numbered by their first op in graph insertion order, then put in
    topological order, smallest number first among the ready ones (so a graph built in
    topological order keeps its insertion order); the result depends only on the graph,
    never on set iteration order.
    """
    if root.is_leaf:
        return ChildrenDag([], [])
    children, preds = root.child_dependencies()
    if _numbered_forward(preds):
        return ChildrenDag(children, preds)
    order = topological_order(preds)
    if len(order) < len(preds):
        raise PartitionError(f"the children of {root.name!r} in graph {root.get_graph().name!r} depend on each "
                             "other in a cycle; the subgraph tree is damaged (check it with xgraph.ir.links)")
    position = [0] * len(order)
    for i, v in enumerate(order):
        position[v] = i
    return ChildrenDag([children[v] for v in order], [[position[u] for u in preds[v]] for v in order])


def _numbered_forward(preds: list[list[int]]) -> bool:
    """True when every predecessor index is smaller than its node's: the edges and the check flattened, in C."""
    sources = chain.from_iterable(preds)
    nodes = chain.from_iterable(map(repeat, range(len(preds)), map(len, preds)))
    return all(map(lt, sources, nodes))


def group_children(root: Subgraph, labels: Mapping[Subgraph, Hashable]) -> list[list[Subgraph]]:
    """Groups of the root's children to merge: one label per group, no cycle, at most as many as topological waves.

    `labels` maps the children that may merge to a label (any hashable, e.g. a device
    name); children sharing a label may share a group. Children not in `labels` stay as
    they are. Every labelled child appears in exactly one group (singletons included);
    groups come in topological order of their first member, members in topological order.
    Nothing is changed: apply the groups with ``root.merge_child_groups(groups,
    check_cycles=False)`` (`level_partition` and `coalesce_groups` say why it is acyclic).
    Deterministic: the same graph and labels give the same groups.

    Complexity: O((V + E) log V) for V ops and E op-to-op edges.

    >>> from xgraph import Graph
    >>> g = Graph("g")
    >>> x = g.create_input("x", [1])
    >>> a = g.create_op("a", "Relu", inputs=[x])
    >>> b = g.create_op("b", "NonZero", inputs=["a"])
    >>> c = g.create_op("c", "Relu", inputs=["b"])
    >>> d = g.create_op("d", "Relu", inputs=["a"])
    >>> root = g.get_root_subgraph(); root.create_child_subgraph()
    >>> device = {"a": "AICORE", "b": "AICPU", "c": "AICORE", "d": "AICORE"}
    >>> groups = group_children(root, {g.get_leaf_subgraph(n): dev for n, dev in device.items()})
    >>> [[sg.name for sg in group] for group in groups]
    [['subgraph_a', 'subgraph_d'], ['subgraph_b'], ['subgraph_c']]
    """
    _check_labels(root, labels)
    return _group_children(root, labels)


def _group_children(root: Subgraph, labels: Mapping[Subgraph, Hashable]) -> list[list[Subgraph]]:
    """`group_children` on input already checked."""
    if not labels:
        return []
    dag = children_dag(root)
    node_labels = _label_numbers(dag.children, labels)
    group_ids = group_nodes(dag.preds, node_labels, numbered=True)  # children_dag numbers them so
    groups: dict[int, list[Subgraph]] = {}
    for child, group in compress(zip(dag.children, group_ids), map(ne, node_labels, repeat(FIXED))):
        groups.setdefault(group, []).append(child)
    return list(groups.values())


#: what `_label_numbers` looks up for a child without a label
_UNLABELLED = object()


def _label_numbers(children: list[Subgraph], labels: Mapping[Subgraph, Hashable]) -> list[int]:
    """Per child its label as a number (labels numbered in the order of the first child carrying each), or FIXED."""
    given = list(map(labels.get, children, repeat(_UNLABELLED)))
    try:
        number = dict(zip(dict.fromkeys(given), range(len(labels) + 1)))
    except TypeError:  # name the first child with a label that cannot be hashed
        child, label = next((c, x) for c, x in zip(children, given) if _unhashable(x))
        raise PartitionError(f"group_children: the label of {child.name!r} is {label!r:.60}, which is not "
                             "hashable; use a str such as a device name") from None
    if _UNLABELLED in number:  # the unlabelled children's place in the numbering goes to the labels after it
        after = number.pop(_UNLABELLED)
        number = {label: n - (n > after) for label, n in number.items()}
        number[_UNLABELLED] = FIXED
    return list(map(number.__getitem__, given))


def _unhashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return True
    return False


def _check_labels(root: Subgraph, labels: Mapping[Subgraph, Hashable]) -> None:
    """Raise PartitionError unless `root` is a root and `labels` maps some of its leaf children."""
    if not isinstance(root, Subgraph) or not root.is_root:
        raise PartitionError(f"group_children: {root!r:.60} is not a root subgraph; pass graph.get_root_subgraph()")
    if not isinstance(labels, Mapping):
        raise PartitionError(f"group_children: labels must map children of the root to labels, "
                             f"got {type(labels).__name__}")
    if root.are_children(labels.keys()) and all(map(_IS_LEAF, labels)):
        return  # the usual input, checked in bulk; the loop below names the first offender
    for child in labels:
        if not isinstance(child, Subgraph) or not root.is_child(child):
            what = f"subgraph {child.name!r}" if isinstance(child, Subgraph) else f"{child!r:.60}"
            raise PartitionError(f"group_children: {what} is not a child of the root of graph "
                                 f"{root.get_graph().name!r}; label only its current children")
        if not child.is_leaf:
            raise PartitionError(f"group_children: subgraph {child.name!r} has children of its own; "
                                 "only leaf children can be merged")


def merge_subgraph(subgraphs: Iterable[Subgraph]) -> set[Subgraph]:
    """Merge unassigned sibling subgraphs into as few subgraphs as their data dependencies allow; return them.

    The subgraphs must be unassigned children of one graph's root (what the filter_by_*
    helpers return). The result never makes the root's children depend on each other in a
    cycle, never holds more subgraphs than grouping by topological waves would, and is the
    same for the same graph and input. Children not passed in are left alone. Bad input
    raises PartitionError naming the offender, and nothing is merged. O((V + E) log V).
    """
    members = _check_merge_input(subgraphs)
    if not members:
        return set()
    graph = members[0].get_graph()
    root = graph.get_root_subgraph()
    groups = _group_children(root, dict.fromkeys(members, _MERGE_LABEL))
    return set(root.merge_child_groups(groups, check_cycles=False))


def _check_merge_input(subgraphs: Iterable[Subgraph]) -> list[Subgraph]:
    """The distinct subgraphs asked for, once each is known to be an unassigned child of one graph's root."""
    if isinstance(subgraphs, Subgraph):
        raise PartitionError(f"merge_subgraph takes a set of subgraphs, got the single subgraph "
                             f"{subgraphs.name!r}; pass {{sg}}")
    if isinstance(subgraphs, (str, bytes)) or not isinstance(subgraphs, Iterable):
        raise PartitionError(f"merge_subgraph takes a set of subgraphs, got {type(subgraphs).__name__}")
    members = []
    for sg in subgraphs:
        if not isinstance(sg, Subgraph):
            raise PartitionError(f"merge_subgraph: {sg!r:.60} is a {type(sg).__name__}, not a Subgraph; "
                                 "nothing was merged")
        members.append(sg)
    members = list(dict.fromkeys(members))
    if not members:
        return members
    graph = members[0].get_graph()
    root = graph.get_root_subgraph()
    if (all(map(is_, map(_PARENT, members), repeat(root))) and root.are_children(members)
            and all(map(_IS_LEAF, members)) and not any(map(methodcaller("has_attr", DEVICE_ATTR), members))):
        return members  # the usual input, checked in bulk; the loop below names the first offender
    for sg in members:
        if not (sg.get_parent() is root and root.is_child(sg) and sg.is_leaf and not sg.has_attr(DEVICE_ATTR)):
            reason = unassigned_reason(sg, graph)
            if reason is not None:
                raise PartitionError(f"merge_subgraph: {reason}; nothing was merged")
    return members
