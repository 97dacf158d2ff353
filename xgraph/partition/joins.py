"""Joining groups of a contracted DAG where no path links them: the second half of the merge algorithm.

`xgraph.partition.levels` groups the nodes of an integer DAG by (label, level) and contracts
every group (and every `FIXED` node) to one node of a `Contracted` graph, kept in a
topological order by `position`. `join_groups` then lets each group try to join one of the
latest groups of its label (`coalesce_groups` in `levels` documents the rule, why it stays
acyclic and what it costs). Pure: integers in, integers out.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from operator import ne

#: Label of a node that stays alone (never grouped); `xgraph.partition.levels.FIXED`.
FIXED = -1


class Contracted:
    """The contracted graph of `coalesce_groups`, in a topological order kept by `position`."""

    __slots__ = ("label", "successors", "_predecessors", "position", "parent", "linked")

    def __init__(self, label: list[int], successors: list[set[int]], position: list[int]):
        self.label = label
        self.successors = successors
        self._predecessors: list[set[int]] | None = None
        self.position = position
        #: union-find parent of every contracted node (itself while it has not been joined into another)
        self.parent = list(range(len(label)))
        #: a -> nodes b that a reaches through a third node, as searches found (forgotten on every join)
        self.linked: dict[int, set[int]] = {}

    @classmethod
    def build(cls, preds: Sequence[Sequence[int]], node_of: list[int], label: list[int],
              level: list[int]) -> "tuple[Contracted, list[int]]":
        """The graph whose node x stands for the nodes v with ``node_of[v] == x`` (numbered by first member, of
        `label` and `level`), and its topological order by (level, first member). O(V + E) plus a sort."""
        sources = list(map(node_of.__getitem__, chain.from_iterable(preds)))  # every edge, in C
        targets = list(chain.from_iterable(map(repeat, node_of, map(len, preds))))
        successors: list[set[int]] = [set() for _ in label]
        for a, b in compress(zip(sources, targets), map(ne, sources, targets)):
            successors[a].add(b)
        # levels grow along every contracted edge, so sorting by level is a topological order; node ids already
        # follow the first nodes, so a stable sort by level orders by (level, first node)
        order = sorted(range(len(label)), key=level.__getitem__)
        position = [0] * len(order)
        for i, x in enumerate(order):
            position[x] = i
        return cls(label, successors, position), order

    @property
    def predecessors(self) -> list[set[int]]:
        """Per node the nodes with an edge into it; built from the successors the first time a search or a
        join needs them (most attempts are refused by a forward search alone)."""
        found = self._predecessors
        if found is None:
            found = self._predecessors = [set() for _ in self.label]
            for a, around in enumerate(self.successors):
                for b in around:
                    found[b].add(a)
        return found

    def find(self, node: int) -> int:
        """The surviving node `node` was joined into (itself if none), with path halving."""
        parent = self.parent
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node


def join_groups(graph: Contracted, node_of: list[int], order: Iterable[int], attempts: int,
                budget: int) -> list[int]:
    """Per node, the first node of its group once every group of `order` (a topological order of the
    contracted nodes) tried to join one of the `attempts` latest groups of its label. O(G * attempts * budget)."""
    kept: dict[int, list[int]] = {}
    label_of, position, linked = graph.label, graph.position, graph.linked
    joins = 0
    for x in order:  # the starting topological order (joins move positions, not this list)
        label = label_of[x]
        if label == FIXED:
            continue
        mine = kept.get(label)
        if mine is None:
            mine = kept[label] = []
        for i in range(len(mine) - 1, max(-1, len(mine) - 1 - attempts), -1):
            p = mine[i]
            a, b = (p, x) if position[p] < position[x] else (x, p)
            known = linked.get(a)
            if known is not None and (b in known or any(b in linked.get(k, ()) for k in known)):
                continue  # a path a -> k -> b through a third node is known: a search would hit it
            joined = _try_join(graph, a, b, budget)
            if joined is not None:
                joins += 1
                del mine[i]
                x = joined
                break
        mine.append(x)
    first_node: dict[int, int] = {}
    if not joins:  # every contracted node survived: its first node is its first member's
        return list(map(first_node.setdefault, node_of, range(len(node_of))))
    parent, find = graph.parent, graph.find
    survivor = [x if parent[x] == x else find(x) for x in range(len(parent))]  # once per contracted node
    return list(map(first_node.setdefault, map(survivor.__getitem__, node_of), range(len(node_of))))


def _try_join(graph: Contracted, a: int, b: int, budget: int) -> int | None:
    """Join contracted nodes a and b (a first in the order) when no path links them through a third node;
    the survivor, else None."""
    position = graph.position
    low, high = position[a], position[b]
    descendants = _between(graph.successors[a], graph.successors, position, low, high, b, budget)
    if descendants is None or descendants is _LINKED:
        if descendants is _LINKED:
            graph.linked.setdefault(a, set()).add(b)
        return None
    ancestors = _between(graph.predecessors[b], graph.predecessors, position, low, high, a, budget)
    if ancestors is None or ancestors is _LINKED:
        if ancestors is _LINKED:
            graph.linked.setdefault(a, set()).add(b)
        return None
    slots = sorted([low, high] + [position[x] for x in descendants | ancestors])
    survivor = _merge_nodes(graph, a, b)
    sequence = (sorted(ancestors, key=position.__getitem__) + [survivor]
                + sorted(descendants, key=position.__getitem__))
    for slot, node in zip(slots, sequence):  # one slot is left over: positions only need to grow
        position[node] = slot
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


def _merge_nodes(graph: Contracted, a: int, b: int) -> int:
    """Contract a and b into whichever has more edges; return it. O(edges of the other)."""
    successors, predecessors = graph.successors, graph.predecessors
    keep, drop = (a, b) if (len(successors[a]) + len(predecessors[a])
                            >= len(successors[b]) + len(predecessors[b])) else (b, a)
    for y in successors[drop]:
        predecessors[y].discard(drop)
        if y != keep:
            predecessors[y].add(keep)
            successors[keep].add(y)
    for y in predecessors[drop]:
        successors[y].discard(drop)
        if y != keep:
            successors[y].add(keep)
            predecessors[keep].add(y)
    successors[keep].discard(drop)
    predecessors[keep].discard(drop)
    successors[drop], predecessors[drop] = set(), set()
    graph.parent[drop] = keep
    graph.linked.clear()  # paths through a or b may now run through the joined node only
    return keep
