"""The partition picture as one self-contained HTML page: inline SVG, CSS and script, nothing fetched.

The page pans (drag) and zooms (wheel); hovering an op shows its type, shapes, attributes
and why it was placed where it is; the search box finds an op by name. `picture_html` is
the interactive picture alone, which the compile report embeds too.

A compiled graph carries two views in one SVG: the op-level picture (`#xg-view-ops`) and
the collapsed one, one box per device subgraph (`#xg-view-subgraphs`). The collapsed view is
shown first above COLLAPSE_ABOVE ops (`choose_view`); clicking a subgraph box expands it (the
op view, zoomed to that subgraph's region); the toolbar's view button switches back.
"""
from __future__ import annotations

import json
from typing import Any

from xgraph.ir import Graph
from xgraph.view.assets import CSS, JS
from xgraph.view.layout import Layout
from xgraph.view.palette import CROSSING_COLOUR
from xgraph.view.scene import Scene, build_scene, layout_scene
from xgraph.view.svg import DEFS, FONT, SVG_NS, box_label, box_regions, drawing, legend_entries, summary_line, xml


def _round(value: float) -> float:
    return round(value, 1)


def view_data(scene: Scene, layout: Layout, collapsed: Any = None, collapsed_layout: Layout | None = None,
              view: str = "ops") -> dict[str, Any]:
    """What the script needs: per node (same index as data-index) its facts and centre, per box its region,
    per collapsed node (data-sg-index) its facts and centre, each view's size and the view shown first."""
    nodes = []
    for node in scene.nodes:
        x, y = layout.positions[node.key]
        nodes.append({"kind": node.kind, **node.details, "x": _round(x), "y": _round(y)})
    regions = box_regions(scene, layout)
    boxes = [{"name": b.name, "device": b.device, "ops": len(b.members), "runner": b.runner,
              "estimated_time_us": b.estimated_time_us, "bounds": [_round(v) for v in regions[b.name].bounds],
              "rects": [[_round(v) for v in r] for r in regions[b.name].rects]}
             for b in scene.boxes if b.name in regions]
    views = {"ops": {"width": _round(layout.width), "height": _round(layout.height)}}
    sg_nodes = []
    if collapsed is not None and collapsed_layout is not None:
        views["subgraphs"] = {"width": _round(collapsed_layout.width), "height": _round(collapsed_layout.height)}
        for node in collapsed.nodes:
            x, y = collapsed_layout.positions[node.key]
            sg_nodes.append({"kind": node.kind, **node.details, "x": _round(x), "y": _round(y)})
    return {"title": scene.title, "width": _round(layout.width), "height": _round(layout.height),
            "nodes": nodes, "boxes": boxes, "crossings": scene.crossings, "views": views, "view": view,
            "sg_nodes": sg_nodes}


