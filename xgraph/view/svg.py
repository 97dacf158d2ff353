"""The partition picture as SVG: ops coloured by device, device subgraphs as regions, host/device crossings marked.

Two views (`xgraph.view.collapsed.choose_view`): "ops", every op, each device subgraph a
region built from its own ops (`regions.py`, never overlapping another); "subgraphs", one box
per subgraph (`collapsed_svg.py`), the default for compiled graphs above COLLAPSE_ABOVE ops.
Edges are routed through the gaps between rows (long edges bend through every row they
cross), so they never run over a node; a crossing's H2D/D2H label sits in the row gap above
its target, clear of the region titles, which sit right on top of their first op.

Every op is a `<g class="op" data-op=NAME data-device=DEVICE data-type=TYPE data-index=I>`
(I: its index in the scene's node list), every device subgraph a `<g class="subgraph">`,
every edge a `<path class="edge">` (plus class "crossing" for a host/device copy). Colours
are presentation attributes, so the file renders the same in any SVG viewer.
"""
from __future__ import annotations

import re
from html import escape
from typing import Hashable

from xgraph.ir import Graph
from xgraph.view.layout import Layout
from xgraph.view.palette import CROSSING_COLOUR, device_colours, text_colour
from xgraph.view.regions import Region, subgraph_regions
from xgraph.view.scene import Box, Edge, Node, Scene, build_scene, layout_scene

SVG_NS = "http://www.w3.org/2000/svg"
FONT = "-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
#: Height of the legend strip above the drawing in a standalone SVG.
LEGEND_HEIGHT = 64.0
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml(text: str) -> str:
    """`text` escaped for XML text and attribute values; characters XML cannot hold become U+FFFD."""
    return escape(_NOT_XML.sub("\ufffd", text), quote=True)


def number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def edge_path(points: list[tuple[float, float]]) -> str:
    """An SVG path through `points`: vertical-tangent cubic curves, so bends through rows look smooth."""
    (x, y), rest = points[0], points[1:]
    parts = [f"M{number(x)} {number(y)}"]
    for nx_, ny in rest:
        mid = (y + ny) / 2
        parts.append(f"C{number(x)} {number(mid)} {number(nx_)} {number(mid)} {number(nx_)} {number(ny)}")
        x, y = nx_, ny
    return "".join(parts)


def _title(details: dict) -> str:
    """The native tooltip text of a node (standalone SVG only)."""
    lines = [f"{details.get('type', '')} {details.get('name', '')}"]
    if details.get("device"):
        lines.append(f"device: {details['device']} ({details.get('subgraph') or 'no subgraph'})")
    if "reason" in details:
        lines.append(f"why: {details['reason']}")
    lines += [f"in: {t}" for t in details.get("inputs", [])]
    lines += [f"out: {t}" for t in details.get("outputs", [])]
    lines += details.get("attributes", [])
    return "\n".join(lines)


def _node(node: Node, index: int, layout: Layout, titles: bool, colours: dict[str, str]) -> str:
    x, y = layout.positions[node.key]
    w, h = layout.style.node_width, layout.style.node_height
    title = f"<title>{xml(_title(node.details))}</title>" if titles else ""
    if node.kind == "op":
        fill = colours[node.device]
        ink = text_colour(fill)
        return (f'<g class="op" data-op="{xml(node.name)}" data-device="{xml(node.device)}" '
                f'data-type="{xml(node.label)}" data-subgraph="{xml(node.subgraph)}" data-index="{index}" '
                f'transform="translate({number(x)},{number(y)})">'
                f'<rect x="{number(-w / 2)}" y="{number(-h / 2)}" width="{number(w)}" height="{number(h)}" rx="5" '
                f'fill="{fill}" stroke="#263238" stroke-width="0.8"/>'
                f'<text y="-3" text-anchor="middle" font-size="12" font-weight="600" fill="{ink}">'
                f'{xml(_clip(node.label, 22))}</text>'
                f'<text y="11" text-anchor="middle" font-size="9.5" fill="{ink}">{xml(_clip(node.name, 26))}</text>'
                f'{title}</g>')
    return (f'<g class="io {node.kind}" data-tensor="{xml(node.name)}" data-index="{index}" '
            f'transform="translate({number(x)},{number(y)})">'
            f'<rect x="{number(-w / 2)}" y="{number(-h / 2 + 4)}" width="{number(w)}" height="{number(h - 8)}" '
            f'rx="{number(h / 2 - 4)}" fill="#ffffff" stroke="#546e7a" stroke-width="1.2"/>'
            f'<text y="-1" text-anchor="middle" font-size="10.5" fill="#263238">{xml(_clip(node.name, 24))}</text>'
            f'<text y="9" text-anchor="middle" font-size="8.5" fill="#546e7a">{xml(_clip(node.label, 28))}</text>'
            f'{title}</g>')


