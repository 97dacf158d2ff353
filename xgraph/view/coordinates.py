"""x coordinates for ordered rows: Brandes-Köpf ("Fast and Simple Horizontal Coordinate Assignment", 2001).

Each node aligns with the median of its neighbours in the row above (or below) into
vertical blocks, preferring long edges' inner segments (dummy to dummy) so that long edges
run straight; blocks are then packed as far left (or right) as spacing allows. The four
alignments (up/down x left/right) are shifted onto the narrowest one and each node takes
the mean of its two middle candidates. Main chains stay vertical and layouts do not drift
sideways, which averaging neighbour positions row by row does on residual networks.

Complexity: O(V + E) per alignment. Follows dagre's `position/bk.js`, without type-2 conflicts.
"""
from __future__ import annotations

from typing import Callable, Hashable

Rows = list[list[Hashable]]
Neighbours = dict[Hashable, list[Hashable]]


def _type1_conflicts(rows: Rows, up: Neighbours, is_dummy: Callable[[Hashable], bool]) -> set[tuple]:
    """Edges (upper, lower) with a real end that cross an inner segment (dummy to dummy)."""
    conflicts: set[tuple] = set()
    for upper, lower in zip(rows, rows[1:]):
        index = {n: i for i, n in enumerate(upper)}
        k0, scan = 0, 0
        for i, v in enumerate(lower):
            inner = next((u for u in up.get(v, ()) if is_dummy(u)), None) if is_dummy(v) else None
            k1 = index[inner] if inner is not None else len(upper)
            if inner is None and i != len(lower) - 1:
                continue
            for w in lower[scan:i + 1]:
                for u in up.get(w, ()):
                    if (index[u] < k0 or index[u] > k1) and not (is_dummy(u) and is_dummy(w)):
                        conflicts.add((u, w))
                        conflicts.add((w, u))
            scan, k0 = i + 1, k1
    return conflicts


def _align(rows: Rows, neighbours: Neighbours, conflicts: set[tuple], main: set) -> tuple[dict, dict]:
    """Vertical alignment: (root of each node's block, next node in the block, cyclic).

    A node aligns with the median of its neighbours on the main flow when it has any, so a
    chain does not bend towards the side inputs (weight generators) feeding it.
    """
    root = {n: n for row in rows for n in row}
    align = dict(root)
    position = {n: i for row in rows for i, n in enumerate(row)}
    for row in rows:
        previous = -1
        for v in row:
            linked = neighbours.get(v, ())
            linked = sorted([w for w in linked if w in main] or linked, key=position.__getitem__)
            if not linked:
                continue
            middle = (len(linked) - 1) / 2
            for m in range(int(middle), int(middle + 0.5) + 1):
                w = linked[m]
                if align[v] == v and previous < position[w] and (v, w) not in conflicts:
                    align[w] = v
                    align[v] = root[v] = root[w]
                    previous = position[w]
    return root, align


def _compact(rows: Rows, root: dict, separation: Callable[[Hashable, Hashable], float]) -> dict[Hashable, float]:
    """Horizontal compaction: blocks as far left as separation allows, then pulled right where free."""
    after: dict[Hashable, dict[Hashable, float]] = {}
    before: dict[Hashable, dict[Hashable, float]] = {}
    for row in rows:
        for left, right in zip(row, row[1:]):
            a, b = root[left], root[right]
            gap = max(separation(left, right), after.setdefault(a, {}).get(b, 0.0))
            after[a][b] = gap
            before.setdefault(b, {})[a] = gap
    blocks = list(dict.fromkeys(root[n] for row in rows for n in row))
    order = _toposort(blocks, after, before)
    x: dict[Hashable, float] = {}
    for b in order:
        x[b] = max((x[a] + gap for a, gap in before.get(b, {}).items()), default=0.0)
    for b in reversed(order):
        successors = after.get(b)
        if successors:
            x[b] = max(x[b], min(x[c] - gap for c, gap in successors.items()))
    return {n: x[root[n]] for row in rows for n in row}


def _toposort(blocks: list[Hashable], after: dict, before: dict) -> list[Hashable]:
    """Blocks in an order where every block follows the blocks left of it (Kahn's algorithm)."""
    indegree = {b: len(before.get(b, ())) for b in blocks}
    ready = [b for b in blocks if indegree[b] == 0]
    order = []
    while ready:
        b = ready.pop()
        order.append(b)
        for c in after.get(b, ()):
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    return order


def assign_x(rows: Rows, up: Neighbours, down: Neighbours, width: Callable[[Hashable], float],
             is_dummy: Callable[[Hashable], bool], node_gap: float, edge_gap: float,
             main: set | None = None) -> dict[Hashable, float]:
    """x centres for ordered `rows`; `up`/`down`: neighbours in the row above/below; `main`: the
    nodes of the main flow, preferred for alignment (default: all)."""
    def gap(n: Hashable) -> float:
        return edge_gap if is_dummy(n) else node_gap

    def separation(left: Hashable, right: Hashable) -> float:
        return (width(left) + width(right)) / 2 + (gap(left) + gap(right)) / 2

    conflicts = _type1_conflicts(rows, up, is_dummy)
    main = {n for row in rows for n in row} if main is None else main
    candidates = []
    for vertical_rows, neighbours in ((rows, up), (rows[::-1], down)):
        for mirrored in (False, True):
            ordered = [row[::-1] for row in vertical_rows] if mirrored else vertical_rows
            root, _ = _align(ordered, neighbours, conflicts, main)
            xs = _compact(ordered, root, separation)
            candidates.append(({n: -v for n, v in xs.items()} if mirrored else xs, mirrored))
    extent = [(min(xs[n] - width(n) / 2 for n in xs), max(xs[n] + width(n) / 2 for n in xs)) for xs, _ in candidates]
    narrowest = min(range(len(candidates)), key=lambda i: extent[i][1] - extent[i][0])
    low, high = extent[narrowest]
    shifted = []
    for (xs, mirrored), (lo, hi) in zip(candidates, extent):
        delta = high - hi if mirrored else low - lo
        shifted.append({n: v + delta for n, v in xs.items()})
    result = {}
    for n in shifted[0]:
        values = sorted(xs[n] for xs in shifted)
        result[n] = (values[1] + values[2]) / 2
    return result


__all__ = ["assign_x"]
