"""Cycle checks on the quotient graph of a subgraph's children (the "would this merge cycle?" question)."""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Mapping, TypeVar

if TYPE_CHECKING:
    from xgraph.ir.protocols import TreeNode

#: a subgraph (a Subgraph, which calls this module: it is seen through `xgraph.ir.protocols.TreeNode`)
Node = TypeVar("Node", bound="TreeNode")


def merge_makes_cycle(parent: Node, groups: "list[list[Node]]") -> str | None:
    """Describe the first group whose contraction makes `parent`'s children graph cyclic, else None.

    One group: a search from the group's successors, pruned by topological index, so a local
    merge costs a local search. A child whose first op comes after the group's last op cannot
    lead back into it, unless it reaches a merged child that spans that point (ops before and
    after it): the pruning bound is therefore the group's last op extended by every merged child
    spanning the bound (`_reach_bound`). Several groups: one Kahn pass over the contracted
    graph, O(V+E).
    """
    groups = [g for g in groups if len(g) > 1]
    if not groups:
        return None
    if len(groups) == 1:
        return _describe(groups[0]) if _single_group_cycles(parent, groups[0]) else None
    return _many_groups_cycle(parent, groups)


def _describe(group: "list[Node]") -> str:
    names = sorted(c.name for c in group)
    return "{" + ", ".join(names[:6]) + (", ..." if len(names) > 6 else "") + "}"


def _single_group_cycles(parent: Node, group: "list[Node]") -> bool:
    index = parent.graph.index().positions()
    members = set(group)
    last = _reach_bound(parent, members, index, max(index[op] for c in group for op in c.get_ops()))
    first_of: dict[Node, int] = {}
    frontier: list[Node] = []
    seen: set[Node] = set()

    def visit_successors(ops) -> bool:
        for op in ops:
            for consumer in op.get_fanout_ops():
                child = parent.find_child_subgraph_by_op(consumer)
                if child is None or child in seen:
                    continue
                if child in members:
                    if source_is_outside:
                        return True
                    continue
                if child not in first_of:
                    first_of[child] = min(map(index.__getitem__, child.get_ops()))
                if first_of[child] > last:
                    continue
                seen.add(child)
                frontier.append(child)
        return False

    source_is_outside = False
    visit_successors(op for c in group for op in c.get_ops())
    source_is_outside = True
    while frontier:
        if visit_successors(frontier.pop().get_ops()):
            return True
    return False


class _Spans:
    """The (first, last) positions of a parent's merged children, for one index and one tree version."""

    __slots__ = ("index", "version", "spans")

    def __init__(self, index: object, version: int, spans: "dict[object, tuple[int, int]]") -> None:
        self.index, self.version, self.spans = index, version, spans


#: parent -> its merged children's spans, kept while the graph's index and tree version stay (a
#: plugin merging a thousand groups one by one then pays for the spans once, not per merge)
_SPANS: "weakref.WeakKeyDictionary[object, _Spans]" = weakref.WeakKeyDictionary()


def _spans(parent: Node, positions: "Mapping") -> "dict[object, tuple[int, int]]":
    graph = parent.graph
    index, version = graph.index(), graph.tree_version
    kept = _SPANS.get(parent)
    if kept is not None and kept.index is index and kept.version == version:
        return kept.spans
    spans = {}
    for child in parent.get_children():  # single-op children never span
        if child.get_op_num() > 1:
            at = [positions[op] for op in child.get_ops()]
            spans[child] = (min(at), max(at))
    _SPANS[parent] = _Spans(index, version, spans)
    return spans


def note_merged(parent: Node, group: "list[Node]", merged: Node, version: int) -> None:
    """`group` became `merged` in the merge that followed the check at tree version `version`: the
    kept spans follow it, so the next merge's check needs no scan of the children."""
    kept = _SPANS.get(parent)
    graph = parent.graph
    if kept is None or kept.version != version or kept.index is not graph.index():
        return
    positions = graph.index().positions()
    low, high = [], []
    for child in group:
        span = kept.spans.pop(child, None)
        if span is None:
            span = (positions[next(iter(child.get_ops()))],) * 2
        low.append(span[0])
        high.append(span[1])
    kept.spans[merged] = (min(low), max(high))
    kept.version = graph.tree_version


def _reach_bound(parent: Node, members: "set[Node]", positions: "Mapping", last: int) -> int:
    """The position after which no child can lead back to an op at or before `last`.

    A path only moves to later positions, except through a merged child, which it may enter
    late and leave early. So `last` is extended to the end of every child spanning it (first op
    at or before, last op after), to a fixpoint."""
    for low, high in sorted(span for child, span in _spans(parent, positions).items() if child not in members):
        if low > last:  # by first op: a span starting after the bound stays after it
            break
        last = max(last, high)
    return last


def _many_groups_cycle(parent: Node, groups: "list[list[Node]]") -> str | None:
    node: dict[Node, int] = {}
    for i, g in enumerate(groups):
        for c in g:
            node[c] = i
    next_id = len(groups)
    for c in parent.get_children():
        if c not in node:
            node[c] = next_id
            next_id += 1
    child_of = parent.child_map()
    succ: list[set[int]] = [set() for _ in range(next_id)]
    indeg = [0] * next_id
    for op, c in child_of.items():
        a = node[c]
        for consumer in op.get_fanout_ops():
            d = child_of.get(consumer)
            if d is None:
                continue
            b = node[d]
            if a != b and b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    ready = [n for n in range(next_id) if indeg[n] == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    if done == next_id:
        return None
    stuck = [i for i in range(len(groups)) if indeg[i] > 0]
    return _describe(groups[stuck[0]] if stuck else groups[0])
