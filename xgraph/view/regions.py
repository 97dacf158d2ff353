"""Subgraph regions of the op-level picture: each subgraph drawn as the union of rectangles around its own ops.

A bounding rectangle per subgraph overlaps wherever subgraphs interleave (a plugin's
subgraph between two rows of another). A region instead is built row by row: the ops of one
subgraph that sit next to each other in a row (no other subgraph's op between them) become
one padded segment, and segments of the same subgraph in adjacent rows are joined by a band
over their common x range. Because ops never overlap and padding stays below half the gap
between nodes and rows, regions of different subgraphs never overlap:

* two segments in one row are separated by at least one node gap minus two paddings;
* a band lies inside the x range of both segments it joins, so two bands crossing one row
  gap lie inside disjoint segments' ranges.

The title goes in the top padding of the region's first segment (topmost, then leftmost),
which no other region, node or edge label uses. O(V log V) for V nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from xgraph.view.layout import Layout

#: Padding between a subgraph's ops and its region, left/right and below.
PAD = 8.0
#: Padding above a segment: room for the title line.
TITLE_PAD = 18.0

Rect = tuple[float, float, float, float]  # left, top, width, height


@dataclass(frozen=True)
class Region:
    """A subgraph's region: its rectangles (segments and bands), title anchor and bounding box."""

    name: str
    rects: tuple[Rect, ...]
    title_at: tuple[float, float]
    title_width: float
    bounds: Rect


def _rows(layout: Layout, keys: list[Hashable]) -> dict[int, list[Hashable]]:
    rows: dict[int, list[Hashable]] = {}
    for key in keys:
        rows.setdefault(layout.layer_of[key], []).append(key)
    return rows


def subgraph_regions(layout: Layout, members: dict[str, tuple[Hashable, ...]]) -> list[Region]:
    """One Region per subgraph name (in `members` order) from the op layout; members: subgraph -> op keys."""
    w, h = layout.style.node_width / 2, layout.style.node_height / 2
    owner = {key: name for name, keys in members.items() for key in keys}
    drawn = [key for key in layout.positions if key in owner]
    rows = _rows(layout, drawn)
    segments: dict[str, list[tuple[int, float, float, float]]] = {name: [] for name in members}  # row, y, l, r
    for row, keys in rows.items():
        keys.sort(key=lambda k: layout.positions[k][0])
        run: list[Hashable] = []
        for key in keys + [None]:
            if run and (key is None or owner[key] != owner[run[0]]):
                left = layout.positions[run[0]][0] - w - PAD
                right = layout.positions[run[-1]][0] + w + PAD
                segments[owner[run[0]]].append((row, layout.positions[run[0]][1], left, right))
                run = []
            if key is not None:
                run.append(key)
    row_gap = layout.style.node_height + layout.style.y_gap
    regions = []
    for name in members:
        segs = sorted(segments[name])
        if not segs:
            continue
        rects: list[Rect] = [(left, y - h - TITLE_PAD, right - left, 2 * h + TITLE_PAD + PAD)
                             for _, y, left, right in segs]
        by_row: dict[int, list[tuple[float, float, float]]] = {}
        for row, y, left, right in segs:
            by_row.setdefault(row, []).append((y, left, right))
        for row, spans in by_row.items():
            below = by_row.get(row + 1, [])
            for y, left, right in spans:
                for _, left2, right2 in below:
                    lo, hi = max(left, left2), min(right, right2)
                    if hi > lo:  # a band from this segment's bottom to the next row's segment top
                        rects.append((lo, y + h + PAD, hi - lo, row_gap - 2 * h - PAD - TITLE_PAD))
        _, first_y, first_left, first_right = segs[0]
        left = min(r[0] for r in rects)
        top = min(r[1] for r in rects)
        right = max(r[0] + r[2] for r in rects)
        bottom = max(r[1] + r[3] for r in rects)
        regions.append(Region(name, tuple(rects), (first_left + 6, first_y - h - 5), first_right - first_left - 12,
                              (left, top, right - left, bottom - top)))
    return regions


def overlap(a: Rect, b: Rect) -> bool:
    """True when two rectangles share interior area (touching edges do not count)."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


__all__ = ["PAD", "TITLE_PAD", "Rect", "Region", "overlap", "subgraph_regions"]
