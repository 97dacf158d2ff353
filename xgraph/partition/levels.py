"""Grouping the nodes of an integer DAG by label without making a cycle: the algorithm behind merges.

Everything here works on a plain DAG, pure, with no Subgraph in sight: nodes ``0..n-1``
numbered in topological order, ``preds[v]`` the indices of v's predecessors, and a label per
node (an int >= 0 for a node that may share a group with nodes of the same label, or `FIXED`
for a node that stays alone).

* `level_partition(preds, labels)` gives every node a level so that grouping by
  (label, level) is acyclic and never worse than topological waves.
* `coalesce_groups(preds, labels, levels)` joins those groups further wherever an exact,
  budgeted path search allows.
* `topological_order(preds)` numbers a DAG given in any order (Kahn's algorithm), so that
  it can be fed to the two above.

Why acyclic matters: `xgraph.partition.merge` turns a root's children into such a DAG and
merges each group into one subgraph, and a runner executes a subgraph as a unit, so a cycle
among the groups (A feeds B, B feeds A) could never be scheduled. Both functions guarantee
acyclicity by construction; their docstrings give the argument and the complexity.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xgraph.errors import PartitionError

#: Label of a node that stays alone (never grouped) in `level_partition`.
FIXED = -1


def level_partition(preds: Sequence[Sequence[int]], labels: Sequence[int]) -> list[int]:
    """A level per node such that grouping labelled nodes by (label, level) never makes a cycle.

    Input: nodes ``0..n-1`` numbered in topological order (every index in ``preds[v]`` is
    smaller than ``v``) and a label per node: an int >= 0 for a node that may share a group
    with nodes of the same label, or `FIXED` for a node that stays alone. Output: the level
    of every node; the groups are the labelled nodes with equal (label, level).

    The rule: along an edge u -> v the level may stay equal only when u and v share a label
    (``step(u, v) = 0``); otherwise it must grow (``step(u, v) = 1``)::

        level[v] >= level[u] + step(u, v)                                      (1)

    *Acyclic.* An edge between two different groups joins either different labels or a
    FIXED node, where (1) makes the level grow, or the same label at different levels (equal
    label and level would be one group), where it grows too. Levels strictly grow along
    every edge of the contracted graph, so the contracted graph has no cycle.

    *Never more groups than topological waves.* The wave baseline is the smallest solution
    of (1), ``wave[v] = max(wave[u] + step(u, v))``, grouped the same way. Let
    ``allowed[L]`` be the wave levels of label L. Every level given to a node of label L is
    taken from ``allowed[L]``, so L gets at most ``len(allowed[L])`` groups: the wave count.

    *Always possible.* Backwards, ``latest[v]`` is the largest level in
    ``allowed[label(v)]`` (any int for FIXED) that is <= ``latest[s] - step(v, s)`` for
    every successor s. Waves satisfy ``wave[v] <= latest[v]`` (induction from the sinks),
    so ``latest`` exists. Forwards, if every predecessor got ``level[u] <= latest[u]``, then
    ``lowest[v] = max(level[u] + step(u, v)) <= latest[v]``, so ``[lowest[v], latest[v]]``
    holds an allowed level: ``latest[v]`` at least.

    *The choice.* A FIXED node takes ``lowest[v]``, which keeps its successors free. A
    labelled node joins the lowest level its label already uses inside
    ``[lowest[v], latest[v]]``; if there is none it opens ``latest[v]``. Opening late leaves
    room for nodes met later (independent branches, side outputs) to join, which is where
    this beats waves; the bound above holds whatever the choice.

    Complexity: O((V + E) log V) time (three passes over the edges, a bisect per node),
    O(V + E) memory.

    Example: ``U -> S1`` and an unrelated ``S2``. Waves put S2 at level 0 and S1 at level 1
    (two S groups); here S2 joins S1:

    >>> level_partition([[], [0], []], [1, 0, 0])
    [0, 1, 1]
    """
    if len(preds) != len(labels):
        raise PartitionError(f"level_partition: {len(preds)} predecessor lists for {len(labels)} labels; "
                             "give one of each per node")
    waves = _wave_levels(preds, labels)
    latest = _latest_levels(preds, labels, _levels_by_label(waves, labels))
    return _assign_levels(preds, labels, latest)


def _wave_levels(preds: Sequence[Sequence[int]], labels: Sequence[int]) -> list[int]:
    """The smallest solution of (1): topological waves. Checks the numbering is topological. O(V+E)."""
    level = [0] * len(labels)
    for v, sources in enumerate(preds):
        label = labels[v]
        lowest = 0
        for u in sources:  # the smallest level (1) allows; step(u, v) is 0 only within one non-FIXED label
            if not 0 <= u < v:
                raise PartitionError(f"level_partition: node {v} lists predecessor {u}; number the nodes in "
                                     "topological order (every predecessor index smaller than the node's)")
            candidate = level[u] + (label == FIXED or labels[u] != label)
            if candidate > lowest:
                lowest = candidate
        level[v] = lowest
    return level


def _levels_by_label(level: Sequence[int], labels: Sequence[int]) -> dict[int, list[int]]:
    """For every label, the sorted distinct levels its nodes have. O(V log V)."""
    found: dict[int, set[int]] = {}
    for label, lv in zip(labels, level):
        if label != FIXED:
            found.setdefault(label, set()).add(lv)
    return {label: sorted(levels) for label, levels in found.items()}


def _latest_levels(preds: Sequence[Sequence[int]], labels: Sequence[int],
                   allowed: Mapping[int, list[int]]) -> list[int]:
    """Backwards: the latest allowed level of every node that keeps all its successors placeable. O((V+E) log V)."""
    n = len(labels)
    bound = [n] * n  # a node without successors is unbounded; n exceeds every wave level
    latest = [0] * n
    for v in range(n - 1, -1, -1):
        label = labels[v]
        if label == FIXED:
            mine = bound[v]
        else:
            levels = allowed[label]
            mine = levels[bisect_right(levels, bound[v]) - 1]
        latest[v] = mine
        for u in preds[v]:
            limit = mine - (label == FIXED or labels[u] != label)
            if limit < bound[u]:
                bound[u] = limit
    return latest


def _assign_levels(preds: Sequence[Sequence[int]], labels: Sequence[int], latest: Sequence[int]) -> list[int]:
    """Forwards: join a level the label already uses in [lowest, latest], else open latest. O((V+E) log V)."""
    level = [0] * len(labels)
    in_use: dict[int, list[int]] = {}
    for v, sources in enumerate(preds):
        label = labels[v]
        lowest = 0
        for u in sources:  # the smallest level (1) allows, as in `_wave_levels`
            candidate = level[u] + (label == FIXED or labels[u] != label)
            if candidate > lowest:
                lowest = candidate
        if label == FIXED:
            level[v] = lowest
            continue
        used = in_use.setdefault(label, [])
        i = bisect_left(used, lowest)
        if i < len(used) and used[i] <= latest[v]:
            level[v] = used[i]
        else:
            level[v] = latest[v]
            insort(used, latest[v])
    return level


def coalesce_groups(preds: Sequence[Sequence[int]], labels: Sequence[int], levels: Sequence[int], *,
                    attempts: int = 2, budget: int = 64) -> list[int]:
    """Join (label, level) groups further where no path links them; per node, the first node of its group.

    `level_partition` keeps groups apart whenever their levels differ, even when nothing
    links them. This pass contracts every group (and every FIXED node) to one node, keeps a
    topological order of that contracted graph, and lets each group try to join one of the
    `attempts` latest groups of its label. Groups a and b (a first in the order) may join
    when no path leads from a to b through a third node. Every such path lies strictly
    between them in the order, so a search forward from a's successors, confined to that
    stretch, decides it. After a join the order is repaired as in Pearce and Kelly's dynamic
    topological sort: within the stretch, b's ancestors come first, then the joined group,
    then a's descendants. Edges from b's ancestors to a's descendants keep their direction;
    an edge the other way would be a path from a to b, which was excluded.

    *Acyclic.* The contracted graph starts acyclic (`level_partition`) and a join adds no
    cycle: one through the joined group would need a path from a to b through a third node
    (excluded) or from b to a (impossible, b comes later). *Bounded.* A search that looks
    at more than `budget` edges gives up and the join is skipped, so the pass costs
    O(G * attempts * budget) for G groups on top of O(V + E) to build the contracted graph,
    plus O(E log V) for moving edges on joins (the smaller side moves). Joining only merges
    groups, so the count never exceeds `level_partition`'s. FIXED nodes keep their own id.
    A search that reaches its target records that a reaches b; an attempt for a and b is
    refused without searching when a -> k and k -> b are recorded, since the search would
    meet that path (the records are dropped on every join, which can shorten paths).

    >>> coalesce_groups([[], [0]], [0, 0], [0, 1])  # a -> b of one label, put on two levels: they join
    [0, 0]
    >>> coalesce_groups([[], [0], [1]], [0, FIXED, 0], [0, 1, 2])  # a -> f -> b: f is in between
    [0, 1, 2]
    """
    graph, node_of, order = _contract_levels(preds, labels, levels)
    kept: dict[int, list[int]] = {}
    label_of = graph.label
    for x in order:  # the starting topological order (joins move positions, not this list)
        if label_of[x] == FIXED:
            continue
        mine = kept.setdefault(graph.label[x], [])
        for i in range(len(mine) - 1, max(-1, len(mine) - 1 - attempts), -1):
            joined = _try_join(graph, mine[i], x, budget)
            if joined is not None:
                del mine[i]
                x = joined
                break
        mine.append(x)
    first_node: dict[int, int] = {}
    parent, find = graph.parent, graph.find
    survivor = [x if parent[x] == x else find(x) for x in range(len(parent))]  # once per contracted node
    return [first_node.setdefault(survivor[node], v) for v, node in enumerate(node_of)]


@dataclass
class _Contracted:
    """The contracted graph of `coalesce_groups`, in a topological order kept by `position`."""

    label: list[int]
    successors: list[set[int]]
    predecessors: list[set[int]]
    position: list[int]
    #: union-find parent of every contracted node (itself while it has not been joined into another)
    parent: list[int]
    #: a -> nodes b that a reaches through a third node, as searches found (forgotten on every join)
    linked: dict[int, set[int]] = field(default_factory=dict)

    def find(self, node: int) -> int:
        """The surviving node `node` was joined into (itself if none), with path halving."""
        parent = self.parent
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node


def _contract_levels(preds: Sequence[Sequence[int]], labels: Sequence[int],
                     levels: Sequence[int]) -> tuple[_Contracted, list[int], list[int]]:
    """Contract each (label, level) group to one node; also return the contracted node of every node and a
    topological order of the contracted nodes (by level, then first node). O(V+E) plus a sort by level."""
    number: dict[tuple[int, int], int] = {}
    node_of = []
    label: list[int] = []
    level: list[int] = []
    for lab, lev in zip(labels, levels):  # nodes numbered by their first member: node i's first member precedes node i+1's
        if lab == FIXED:
            node_of.append(len(label))
            label.append(FIXED)
            level.append(lev)
        else:
            key = (lab, lev)
            node = number.get(key)
            if node is None:
                node = number[key] = len(label)
                label.append(lab)
                level.append(lev)
            node_of.append(node)
    size = len(label)
    successors: list[set[int]] = [set() for _ in range(size)]
    predecessors: list[set[int]] = [set() for _ in range(size)]
    for v, sources in enumerate(preds):
        b = node_of[v]
        for u in sources:
            a = node_of[u]
            if a != b:
                successors[a].add(b)
                predecessors[b].add(a)
    # levels grow along every contracted edge, so sorting by level is a topological order; node ids already
    # follow the first nodes, so a stable sort by level orders by (level, first node)
    order = sorted(range(size), key=level.__getitem__)
    position = [0] * size
    for i, node in enumerate(order):
        position[node] = i
    return _Contracted(label, successors, predecessors, position, list(range(size))), node_of, order


def _try_join(graph: _Contracted, p: int, q: int, budget: int) -> int | None:
    """Join contracted nodes p and q when no path links them through a third node; the survivor, else None."""
    a, b = (p, q) if graph.position[p] < graph.position[q] else (q, p)
    linked = graph.linked
    if b in linked.get(a, ()) or any(b in linked.get(k, ()) for k in linked.get(a, ())):
        return None  # a path a -> k -> b through a third node is known: the searches below would hit it
    low, high = graph.position[a], graph.position[b]
    descendants = _between(graph.successors[a], graph.successors, graph.position, low, high, b, budget)
    if descendants is None or descendants is _LINKED:
        if descendants is _LINKED:
            linked.setdefault(a, set()).add(b)
        return None
    ancestors = _between(graph.predecessors[b], graph.predecessors, graph.position, low, high, a, budget)
    if ancestors is None or ancestors is _LINKED:
        if ancestors is _LINKED:
            linked.setdefault(a, set()).add(b)
        return None
    slots = sorted([low, high] + [graph.position[x] for x in descendants | ancestors])
    survivor = _merge_nodes(graph, a, b)
    sequence = (sorted(ancestors, key=graph.position.__getitem__) + [survivor]
                + sorted(descendants, key=graph.position.__getitem__))
    for slot, node in zip(slots, sequence):  # one slot is left over: positions only need to grow
        graph.position[node] = slot
    return survivor


#: what `_between` returns when it reached its target: a path through a third node links the pair
_LINKED: set[int] = set()


def _between(starts: Iterable[int], neighbours: list[set[int]], position: list[int], low: int, high: int,
             target: int, budget: int) -> set[int] | None:
    """Nodes reachable from `starts` inside positions (low, high); `_LINKED` on reaching `target`, None when
    more than `budget` edges were looked at (the search gave up: a path may link the pair).

    Either way the pair may not join; which of the two it is does not depend on the order of
    the search (every edge of a reached node is looked at, so the budget is checked per node).
    """
    found = {x for x in starts if low < position[x] < high}
    stack = list(found)
    pop, push, add = stack.pop, stack.append, found.add
    looked = 0
    while stack:
        around = neighbours[pop()]
        if target in around:
            return _LINKED
        looked += len(around)
        if looked > budget:
            return None
        for y in around:
            if y not in found and low < position[y] < high:
                add(y)
                push(y)
    return found


def _merge_nodes(graph: _Contracted, a: int, b: int) -> int:
    """Contract a and b into whichever has more edges; return it. O(edges of the other)."""
    keep, drop = (a, b) if (len(graph.successors[a]) + len(graph.predecessors[a])
                            >= len(graph.successors[b]) + len(graph.predecessors[b])) else (b, a)
    for y in graph.successors[drop]:
        graph.predecessors[y].discard(drop)
        if y != keep:
            graph.predecessors[y].add(keep)
            graph.successors[keep].add(y)
    for y in graph.predecessors[drop]:
        graph.successors[y].discard(drop)
        if y != keep:
            graph.successors[y].add(keep)
            graph.predecessors[keep].add(y)
    graph.successors[keep].discard(drop)
    graph.predecessors[keep].discard(drop)
    graph.successors[drop], graph.predecessors[drop] = set(), set()
    graph.parent[drop] = keep
    graph.linked.clear()  # paths through a or b may now run through the joined node only
    return keep


def topological_order(preds: Sequence[Sequence[int]]) -> list[int]:
    """Kahn's algorithm, smallest ready index first; shorter than len(preds) when there is a cycle. O((V+E) log V)."""
    successors: list[list[int]] = [[] for _ in preds]
    waiting = [len(sources) for sources in preds]
    for v, sources in enumerate(preds):
        for u in sources:
            successors[u].append(v)
    ready = [v for v, count in enumerate(waiting) if count == 0]
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v in successors[u]:
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, v)
    return order