def script_json(value: Any) -> str:
    """JSON safe inside a `<script>` element: every `<`, `>` and `&` as a \\u escape, so no name
    (`</script>`, `<!--<script>`) can end the element early or switch the parser's script state."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def legend_html(scene: Scene) -> str:
    """Device colours with op counts, and the crossing count."""
    items = [f'<li data-device="{xml(device)}"><span class="xg-swatch" style="background:{colour}"></span>'
             f'{xml(device)} <small>({count} op{"s" * (count != 1)})</small></li>'
             for device, colour, count in legend_entries(scene)]
    if scene.compiled:
        items.append(f'<li class="xg-crossing-key"><span class="xg-swatch" style="background:{CROSSING_COLOUR}">'
                     f'</span>host/device copies: <span id="xg-crossings">{scene.crossings}</span></li>')
    return f'<ul class="xg-legend">{"".join(items)}</ul>'


def picture_html(scene: Scene, layout: Layout, graph: Graph | None = None, view: str = "ops") -> str:
    """The interactive picture: toolbar (search, fit, 1:1, view), the SVG stage with its tooltip, and the node data.

    With a compiled `graph`, the collapsed view is included too; `view` is the one shown first.
    """
    collapsed = collapsed_layout = None
    extra = ""
    if graph is not None and scene.compiled:
        from xgraph.view.collapsed import build_collapsed_scene, layout_collapsed
        from xgraph.view.collapsed_svg import collapsed_drawing
        collapsed = build_collapsed_scene(graph)
        collapsed_layout = layout_collapsed(collapsed)
        extra = collapsed_drawing(collapsed, collapsed_layout)
    else:
        view = "ops"
    toggle = ('<button id="xg-view-toggle" type="button" title="switch between one box per subgraph and every op (v)">'
              f'{"Show ops" if view == "subgraphs" else "Show subgraphs"}</button>') if extra else ""
    data = view_data(scene, layout, collapsed, collapsed_layout, view)
    return (f'<section class="xg-picture" data-view="{view}">'
            f'<div class="xg-toolbar"><input id="xg-search" type="search" placeholder="find op by name  (/)" '
            f'autocomplete="off" spellcheck="false"><button id="xg-fit" type="button" title="fit all (f)">Fit</button>'
            f'<button id="xg-actual" type="button">1:1</button>{toggle}'
            f'<span id="xg-status" class="xg-status"></span></div>'
            f'<div class="xg-stage"><svg xmlns="{SVG_NS}" id="xg-canvas" font-family="{xml(FONT)}" '
            f'role="img" aria-label="{xml(summary_line(scene))}">{DEFS}<g id="xg-scene">'
            f'{drawing(scene, layout, titles=False, element_id="xg-view-ops")}{extra}</g></svg>'
            f'<div id="xg-tooltip" hidden></div></div>'
            f'<script type="application/json" id="xg-data">{script_json(data)}</script>'
            f'</section>')


def page(title: str, body: str, extra_css: str = "", extra_js: str = "") -> str:
    """A complete HTML document with the view stylesheet and script inlined."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{xml(title)}</title>'
            f'<style>{CSS}{extra_css}</style></head><body>{body}<script>{JS}{extra_js}</script></body></html>\n')


_PAGE_CSS = """
body { display: flex; flex-direction: column; height: 100vh; }
header { padding: 10px 14px 8px; background: #fff; border-bottom: 1px solid #d6dae0; }
main { flex: 1; min-height: 0; display: flex; padding: 8px; gap: 8px; }
main .xg-picture { flex: 1; }
aside { width: 280px; overflow: auto; background: #fff; border: 1px solid #d6dae0; border-radius: 6px;
        padding: 8px 10px; font-size: 13px; }
aside ol { margin: 0; padding-left: 20px; }
aside a { color: inherit; text-decoration: none; }
aside a:hover { text-decoration: underline; }
"""


def subgraph_list_html(scene: Scene) -> str:
    """The device subgraphs in topological order, each a link that zooms to its box."""
    if not scene.boxes:
        return "<p>Not compiled: the graph has no device subgraphs yet (compile it with xcompile).</p>"
    items = []
    for b in scene.boxes:
        label = xml(box_label(b))
        items.append(f'<li><a href="#" data-goto-subgraph="{xml(b.name)}">{label}</a></li>')
    return f'<ol class="xg-subgraphs">{"".join(items)}</ol>'


def scene_html(scene: Scene, layout: Layout, graph: Graph | None = None, view: str = "ops") -> str:
    """The full picture page of a scene (with the collapsed view when `graph` is given and compiled)."""
    body = (f'<header><h1>{xml(summary_line(scene))}</h1>{legend_html(scene)}</header>'
            f'<main>{picture_html(scene, layout, graph, view)}<aside><h2 style="margin-top:0">Device subgraphs</h2>'
            f'{subgraph_list_html(scene)}</aside></main>')
    return page(f"{scene.title} \u2014 xgraph", body, _PAGE_CSS)


def render_html(graph: Graph, layout: Layout | None = None, view: str = "auto") -> str:
    """The partition picture of `graph` as a self-contained HTML page (`layout` computed when None).

    `view`: which view shows first, "ops", "subgraphs" or "auto" (subgraphs above COLLAPSE_ABOVE ops).
    """
    from xgraph.view.collapsed import choose_view
    scene = build_scene(graph)
    return scene_html(scene, layout or layout_scene(scene), graph, choose_view(graph, view))


def write_html(graph: Graph, path: str, view: str = "auto") -> None:
    """Write the partition picture page of `graph` to `path` (atomically); `view` as for `render_html`."""
    from xgraph.view.files import write_text
    write_text(path, render_html(graph, view=view))


__all__ = ["legend_html", "page", "picture_html", "render_html", "scene_html", "script_json", "subgraph_list_html",
           "view_data", "write_html"]
