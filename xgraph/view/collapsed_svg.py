"""Drawing the collapsed picture (`collapsed.py`) as SVG: subgraph boxes and labelled edges between them.

Every subgraph is a `<g class="sg-node" data-subgraph=NAME data-device=DEVICE data-sg-index=I>`
(I: its index in the collapsed scene's node list), inputs/outputs are `<g class="io ...">`,
every edge a `<g class="sg-edge" data-source=.. data-target=..>` holding its path and its label
("D2H · 2 tensors · 1.2 MB"); edges with a host/device copy also have class "crossing". Labels
sit at the middle of the route's last segment, in the row gap above the target box.
"""
from __future__ import annotations

from typing import Hashable

from xgraph.ir import Graph
from xgraph.view.collapsed import CollapsedScene, build_collapsed_scene, edge_label, layout_collapsed
from xgraph.view.layout import Layout
from xgraph.view.palette import CROSSING_COLOUR, device_colours, text_colour
from xgraph.view.scene import Edge, Node, build_scene
from xgraph.view.svg import (DEFS, FONT, LEGEND_HEIGHT, SVG_NS, edge_path, label_point, legend_svg, number,
                             summary_line, xml)

#: Approximate width of one character of an edge label (10 px font), for its background.
CHAR_WIDTH = 5.6


def _key_text(key: Hashable) -> str:
    return f"{key[0]}:{key[1]}" if isinstance(key, tuple) else str(key)


def _box(node: Node, index: int, layout: Layout, colours: dict[str, str]) -> str:
    x, y = layout.positions[node.key]
    w, h = layout.style.node_width, layout.style.node_height
    d = node.details
    if node.kind != "subgraph":
        return (f'<g class="io {node.kind}" data-tensor="{xml(node.name)}" data-sg-index="{index}" '
                f'transform="translate({number(x)},{number(y)})"><rect x="{number(-w / 2)}" y="{number(-h / 2 + 8)}" '
                f'width="{number(w)}" height="{number(h - 16)}" rx="{number(h / 2 - 8)}" fill="#ffffff" '
                f'stroke="#546e7a" '
                f'stroke-width="1.2"/><text y="4" text-anchor="middle" font-size="11" fill="#263238">'
                f'{xml(node.name[:30])}</text></g>')
    fill = colours[node.device]
    ink = text_colour(fill)
    ops = f"{d['ops']} op{'s' * (d['ops'] != 1)}"
    return (f'<g class="sg-node" data-subgraph="{xml(node.name)}" data-device="{xml(node.device)}" '
            f'data-sg-index="{index}" transform="translate({number(x)},{number(y)})">'
            f'<rect x="{number(-w / 2)}" y="{number(-h / 2)}" width="{number(w)}" height="{number(h)}" rx="7" '
            f'fill="{fill}" '
            f'stroke="#263238" stroke-width="1"/>'
            f'<text y="-5" text-anchor="middle" font-size="12.5" font-weight="600" fill="{ink}">'
            f'{xml(node.name[:30])}</text>'
            f'<text y="12" text-anchor="middle" font-size="11" fill="{ink}">{xml(node.label)} \u00b7 {ops}</text></g>')


def _edge(scene: CollapsedScene, edge: Edge, layout: Layout) -> str:
    points = layout.edges[(edge.source, edge.target)]
    label = edge_label(scene, edge)
    x, y = label_point(points)
    colour = CROSSING_COLOUR if edge.crossing else "#607d8b"
    dash = ' stroke-dasharray="7 4"' if edge.crossing else ""
    width = CHAR_WIDTH * len(label) + 8
    marker = "xg-arrow-crossing" if edge.crossing else "xg-arrow"
    tensors = xml(", ".join(edge.tensors))
    kind = "sg-edge crossing" if edge.crossing else "sg-edge"
    direction = f' data-direction="{edge.crossing}"' if edge.crossing else ""
    return (f'<g class="{kind}" data-source="{xml(_key_text(edge.source))}" '
            f'data-target="{xml(_key_text(edge.target))}"{direction}>'
            f'<path d="{edge_path(points)}" fill="none" stroke="{colour}" '
            f'stroke-width="{2.2 if edge.crossing else 1.4}"{dash} marker-end="url(#{marker})"/>'
            f'<g class="sg-edge-label"><rect x="{number(x - width / 2)}" y="{number(y - 8)}" width="{number(width)}" '
            f'height="15" rx="3" fill="#ffffff" fill-opacity="0.92" stroke="{colour}" stroke-width="0.6"/>'
            f'<text x="{number(x)}" y="{number(y + 3.5)}" text-anchor="middle" font-size="10" '
            f'font-weight="{700 if edge.crossing else 400}" fill="{colour}">{xml(label)}</text></g>'
            f'<title>{tensors}</title></g>')


def collapsed_drawing(scene: CollapsedScene, layout: Layout, element_id: str = "xg-view-subgraphs") -> str:
    """The collapsed picture without its `<svg>` element: edges (with labels) first, then the boxes."""
    edges = "".join(_edge(scene, e, layout) for e in scene.edges)
    colours = device_colours([*scene.device_ops, *(n.device for n in scene.nodes if n.kind == "subgraph")])
    boxes = "".join(_box(n, i, layout, colours) for i, n in enumerate(scene.nodes))
    return f'<g id="{element_id}"><g class="sg-edges">{edges}</g><g class="sg-nodes">{boxes}</g></g>'


def render_collapsed_svg(graph: Graph) -> str:
    """A standalone SVG of the collapsed picture: the legend strip, then one box per device subgraph."""
    scene = build_collapsed_scene(graph)
    layout = layout_collapsed(scene)
    legend, legend_width = legend_svg(build_scene(graph))
    margin = layout.style.margin
    width = max(layout.width, legend_width + 2 * margin)
    height = layout.height + LEGEND_HEIGHT
    summary = summary_line(build_scene(graph)) + " \u00b7 collapsed: one box per device subgraph"
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="{SVG_NS}" class="xgraph collapsed" width="{number(width)}" height="{number(height)}" '
            f'viewBox="0 0 {number(width)} {number(height)}" font-family="{xml(FONT)}">'
            f'<title>{xml(summary)}</title>{DEFS}<rect width="100%" height="100%" fill="#ffffff"/>'
            f'<g transform="translate({number(margin)},{number(margin)})">{legend}</g>'
            f'<g transform="translate(0,{number(LEGEND_HEIGHT)})">{collapsed_drawing(scene, layout)}</g></svg>\n')


__all__ = ["collapsed_drawing", "render_collapsed_svg"]
