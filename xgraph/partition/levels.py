"""Grouping the nodes of an integer DAG by label without making a cycle: the algorithm behind merges.

Everything here works on a plain DAG, pure, with no Subgraph in sight: nodes ``0..n-1``
numbered in topological order, ``preds[v]`` the indices of v's predecessors, and a label per
node (an int >= 0 for a node that may share a group with nodes of the same label, or `FIXED`
for a node that stays alone).

* `level_partition(preds, labels)` gives every node a level so that grouping by
  (label, level) is acyclic and never worse than topological waves.
* `coalesce_groups(preds, labels, levels)` joins those groups further wherever an exact,
  budgeted path search allows.
* `group_nodes(preds, labels)` is the two in one go (what `group_children` runs): the same
  groups with a pass over the nodes less.
* `topological_order(preds)` numbers a DAG given in any order (Kahn's algorithm), so that
  it can be fed to the two above.

The contracted graph the joins work on, and the joins, are `xgraph.partition.joins`.

Why acyclic matters: `xgraph.partition.merge` turns a root's children into such a DAG and
merges each group into one subgraph, and a runner executes a subgraph as a unit, so a cycle
among the groups (A feeds B, B feeds A) could never be scheduled. Both functions guarantee
acyclicity by construction; their docstrings give the argument and the complexity.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from operator import lt

from xgraph.errors import PartitionError
from xgraph.partition.joins import FIXED, join_groups


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
    _check_dag(preds, labels)
    return _assign_and_number(preds, labels, _latest(preds, labels))[1]


def group_nodes(preds: Sequence[Sequence[int]], labels: Sequence[int], *, attempts: int = 2,
                budget: int = 64, numbered: bool = False) -> list[int]:
    """``coalesce_groups(preds, labels, level_partition(preds, labels), ...)`` with a pass less: per node,
    the first node of its group. The levels are given and the groups numbered in one forward pass.
    Pass ``numbered=True`` only when every predecessor index is known to be smaller than its node's
    (`xgraph.partition.merge.children_dag` guarantees it); otherwise that is checked.

    >>> group_nodes([[], [0], []], [1, 0, 0])
    [0, 1, 1]
    """
    if not numbered:
        _check_dag(preds, labels)
    node_of, level = _assign_and_number(preds, labels, _latest(preds, labels))
    return join_groups(preds, node_of, labels, level, attempts, budget)


def _check_dag(preds: Sequence[Sequence[int]], labels: Sequence[int]) -> None:
    """Raise PartitionError unless there is one label per node and every predecessor index is smaller than its
    node's (checked in C; the loop only names the first offender)."""
    if len(preds) != len(labels):
        raise PartitionError(f"level_partition: {len(preds)} predecessor lists for {len(labels)} labels; "
                             "give one of each per node")
    sources = chain.from_iterable(preds)
    nodes = chain.from_iterable(map(repeat, range(len(preds)), map(len, preds)))
    if all(map(lt, sources, nodes)) and not any(map(lt, chain.from_iterable(preds), repeat(0))):
        return
    for v, sources in enumerate(preds):
        for u in sources:
            if not 0 <= u < v:
                raise PartitionError(f"level_partition: node {v} lists predecessor {u}; number the nodes in "
                                     "topological order (every predecessor index smaller than the node's)")


def _latest(preds: Sequence[Sequence[int]], labels: Sequence[int]) -> list[int]:
    """The latest level of every node (`_latest_levels`) from the waves, on a checked DAG."""
    return _latest_levels(preds, labels, _levels_by_label(_wave_levels(preds, labels), labels))


def _wave_levels(preds: Sequence[Sequence[int]], labels: Sequence[int]) -> list[int]:
    """The smallest solution of (1): topological waves, on a numbering `_check_dag` accepted. O(V+E)."""
    level = [0] * len(labels)
    for v, sources in enumerate(preds):
        if not sources:
            continue
        label = labels[v]
        lowest = 0
        for u in sources:  # the smallest level (1) allows; step(u, v) is 0 only within one non-FIXED label
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


def _assign_and_number(preds: Sequence[Sequence[int]], labels: Sequence[int],
                       latest: Sequence[int]) -> tuple[list[int], list[int]]:
    """Forwards: each node joins a level its label already uses in [lowest, latest], else opens latest
    (`level_partition`'s choice), naming the groups as it goes: per node the first member of its group (a FIXED
    node is its own), and per node its level. O((V+E) log V)."""
    n = len(labels)
    level = [0] * n
    node_of = list(range(n))  # a FIXED node, and the first member of a group, names itself
    in_use: dict[int, tuple[list[int], dict[int, int]]] = {}
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
        mine = in_use.get(label)
        if mine is None:
            mine = in_use[label] = ([], {})
        used, firsts = mine  # the label's levels in use, sorted, and the first member of each one's group
        i = bisect_left(used, lowest)
        lev = latest[v]
        if i < len(used) and used[i] <= lev:
            lev = used[i]
            level[v] = lev
            node_of[v] = firsts[lev]
            continue
        insort(used, lev)  # open latest[v]: new to the label (were it in use, used[i] would be it)
        level[v] = lev
        node_of[v] = firsts.setdefault(lev, v)
    return node_of, level


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
    meet that path (the records are dropped on every join, which can shorten paths). Before any
    search, a few steps backwards from b's first member look for such a path (`xgraph.partition.
    joins`); most refusals end there, and the contracted graph is built only if one does not.

    >>> coalesce_groups([[], [0]], [0, 0], [0, 1])  # a -> b of one label, put on two levels: they join
    [0, 0]
    >>> coalesce_groups([[], [0], [1]], [0, FIXED, 0], [0, 1, 2])  # a -> f -> b: f is in between
    [0, 1, 2]
    """
    return join_groups(preds, _first_members(labels, levels), labels, levels, attempts, budget)


def _first_members(labels: Sequence[int], levels: Sequence[int]) -> list[int]:
    """Per node the first member of its (label, level) group (a FIXED node is its own). O(V)."""
    first: dict[tuple[int, int], int] = {}
    return [v if lab == FIXED else first.setdefault((lab, lev), v) for v, (lab, lev) in enumerate(zip(labels, levels))]


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