def label_point(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The midpoint of the route's last segment: in the row gap above the target, below any region title."""
    (x1, y1), (x2, y2) = points[-2], points[-1]
    return (x1 + x2) / 2, (y1 + y2) / 2


def _edge(edge: Edge, layout: Layout) -> str:
    points = layout.edges[(edge.source, edge.target)]
    tensors = xml(", ".join(edge.tensors))
    if not edge.crossing:
        return (f'<path class="edge" d="{edge_path(points)}" fill="none" stroke="#78909c" stroke-width="1.1" '
                f'marker-end="url(#xg-arrow)"><title>{tensors}</title></path>')
    x, y = label_point(points)
    return (f'<g class="crossing" data-direction="{edge.crossing}">'
            f'<path class="edge crossing" d="{edge_path(points)}" fill="none" stroke="{CROSSING_COLOUR}" '
            f'stroke-width="2.4" stroke-dasharray="7 4" marker-end="url(#xg-arrow-crossing)">'
            f'<title>{edge.crossing} copy: {tensors}</title></path>'
            f'<text x="{number(x + 6)}" y="{number(y + 4)}" font-size="10" font-weight="700" '
            f'fill="{CROSSING_COLOUR}">{edge.crossing}</text></g>')


def box_regions(scene: Scene, layout: Layout) -> dict[str, Region]:
    """Each subgraph's region (rectangles around its own ops), by subgraph name."""
    return {r.name: r for r in subgraph_regions(layout, {b.name: b.members for b in scene.boxes})}


def box_bounds(box: Box, layout: Layout) -> tuple[float, float, float, float]:
    """(left, top, width, height) of the rectangle around a subgraph's region."""
    [region] = subgraph_regions(layout, {box.name: box.members})
    return region.bounds


def box_label(box: Box) -> str:
    """"subgraph_n0 · AICORE · 176 ops", plus the estimated device time when known."""
    parts = [box.name, box.device or "no device", f"{len(box.members)} op{'s' * (len(box.members) != 1)}"]
    if box.estimated_time_us is not None:
        parts.append(f"est. {box.estimated_time_us:.1f} \u00b5s")
    return " \u00b7 ".join(parts)


def _box(box: Box, region: Region, colours: dict[str, str]) -> str:
    colour = colours[box.device]
    runner = ", ".join(f"{mode}={name}" for mode, name in box.runner.items()) or "none"
    rects = "".join(f'<rect x="{number(x)}" y="{number(y)}" width="{number(w)}" height="{number(h)}"/>'
                    for x, y, w, h in region.rects)
    room = max(4, int(region.title_width / 6.2))  # characters of an 11 px title that fit on the segment
    full = box_label(box)
    short = f"{box.name} \u00b7 {len(box.members)} op{'s' * (len(box.members) != 1)}"
    label = full if len(full) <= room else _clip(short, room)
    x, y = region.title_at
    return (f'<g class="subgraph" data-subgraph="{xml(box.name)}" data-device="{xml(box.device)}">'
            f'<g class="region" fill="{colour}" fill-opacity="0.10" stroke="none">{rects}</g>'
            f'<text x="{number(x)}" y="{number(y)}" font-size="11" font-weight="600" fill="{colour}" '
            f'stroke="#ffffff" stroke-width="3" paint-order="stroke">'  # a halo: edges pass behind the title
            f'{xml(label)}</text><title>{xml(box_label(box))}\nrunner: {xml(runner)}</title></g>')


def legend_entries(scene: Scene) -> list[tuple[str, str, int]]:
    """(device, colour, op count) per device, most ops first (ties by name)."""
    ordered = sorted(scene.device_ops.items(), key=lambda item: (-item[1], item[0]))
    colours = device_colours(scene.device_ops)
    return [(device or "not placed", colours[device], count) for device, count in ordered]


def summary_line(scene: Scene) -> str:
    """"resnet50 · 176 ops · 1 device subgraph · 0 host/device crossings"."""
    ops = sum(scene.device_ops.values())
    parts = [scene.title, f"{ops} op{'s' * (ops != 1)}"]
    if scene.compiled:
        parts.append(f"{len(scene.boxes)} device subgraph{'s' * (len(scene.boxes) != 1)}")
        parts.append(f"{scene.crossings} host/device crossing{'s' * (scene.crossings != 1)}")
    else:
        parts.append("not compiled")
    return " \u00b7 ".join(parts)


def legend_svg(scene: Scene) -> tuple[str, float]:
    """The legend strip and its width."""
    items, x = [], 0.0
    for device, colour, count in legend_entries(scene):
        text = f"{device} ({count})"
        items.append(f'<g class="legend-device" data-device="{xml(device)}" transform="translate({number(x)},30)">'
                     f'<rect width="14" height="14" rx="3" fill="{colour}"/>'
                     f'<text x="20" y="11.5" font-size="12">{xml(text)}</text></g>')
        x += 34 + 7.2 * len(text)
    if scene.compiled:
        items.append(f'<g class="legend-crossing" transform="translate({number(x)},30)">'
                     f'<line x1="0" y1="7" x2="30" y2="7" stroke="{CROSSING_COLOUR}" stroke-width="2.4" '
                     f'stroke-dasharray="7 4"/><text x="36" y="11.5" font-size="12">host/device copy '
                     f'({scene.crossings})</text></g>')
        x += 190
    header = f'<text y="14" font-size="14" font-weight="600">{xml(summary_line(scene))}</text>'
    return f'<g class="legend">{header}{"".join(items)}</g>', max(x, 8.0 * len(summary_line(scene)))


DEFS = (f'<defs><marker id="xg-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#78909c"/></marker>'
        f'<marker id="xg-arrow-crossing" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
        f'orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="{CROSSING_COLOUR}"/></marker></defs>')


def drawing(scene: Scene, layout: Layout, titles: bool = True, element_id: str = "xg-scene") -> str:
    """The picture without its `<svg>` element: `<g id=element_id>` with regions, edges and nodes, in that order."""
    index_of: dict[Hashable, int] = {n.key: i for i, n in enumerate(scene.nodes)}
    regions = box_regions(scene, layout)
    colours = device_colours([*scene.device_ops, *(b.device for b in scene.boxes)])
    boxes = "".join(_box(b, regions[b.name], colours) for b in scene.boxes if b.name in regions)
    edges = "".join(_edge(e, layout) for e in scene.edges if not e.crossing)
    crossings = "".join(_edge(e, layout) for e in scene.edges if e.crossing)
    nodes = "".join(_node(n, index_of[n.key], layout, titles, colours) for n in scene.nodes)
    return (f'<g id="{element_id}"><g class="subgraphs">{boxes}</g><g class="edges">{edges}{crossings}</g>'
            f'<g class="nodes">{nodes}</g></g>')


def scene_svg(scene: Scene, layout: Layout) -> str:
    """A standalone SVG document: legend strip on top, then the drawing."""
    legend, legend_width = legend_svg(scene)
    margin = layout.style.margin
    width = max(layout.width, legend_width + 2 * margin)
    height = layout.height + LEGEND_HEIGHT
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="{SVG_NS}" class="xgraph" width="{number(width)}" height="{number(height)}" '
            f'viewBox="0 0 {number(width)} {number(height)}" font-family="{xml(FONT)}">'
            f'<title>{xml(summary_line(scene))}</title>{DEFS}'
            f'<rect width="100%" height="100%" fill="#ffffff"/>'
            f'<g transform="translate({number(margin)},{number(margin)})">{legend}</g>'
            f'<g transform="translate(0,{number(LEGEND_HEIGHT)})">{drawing(scene, layout)}</g></svg>\n')


__all__ = ["DEFS", "box_bounds", "box_label", "box_regions", "drawing", "edge_path", "label_point", "legend_entries",
           "legend_svg", "number", "scene_svg", "summary_line", "xml"]
