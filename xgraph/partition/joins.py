"""Joining groups of a contracted DAG where no path links them: the second half of the merge algorithm.

`xgraph.partition.levels` groups the nodes of an integer DAG by (label, level), each group
(and every `FIXED` node) named by its first member. `join_groups` then lets each group try to
join one of the latest groups of its label (`coalesce_groups` in `levels` documents the rule,
why it stays acyclic and what it costs). Most attempts are settled by a short walk backwards
over the node DAG; the `Contracted` graph (one node per group, kept in a topological order by
`position`) is built only for an attempt that walk does not settle. Pure: integers in,
integers out.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from operator import and_, eq, ne

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
              order: list[int]) -> "Contracted":
        """The graph whose node x stands for the nodes v with ``node_of[v] == x`` (of label ``label[x]``),
        positioned by `order`, a topological order of those x. O(V + E)."""
        sources = list(map(node_of.__getitem__, chain.from_iterable(preds)))  # every edge, in C
        targets = list(chain.from_iterable(map(repeat, node_of, map(len, preds))))
        successors: list[set[int]] = [set() for _ in label]
        for a, b in compress(zip(sources, targets), map(ne, sources, targets)):
            successors[a].add(b)
        position = [0] * len(label)
        for i, x in enumerate(order):
            position[x] = i
        return cls(label, successors, position)

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


def join_groups(preds: Sequence[Sequence[int]], node_of: list[int], label: Sequence[int], level: Sequence[int],
                attempts: int, budget: int) -> list[int]:
    """Per node, the first node of its group once every group tried, in order of (level, first member), to join
    one of the `attempts` latest groups of its label. A group is named by its first member: ``node_of[v]``
    is the first member of v's group, and ``label[x]``, ``level[x]`` are that group's (a FIXED node is a
    group of its own). O(G * attempts * budget) on top of the contracted graph, O(V + E).

    Most attempts fail because a path through a third group links the pair. Such a path is looked
    for first, backwards from the later group's first member over `preds` (a few steps, `_LOOK_BACK`):
    finding one refuses the attempt exactly as the search would. The contracted graph is built only
    when an attempt is not refused so, and then it decides, as `coalesce_groups` describes.
    """
    groups = list(map(eq, node_of, range(len(node_of))))  # per node: is it the first member of its group
    # the labelled nodes in the topological order (level, first member) of all: levels grow along contracted edges
    order = sorted(compress(range(len(label)), map(and_, groups, map(ne, label, repeat(FIXED)))),
                   key=level.__getitem__)
    graph: Contracted | None = None
    linked: dict[int, set[int]] = {}
    find = None  # group of a node: node_of[u] until a join, then its survivor
    kept: dict[int, list[int]] = {}
    joins = 0
    for x in order:  # the starting topological order (joins move positions, not this list)
        lab = label[x]
        mine = kept.get(lab)
        if mine is None:
            mine = kept[lab] = []
        for i in range(len(mine) - 1, max(-1, len(mine) - 1 - attempts), -1):
            p = mine[i]
            a, b = (p, x) if graph is None or graph.position[p] < graph.position[x] else (x, p)
            known = linked.get(a)
            if known is not None and (b in known or any(b in linked.get(k, ()) for k in known)):
                continue  # a path a -> k -> b through a third node is known: a search would hit it
            if b == x and _reaches_back(preds, node_of, level, x, a, x, -1 if joins else level[a], find):
                linked.setdefault(a, set()).add(b)  # found: what the search would find, and record
                continue
            if graph is None:
                graph = Contracted.build(preds, node_of, label, sorted(compress(range(len(label)), groups),
                                                                       key=level.__getitem__))
                graph.linked = linked
            joined = _try_join(graph, a, b, budget)
            if joined is not None:
                joins += 1
                find = graph.find
                del mine[i]
                x = joined
                break
        mine.append(x)
    if not joins:  # every group survived: node_of already names each node's first member
        return list(node_of)
    parent = graph.parent
    survivor = [x if parent[x] == x else find(x) for x in range(len(parent))]
    first_node: dict[int, int] = {}
    return list(map(first_node.setdefault, map(survivor.__getitem__, node_of), range(len(node_of))))


#: how many nodes `_reaches_back` looks at before leaving the question to the contracted graph's search
_LOOK_BACK = 24


def _reaches_back(preds: Sequence[Sequence[int]], node_of: list[int], level: list[int], start: int, a: int,
                  b: int, floor: int, find) -> bool:
    """True when a path leads from group `a` through a node of a third group into node `start` of group `b`
    (so a and b may not join); False when none was found among `_LOOK_BACK` nodes. Nodes of groups at
    level `floor` or below cannot lie on such a path (levels grow along contracted edges) and are not
    followed; ``floor=-1`` and `find` (node group -> survivor) once groups have joined."""
    if find is None:
        stack = [u for u in preds[start] if node_of[u] != a and node_of[u] != b]
        if len(stack) == 1:  # the usual first steps: one way back, followed without a search
            u = stack[0]
            for _ in range(_LOOK_BACK):
                before = preds[u]
                if len(before) != 1:
                    break
                u = before[0]
                g = node_of[u]
                if g == a:
                    return True
                if level[g] <= floor:
                    return False
            stack = [u]
    else:
        stack = [u for u in preds[start] if find(node_of[u]) not in (a, b)]
    seen = set(stack)
    looked = 0
    while stack:
        looked += 1
        if looked > _LOOK_BACK:
            return False
        for u in preds[stack.pop()]:
            g = node_of[u]
            if find is not None:
                g = find(g)
            if g == a:
                return True
            if u not in seen and level[node_of[u]] > floor:
                seen.add(u)
                stack.append(u)
    return False


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
